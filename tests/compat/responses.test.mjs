// Keel's OpenAI Responses-compatible endpoints driven by the official `openai` npm package.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { Daemon, until, words } from "./daemon.mjs";

const daemon = new Daemon();
let model;
before(async () => {
  await daemon.start();
  const models = (await (await fetch(`${daemon.url}/api/v1/models`)).json()).models;
  model = models.find((m) => m.default).id;
});
after(() => daemon.stop());

// Single-user mode takes any key; with users it is a Keel token.
const client = (options = {}) => new OpenAI({ baseURL: `${daemon.url}/v1`, apiKey: "keel", ...options });
const mock = (text, script) => `${text}\n#mock ${JSON.stringify(script)}`;
const deltas = (events) =>
  events.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join("");

test("create with stream: the reference event sequence", async () => {
  const stream = await client().responses.create({ model, input: mock("hello from node", { rate: 0 }), stream: true });
  const events = [];
  for await (const event of stream) events.push(event);
  assert.equal(events[0].type, "response.created");
  assert.equal(events.at(-1).type, "response.completed");
  assert.equal(deltas(events), "hello from node");
  assert.equal(events.at(-1).response.output_text, "hello from node");
});

async function dropAndResume(kill) {
  const full = words(120);
  let sdk = client();
  const stream = await sdk.responses.create({ model, input: mock(full, { rate: 40 }), stream: true, background: true });
  const seen = [];
  for await (const event of stream) {
    seen.push(event);
    if (deltas(seen).length > 30) break; // leaving the loop closes the connection
  }
  const id = seen[0].response.id;
  const last = seen.at(-1).sequence_number;
  if (kill) {
    await daemon.kill();
    await daemon.start();
    sdk = client();
  }
  const rest = [];
  for await (const event of await sdk.responses.retrieve(id, { stream: true, starting_after: last })) rest.push(event);
  const numbers = [...seen, ...rest].map((e) => e.sequence_number);
  assert.deepEqual(numbers, [...new Set(numbers)].sort((a, b) => a - b), "nothing twice, in order");
  assert.equal(deltas(seen) + deltas(rest), full, "nothing missing");
  assert.equal(rest.at(-1).type, "response.completed");
}

test("drop the stream and resume with starting_after", () => dropAndResume(false));
test("resume with starting_after across a kill -9 of the daemon", () => dropAndResume(true));

test("background, cancel, previous_response_id", async () => {
  const sdk = client();
  const full = words(300);
  const created = await sdk.responses.create({ model, input: mock(full, { rate: 40 }), background: true });
  await until(async () => (await sdk.responses.retrieve(created.id)).output_text.length > 20, 30000, "output");
  const cancelled = await sdk.responses.cancel(created.id);
  assert.equal(cancelled.status, "cancelled");
  assert.ok(full.startsWith(cancelled.output_text));
  const next = await sdk.responses.create({ model, input: "and then", previous_response_id: created.id });
  assert.equal(next.output_text, "and then");
});

test("a function call round trip", async () => {
  const sdk = client();
  const tools = [{ type: "function", name: "lookup", parameters: { type: "object", properties: {} }, strict: false }];
  const script = { steps: [{ tool_calls: [{ name: "lookup", args: { key: "k" } }] }, { text: "Found it." }] };
  const first = await sdk.responses.create({ model, input: mock("look it up", script), tools });
  const call = first.output.find((item) => item.type === "function_call");
  assert.equal(call.name, "lookup");
  const second = await sdk.responses.create({
    model,
    previous_response_id: first.id,
    input: [{ type: "function_call_output", call_id: call.call_id, output: "the value" }],
  });
  assert.equal(second.output_text, "Found it.");
});

test("errors are the SDK's typed errors", async () => {
  const sdk = client({ maxRetries: 0 });
  await assert.rejects(sdk.responses.retrieve(`resp_${"0".repeat(48)}`), OpenAI.NotFoundError);
  await assert.rejects(sdk.responses.create({ model: "no-such-model", input: "hi" }), OpenAI.BadRequestError);
  const slow = await sdk.responses.create({ model, input: mock(words(200), { rate: 40 }), background: true });
  await assert.rejects(
    sdk.responses.create({ model, input: "next", previous_response_id: slow.id }),
    OpenAI.RateLimitError,
  );
  await sdk.responses.cancel(slow.id);
});
