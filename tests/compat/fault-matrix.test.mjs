// The fault matrix: every recovery of fault-matrix.json driven through every door Keel
// has — its own event stream, the AI SDK UI message stream (the `ai` package's
// `readUIMessageStream`) and the Responses stream (the `openai` package's `ResponseStream`
// accumulator). In each cell the view the client built equals the reply stored in Keel
// (read back through the API), and every stream ends with its terminal event.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import OpenAI from "openai";
import { parseJsonEventStream, readUIMessageStream, uiMessageChunkSchema } from "ai";
import { Daemon, until, words } from "./daemon.mjs";

const table = JSON.parse(readFileSync(new URL("./fault-matrix.json", import.meta.url), "utf8"));
const daemon = new Daemon(table.config);
before(() => daemon.start());
after(() => daemon.stop());

const IDLE = new Set(["waiting", "requires_action", "error"]);
const LOOKUP = { name: "lookup", description: "Looks things up", parameters: { type: "object", properties: {} } };
let serial = 0;

/** The cell's `#mock` script, with an id of its own (faults with `times` count per id). */
function script(cell, door) {
  const steps = cell.steps.map(({ words: count, ...step }) => (count ? { ...step, text: words(count) } : step));
  return { id: `${door}-${process.pid}-${++serial}`, steps };
}
const mock = (text, s) => `${text}\n#mock ${JSON.stringify(s)}`;
const url = (path) => `${daemon.url}/api/v1${path}`;

