// Keel's AI SDK UI endpoints driven by the real `ai` package: a `Chat` (the class `useChat`
// wraps) with the stock `DefaultChatTransport`, pointed at `<keel>/api/v1/ai-sdk/chat`.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithToolCalls,
  parseJsonEventStream,
  readUIMessageStream,
  uiMessageChunkSchema,
} from "ai";
import { Daemon, until, words } from "./daemon.mjs";

/** The state a framework binding keeps (what @ai-sdk/react keeps in React state). */
class ArrayState {
  constructor(messages = []) {
    this.messages = messages;
    this.status = "ready";
    this.error = undefined;
  }
  pushMessage = (m) => {
    this.messages = this.messages.concat(m);
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (i, m) => {
    this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)];
  };
  snapshot = (v) => structuredClone(v);
}

class Chat extends AbstractChat {
  constructor({ messages, ...init }) {
    super({ ...init, state: new ArrayState(messages) });
  }
}

const daemon = new Daemon();
let api;
before(async () => {
  await daemon.start();
  api = `${daemon.url}/api/v1/ai-sdk/chat`;
});
after(() => daemon.stop());

let seq = 0;
const chatId = () => `chat-${process.pid}-${++seq}`;
const transport = (body) => new DefaultChatTransport({ api, body });
const textOf = (message) =>
  message.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
const mock = (text, script) => `${text}\n#mock ${JSON.stringify(script)}`;
/** What a front end adds to its Stop button besides `stop()`. */
const stopOnServer = (id) => fetch(`${api}/${encodeURIComponent(id)}/stop`, { method: "POST" });
const history = async (id) => (await fetch(`${api}/${encodeURIComponent(id)}/messages`)).json();
const idle = async (id) => (await fetch(`${api}/${encodeURIComponent(id)}/stream`)).status === 204;

test("send and stream a reply, then a second message in the same chat", async () => {
  const id = chatId();
  const chat = new Chat({ id, transport: transport() });
  await chat.sendMessage({ text: mock("hello there", { rate: 0 }) });
  assert.equal(chat.status, "ready");
  assert.equal(chat.messages.length, 2);
  assert.equal(chat.messages[1].role, "assistant");
  assert.equal(textOf(chat.messages[1]), "hello there");
  assert.ok(chat.messages[1].parts.some((p) => p.type === "step-start"));

  await chat.sendMessage({ text: mock("and again", { rate: 0 }) });
  assert.equal(chat.messages.length, 4);
  assert.equal(textOf(chat.messages[3]), "and again");
  const stored = await history(id);
  assert.deepEqual(stored.map((m) => m.role), ["user", "assistant", "user", "assistant"]);
  assert.equal(textOf(stored[3]), "and again");
});

test("stop keeps what was said and ends the reply", async () => {
  const id = chatId();
  const full = words(200);
  const chat = new Chat({ id, transport: transport() });
  const sending = chat.sendMessage({ text: mock(full, { rate: 40 }) });
  await until(() => chat.messages[1] && textOf(chat.messages[1]).length > 20, 30000, "some text");
  chat.stop();
  await stopOnServer(id);
  await sending;
  await until(() => idle(id), 30000, "the run to stop");
  const stored = await history(id);
  const kept = textOf(stored[1]);
  assert.ok(kept.length > 0 && kept.length < full.length, `kept ${kept.length} characters`);
  assert.ok(full.startsWith(kept));
});

/** Sends a slow reply and leaves the page once some of it arrived (the run goes on). */
async function leaveMidReply(id, full) {
  const chat = new Chat({ id, transport: transport() });
  const sending = chat.sendMessage({ text: mock(full, { rate: 40 }) });
  await until(() => chat.messages[1] && textOf(chat.messages[1]).length > 20, 30000, "some text");
  chat.stop(); // what a reload does to the open request: the run is not stopped
  await sending;
  return textOf(chat.messages[1]);
}

/** A reloaded page: initial messages from Keel, then `resume: true`. */
async function reloadAndResume(id) {
  const messages = await history(id);
  const chat = new Chat({ id, messages, transport: transport() });
  await chat.resumeStream();
  return chat;
}