async function call(method, path, body) {
  const response = await fetch(url(path), {
    method,
    headers: body ? { "content-type": "application/json" } : {},
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await response.text();
  assert.ok(response.ok, `${method} ${path}: ${response.status} ${text}`);
  return text ? JSON.parse(text) : null;
}
const messages = async (id, query = "") => (await call("GET", `/chats/${id}/messages${query}`)).messages;
const settled = (id) =>
  until(async () => IDLE.has((await call("GET", `/chats/${id}`)).status), 30000, "the chat to be idle");
/** The chat the newest request created (the tests of this file run one at a time). */
const newestChat = async () => (await call("GET", "/chats?limit=1")).chats[0].id;
const firstUser = async (id) => (await messages(id)).find((m) => m.role === "user").id;

/** What another client does in the middle of a reply. */
let killed = false; // the daemon was killed under the cell's open streams
const actions = {
  async kill() {
    killed = true;
    await daemon.kill();
    await daemon.start();
  },
  async edit(id) {
    const edited = mock("edited", { text: "The reply to the edit.", rate: 50 });
    await call("PUT", `/chats/${id}/messages/${await firstUser(id)}`, { text: edited });
  },
};

/** Makes a second branch (an edit of the first message) and switches back to the first. */
async function twoBranchesThenSwitchBack(id) {
  await settled(id);
  const first = await messages(id);
  await actions.edit(id);
  await settled(id);
  const edited = await messages(id);
  await call("POST", `/chats/${id}/branch`, { message_id: first.at(-1).id });
  return { first, edited };
}

// ---- Keel's own event stream -------------------------------------------------------------

/** Server-Sent Events of a fetch response: `{id, event, data}` each. */
async function* sse(response) {
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const chunk of response.body) {
    buffer += decoder.decode(chunk, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const event = { id: null, event: "message", data: "" };
      for (const line of block.split("\n")) {
        const at = line.indexOf(":");
        if (at <= 0) continue;
        const [field, value] = [line.slice(0, at), line.slice(at + 1).replace(/^ /, "")];
        if (field === "data") event.data += value;
        else if (field in event) event[field] = value;
      }
      if (event.data) yield event;
    }
  }
}

/** A client of Keel's event stream as docs/api.md describes one. */
class NativeView {
  constructor() {
    this.messages = [];
    this.live = [];
    this.status = null;
    this.lastId = null;
    this.torn = []; // committed messages whose live parts did not spell them
  }
  apply({ id, event, data }) {
    const body = JSON.parse(data);
    if (id && ["part", "message", "stream_reset", "tool_call_cancel", "branch"].includes(event)) this.lastId = id;
    if (event === "status") this.status = body.status;
    if (event === "stream_reset") this.live = [];
    if (event === "branch") [this.messages, this.live] = [[], []];
    if (event === "tool_call_cancel") this.live = this.live.filter((p) => p.tool_call_id !== body.tool_call_id);
    if (event === "part") this.part(body.part);
    if (event === "message") {
      const texts = (parts) => parts.filter((p) => p.type === "text").map((p) => p.text).join("");
      if (body.role === "assistant" && this.live.some((p) => p.type === "text") && texts(this.live) !== texts(body.parts)) {
        this.torn.push({ live: texts(this.live), stored: texts(body.parts) });
      }
      // A committed reply replaces its live parts; a compaction's notice ends the summary
      // that streamed before it (never part of a reply).
      if (body.role === "assistant" || body.role === "system") this.live = [];
      this.messages = this.messages.filter((m) => m.id !== body.id).concat(body);
    }
  }
  part(part) {
    const last = this.live.at(-1);
    if (["text", "reasoning", "refusal"].includes(part.type)) {
      if (last?.type === part.type) last.text += part.text;
      else this.live.push({ ...part });
    } else if (part.type === "tool_call") {
      const known = this.live.find((p) => p.tool_call_id === part.tool_call_id);
      if (!known) this.live.push({ ...part, args: part.args ?? part.args_delta ?? "" });
      else known.args = part.complete ? part.args : known.args + (part.args_delta ?? "");
    } else {
      this.live.push({ ...part });
    }
  }
  /** The reply to the last user message is over, and the stream said so. */
  answered() {
    return IDLE.has(this.status) && this.live.length === 0 && this.messages.at(-1)?.role !== "user";
  }
  text() {
    return this.live.filter((p) => p.type === "text").map((p) => p.text).join("");
  }
}

/** Follows the chat until `done(view)`; false when the connection broke first. */
async function followNative(id, view, done) {
  const headers = view.lastId ? { "last-event-id": view.lastId } : {};
  try {
    const response = await fetch(url(`/chats/${id}/events`), { headers });
    assert.equal(response.status, 200);
    for await (const event of sse(response)) {
      view.apply(event);
      if (await done(view)) {
        response.body.cancel().catch(() => {});
        return true;
      }
    }
  } catch (error) {
    if (killed) return false;
    throw error;
  }
  return false;
}

const shape = (m) => ({
  role: m.role,
  parts: m.parts.map(({ created_at, provider_metadata, ...rest }) => rest),
});

async function nativeCell(cell) {
  const body = { text: mock("go", script(cell, "native")) };
  if (cell.client_tool) body.tools = [LOOKUP];
  const id = (await call("POST", "/chats", body)).id;
  const view = new NativeView();
  const someText = async (v) => v.text().length > 20;
  if (cell.action === "kill") {
    await followNative(id, view, someText);
    await actions.kill(); // then follow again from the last event seen
  } else if (cell.action === "edit") {
    await followNative(id, view, someText);
    await actions.edit(id);
  }
  let done = (v) => v.answered();
  if (cell.action === "edit") done = (v) => v.answered() && v.messages[0]?.parts[0].text.startsWith("edited");
  if (cell.action === "branch") {
    assert.ok(await followNative(id, view, done));
    const { first } = await twoBranchesThenSwitchBack(id);
    // The follower sees the switch: the first branch again, then the reply to a new message.
    await call("POST", `/chats/${id}/messages`, { text: mock("after the switch", { rate: 50 }) });
    done = (v) => v.answered() && v.messages.length === first.length + 2;
  }
  assert.ok(await followNative(id, view, done), "the stream reached the end of the reply");
  assert.ok(IDLE.has(view.status), "the stream said the run ended");
  assert.deepEqual(view.torn, [], "the live parts spelled each committed message");
  assert.deepEqual(view.messages.map(shape), (await messages(id)).map(shape));
}

// ---- AI SDK UI message stream --------------------------------------------------------------

/** The message `readUIMessageStream` builds of a UI stream, and how the stream ended. */
async function readUI(response, onText = () => {}) {
  assert.equal(response.status, 200);
  let text = "";
  const [forSdk, raw] = response.body.tee();
  const rawText = new Response(raw).text().catch(() => "");
  const chunks = [];
  const stream = parseJsonEventStream({ stream: forSdk, schema: uiMessageChunkSchema }).pipeThrough(
    new TransformStream({
      transform(part, controller) {
        if (!part.success) throw part.error;
        chunks.push(part.value);
        if (part.value.type === "text-delta") onText((text += part.value.delta));
        controller.enqueue(part.value);
      },
    }),
  );
  let message;
  try {
    for await (const m of readUIMessageStream({ stream })) message = m;
  } catch (error) {
    if (!killed) throw error;
    return { message, chunks, ended: false };
  }
  const ended = (await rawText).trimEnd().endsWith("data: [DONE]");
  return { message, chunks, ended, last: chunks.at(-1)?.type };
}

const uiApi = (path = "") => url(`/ai-sdk/chat${path}`);
const uiPost = (id, uiMessages, tools) =>
  fetch(uiApi(), {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ id, trigger: "submit-message", messageId: null, messages: uiMessages, tools }),
  });
const uiUser = (text) => ({ id: `u-${++serial}`, role: "user", parts: [{ type: "text", text }] });
const uiHistory = async (id) => (await fetch(uiApi(`/${id}/messages`))).json();
/** A UI message as the page renders it: its text and tool parts. */
const uiParts = (m) =>
  m.parts
    .filter((p) => p.type === "text" || p.type.startsWith("tool-"))
    .map((p) => (p.type === "text" ? { text: p.text } : { tool: p.type, id: p.toolCallId, state: p.state, input: p.input }));
const uiText = (m) => m.parts.filter((p) => p.type === "text").map((p) => p.text).join("");

async function uiCell(cell) {
  const front = `matrix-${process.pid}-${++serial}`;
  const tools = cell.client_tool ? [LOOKUP] : undefined;
  const response = await uiPost(front, [uiUser(mock("go", script(cell, "ui")))], tools);
  if (cell.action === "branch") {
    const first = await readUI(response);
    assert.equal(first.last, "finish");
    const id = await newestChat();
    await twoBranchesThenSwitchBack(id);
    // No reply streams during a switch (it needs an idle chat): there is nothing to resume,
    // the history is the branch made current, and the next message continues it.
    assert.equal((await fetch(uiApi(`/${front}/stream`))).status, 204);
    const history = await uiHistory(front);
    assert.deepEqual(history.map(uiText), (await messages(id)).map((m) => textOfNative(m)));
    const next = await readUI(await uiPost(front, [...history, uiUser(mock("after the switch", { rate: 50 }))]));
    assert.ok(next.ended && next.last === "finish", JSON.stringify(next.chunks.at(-1)));
    assert.deepEqual(uiParts(next.message), uiParts((await uiHistory(front)).at(-1)));
    return;
  }
  let view;
  if (cell.action === "kill" || cell.action === "edit") {
    let some;
    const someText = new Promise((resolve) => (some = resolve));
    const reading = readUI(response, (text) => text.length > 20 && some());
    await someText;
    const id = await newestChat();
    if (cell.action === "kill") {
      await actions.kill();
      const cut = await reading;
      assert.equal(cut.ended, false);
      const resumed = await fetch(uiApi(`/${front}/stream`));
      view = resumed.status === 204 ? null : await readUI(resumed);
      await settled(id);
      if (view) assert.ok(view.ended && view.last === "finish", JSON.stringify(view.chunks.at(-1)));
      const stored = (await uiHistory(front)).at(-1);
      assert.deepEqual(uiParts(view?.message ?? stored), uiParts(stored));
      return;
    }
    const before = await firstUser(id);
    await actions.edit(id);
    view = await reading;
    // The reply the page followed is no longer on the current branch: the stream aborts.
    assert.ok(view.ended && view.last === "abort", JSON.stringify(view.chunks.at(-1)));
    await settled(id);
    const old = await messages(id, `?branch=${before}`);
    const kept = old.filter((m) => m.role === "assistant").map(textOfNative).join("");
    assert.ok(uiText(view.message).startsWith(kept), `stored on the old branch: ${kept}`);
    // A reload shows the current branch: the edit and its reply, as stored.
    const history = await uiHistory(front);
    assert.deepEqual(history.map(uiText), (await messages(id)).map(textOfNative));
    return;
  }
  view = await readUI(response);
  assert.ok(view.ended, "the stream ended with [DONE]");
  assert.equal(view.last, "finish", JSON.stringify(view.chunks.slice(-3)));
  await settled(await newestChat());
  const stored = (await uiHistory(front)).at(-1);
  const shown = uiParts(view.message);
  assert.deepEqual(shown, uiParts(stored));
}

const textOfNative = (m) => m.parts.filter((p) => p.type === "text").map((p) => p.text).join("");

// ---- Responses stream (openai npm) ---------------------------------------------------------

let model;
const sdk = () => new OpenAI({ baseURL: `${daemon.url}/v1`, apiKey: "keel", maxRetries: 0 });
const FUNCTION = { type: "function", name: "lookup", parameters: LOOKUP.parameters, strict: false };
const TERMINAL = new Set(["response.completed", "response.incomplete", "response.failed"]);