test("reload mid-reply and resume: the whole reply, once", async () => {
  const id = chatId();
  const full = words(120);
  const seen = await leaveMidReply(id, full);
  assert.ok(!(await idle(id)), "the run goes on without its client");
  const chat = await reloadAndResume(id);
  assert.equal(chat.status, "ready");
  assert.equal(chat.messages.length, 2, JSON.stringify(chat.messages));
  assert.equal(textOf(chat.messages[1]), full);
  assert.ok(full.startsWith(seen));
  // A reload after the end has nothing to resume and the history holds the reply.
  const again = await reloadAndResume(id);
  assert.equal(textOf(again.messages[1]), full);
});

test("resume after kill -9 of the daemon", async () => {
  const id = chatId();
  const full = words(120);
  await leaveMidReply(id, full);
  await daemon.kill();
  await daemon.start();
  const chat = await reloadAndResume(id);
  await until(() => idle(id), 30000, "the recovered run to finish");
  const stored = await history(id);
  assert.equal(stored.length, 2, JSON.stringify(stored));
  assert.equal(textOf(stored[1]), full);
  // The resumed stream may have started after the recovered run finished (then the
  // history already held it); either way the page shows the reply once.
  assert.equal(chat.messages.length, 2);
  assert.equal(textOf(chat.messages[1]), full);
});

test("a server-side tool call is rendered with its result", async () => {
  const id = chatId();
  const chat = new Chat({ id, transport: transport() });
  const script = {
    steps: [{ tool_calls: [{ name: "list_dir", args: { path: "." } }] }, { text: "Listed." }],
  };
  await chat.sendMessage({ text: mock("what is here?", script) });
  const reply = chat.messages[1];
  const call = reply.parts.find((p) => p.type === "tool-list_dir");
  assert.ok(call, JSON.stringify(reply.parts));
  assert.equal(call.state, "output-available");
  assert.deepEqual(call.input, { path: "." });
  assert.notEqual(call.output, undefined);
  assert.equal(reply.parts.filter((p) => p.type === "step-start").length, 2);
  assert.equal(textOf(reply), "Listed.");
  const stored = await history(id);
  assert.equal(stored[1].parts.find((p) => p.type === "tool-list_dir").state, "output-available");
});