/** Reads a `ResponseStream` through the SDK; the events, and its final response. */
async function readResponses(stream, stopWhen = () => false) {
  const events = [];
  try {
    for await (const event of stream) {
      events.push(event);
      if (stopWhen(events)) return { events, final: null, broke: false };
    }
  } catch (error) {
    if (!killed) throw error;
    return { events, final: null, broke: true };
  }
  return { events, final: await stream.finalResponse(), broke: false };
}

/** The text of the output items a stream finished (a voided item ends `incomplete`). */
function finishedText(events) {
  const voided = new Set(
    events
      .filter((e) => e.type === "response.output_item.done" && e.item.status === "incomplete")
      .map((e) => e.item.id),
  );
  const byItem = new Map();
  for (const e of events) {
    if (e.type === "response.output_text.delta" && !voided.has(e.item_id)) {
      byItem.set(e.item_id, (byItem.get(e.item_id) ?? "") + e.delta);
    }
  }
  return [...byItem.values()].join("");
}
/** `resp_` + the chat id + `m` + the input message's id, 16 hex digits (docs/compat.md). */
const chatOf = (responseId) => responseId.slice(5, 37);
const responseOf = (chat, message) => `resp_${chat}m${message.toString(16).padStart(16, "0")}`;
const items = (r) => r.output.map((i) => ({ type: i.type, id: i.id, call_id: i.call_id, status: i.status }));

async function responsesCell(cell) {
  model ??= (await call("GET", "/models")).models.find((m) => m.default).id;
  const client = sdk();
  const tools = cell.client_tool ? [FUNCTION] : undefined;
  const input = mock("go", script(cell, "responses"));
  if (cell.action === "branch") {
    const first = await client.responses.create({ model, input });
    const id = chatOf(first.id);
    const { edited: branch } = await twoBranchesThenSwitchBack(id);
    // The response of the branch left is not streamed (404); the one made current is.
    const edited = branch.find((m) => m.role === "user").id;
    await assert.rejects(
      readResponses(client.responses.stream({ response_id: responseOf(id, edited) })),
      OpenAI.NotFoundError,
    );
    const again = await readResponses(client.responses.stream({ response_id: first.id }));
    assert.equal(again.events.at(-1).type, "response.completed");
    assert.equal(again.final.output_text, (await client.responses.retrieve(first.id)).output_text);
    const next = await readResponses(
      client.responses.stream({ model, input: "after the switch", previous_response_id: first.id }),
    );
    await checkResponse(client, next, "response.completed");
    return;
  }
  const stream = client.responses.stream({ model, input, tools });
  const someText = (events) => finishedText(events).length > 20;
  if (cell.action === "kill") {
    const seen = await readResponses(stream, someText);
    const last = seen.events.at(-1).sequence_number;
    const responseId = seen.events[0].response.id;
    await actions.kill();
    const rest = await readResponses(client.responses.stream({ response_id: responseId, starting_after: last }));
    assert.ok(rest.events.every((e) => e.sequence_number > last));
    await checkResponse(client, rest, "response.completed", seen.events);
    return;
  }
  if (cell.action === "edit") {
    const seen = [];
    let edited = false;
    for await (const event of stream) {
      seen.push(event);
      if (!edited && someText(seen)) {
        edited = true;
        await actions.edit(chatOf(seen[0].response.id));
      }
    }
    const view = { events: seen, final: await stream.finalResponse() };
    // Its reply left the current branch: the response ends as cancelled, with what it said.
    const stored = await checkResponse(client, view, "response.incomplete");
    assert.equal(view.final.status, "cancelled");
    assert.equal(stored.status, "cancelled");
    return;
  }
  await checkResponse(client, await readResponses(stream), "response.completed");
}

/** The final response the SDK built equals the stored one; the stream ended with `terminal`. */
async function checkResponse(client, view, terminal, before = []) {
  assert.equal(view.events.at(-1).type, terminal, JSON.stringify(view.events.at(-1)));
  assert.ok(TERMINAL.has(view.events.at(-1).type));
  const stored = await client.responses.retrieve(view.final.id);
  assert.equal(view.final.output_text, stored.output_text);
  assert.deepEqual(items(view.final), items(stored));
  assert.equal(finishedText([...before, ...view.events]), stored.output_text, "the streamed text, once");
  return stored;
}

// ---- The matrix ----------------------------------------------------------------------------

const doors = { native: nativeCell, "AI SDK UI": uiCell, "Responses (openai npm)": responsesCell };
for (const cell of table.scenarios) {
  for (const [door, drive] of Object.entries(doors)) {
    test(`${cell.name} — ${door}`, () => {
      killed = false;
      return drive(cell);
    });
  }
}