test("a client-side tool answered with addToolResult continues the reply", async () => {
  const id = chatId();
  const tools = [
    {
      name: "favourite_colour",
      description: "Asks the user for their favourite colour",
      parameters: { type: "object", properties: {} },
    },
  ];
  const asked = [];
  const chat = new Chat({
    id,
    transport: transport({ tools }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
    onToolCall: ({ toolCall }) => {
      asked.push(toolCall.toolName);
      // Not awaited: the SDK applies it once the stream's chunk is processed.
      chat.addToolResult({ tool: toolCall.toolName, toolCallId: toolCall.toolCallId, output: "blue" });
    },
  });
  const script = {
    steps: [{ tool_calls: [{ name: "favourite_colour", args: {} }] }, { text: "Blue it is." }],
  };
  await chat.sendMessage({ text: mock("guess my colour", script) });
  await until(
    () => chat.status === "ready" && chat.messages.length === 2 && textOf(chat.messages[1]) === "Blue it is.",
    30000,
    "the continued reply",
  );
  assert.deepEqual(asked, ["favourite_colour"]);
  const call = chat.messages[1].parts.find((p) => p.type === "tool-favourite_colour");
  assert.equal(call.state, "output-available");
  assert.equal(call.output, "blue");
  const stored = await history(id);
  assert.equal(stored.length, 2);
  assert.equal(stored[1].parts.find((p) => p.type === "tool-favourite_colour").output, "blue");
  assert.equal(textOf(stored[1]), "Blue it is.");
});

test("regenerate answers the last user message again, replacing the reply", async () => {
  const id = chatId();
  const chat = new Chat({ id, transport: transport() });
  await chat.sendMessage({ text: mock("say it twice", { rate: 0 }) });
  assert.equal(textOf(chat.messages[1]), "say it twice");
  await chat.regenerate();
  assert.equal(chat.messages.length, 2);
  assert.equal(textOf(chat.messages[1]), "say it twice");
  const stored = await history(id);
  assert.deepEqual(stored.map((m) => m.role), ["user", "assistant"]);
});

test("resume of an unknown chat id is 204 and its history is empty", async () => {
  const id = chatId();
  assert.equal((await fetch(`${api}/${id}/stream`)).status, 204);
  assert.deepEqual(await history(id), []);
  assert.equal((await stopOnServer(id)).status, 404);
});

test("readUIMessageStream after a tool call cut mid-arguments equals the stored reply", async () => {
  const id = chatId();
  const script = {
    id: `node-cut-call-${id}`,
    steps: [
      {
        text: "Looking it up: ",
        rate: 0,
        tool_calls: [{ name: "lookup", args: { query: "the weather in Oslo tomorrow" } }],
        cut: { after: 5, times: 1 },
      },
      { text: "done.", rate: 0 },
    ],
  };
  const response = await fetch(api, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      id,
      trigger: "submit-message",
      messageId: null,
      messages: [{ id: "u1", role: "user", parts: [{ type: "text", text: mock("go", script) }] }],
    }),
  });
  assert.equal(response.status, 200);
  assert.equal(response.headers.get("x-accel-buffering"), "no");
  const chunks = parseJsonEventStream({ stream: response.body, schema: uiMessageChunkSchema }).pipeThrough(
    new TransformStream({
      transform(part, controller) {
        if (!part.success) throw part.error;
        controller.enqueue(part.value);
      },
    }),
  );
  let last;
  for await (const message of readUIMessageStream({ stream: chunks })) last = message;
  await until(() => idle(id), 30000, "the run to end");
  const stored = await history(id);
  assert.ok(textOf(stored[1]).startsWith("Looking it up: "), JSON.stringify(stored[1]));
  assert.equal(textOf(last), textOf(stored[1]));
  const calls = (m) => m.parts.filter((p) => p.type.startsWith("tool-")).map((p) => p.toolCallId);
  assert.deepEqual(calls(last), calls(stored[1]), "only stored calls were shown");
});

test("an edit with messageId branches from that message; regenerate({ messageId }) answers an older one again", async () => {
  const id = chatId();
  const chat = new Chat({ id, transport: transport() });
  await chat.sendMessage({ text: "first" });
  await chat.sendMessage({ text: "second" });
  assert.equal(chat.messages.length, 4);
  await until(() => idle(id), 30000, "the reply to end");

  await chat.regenerate({ messageId: chat.messages[1].id });
  assert.equal(chat.status, "ready", String(chat.error));
  assert.deepEqual(chat.messages.map(textOf), ["first", "first"]);
  await until(() => idle(id), 30000, "the new reply to end");
  assert.deepEqual((await history(id)).map(textOf), ["first", "first"]);

  await chat.sendMessage({ text: "second" });
  await until(() => idle(id), 30000, "the reply to end");
  await chat.sendMessage({ text: "first, edited", messageId: chat.messages[0].id });
  assert.equal(chat.status, "ready", String(chat.error));
  assert.deepEqual(chat.messages.map(textOf), ["first, edited", "first, edited"]);
  await until(() => idle(id), 30000, "the reply to the edit to end");
  assert.deepEqual((await history(id)).map(textOf), ["first, edited", "first, edited"]);
});

test("a message sent from a second tab while a reply streams is queued, not refused", async () => {
  const id = chatId();
  const first = new Chat({ id, transport: transport() });
  const sending = first.sendMessage({ text: mock(words(300), { rate: 40 }) });
  await until(() => first.messages[1] && textOf(first.messages[1]).length > 10, 30000, "some text");
  const data = [];
  const second = new Chat({ id, transport: transport(), onData: (part) => data.push(part) });
  await second.sendMessage({ text: "queued one" });
  assert.equal(second.status, "ready", String(second.error));
  assert.equal(data.length, 1);
  assert.equal(data[0].type, "data-queued");
  first.stop();
  await stopOnServer(id);
  await sending;
  const stored = await until(async () => {
    const h = await history(id);
    return h.length === 4 && textOf(h[3]) === "queued one" && h;
  }, 30000, "the queued message to be answered");
  assert.equal(textOf(stored[2]), "queued one");
});
