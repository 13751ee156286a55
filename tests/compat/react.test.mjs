// The React `useChat` page (react-page.jsx) in headless Chromium against `keel serve`:
// send, stream, stop, reload and resume mid-reply, resume after kill -9, tool calls.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { build } from "esbuild";
import { chromium } from "playwright-core";
import { Daemon, until, words } from "./daemon.mjs";

const daemon = new Daemon();
let browser;
let script;
before(async () => {
  const bundle = await build({
    entryPoints: [new URL("./react-page.jsx", import.meta.url).pathname],
    bundle: true,
    write: false,
    format: "iife",
    jsx: "automatic",
    define: { "process.env.NODE_ENV": '"production"' },
    logLevel: "error",
  });
  script = bundle.outputFiles[0].text;
  await daemon.start();
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox"],
  });
});
after(async () => {
  await browser?.close();
  await daemon.stop();
});

let seq = 0;
const mock = (text, s) => `${text}\n#mock ${JSON.stringify(s)}`;
const api = () => `${daemon.url}/api/v1/ai-sdk/chat`;
const idle = async (id) => (await fetch(`${api()}/${id}/stream`)).status === 204;

/** A page of the app on Keel's own origin, so the transport's requests are same-origin. */
async function openPage() {
  const id = `react-${process.pid}-${++seq}`;
  const context = await browser.newContext();
  // The page is served for any origin the daemon has (its port stays across restarts).
  await context.route("**/compat-page*", (route) =>
    route.fulfill({ contentType: "text/html", body: `<div id="root"></div><script>${script}</script>` }),
  );
  const page = await context.newPage();
  await page.goto(`${daemon.url}/compat-page?chat=${id}`);
  await page.waitForSelector("#send");
  return { id, page };
}

const assistantText = (page) =>
  page.evaluate(() => [...document.querySelectorAll(".message.assistant .text")].map((e) => e.textContent).join(""));
const assistantCount = (page) => page.evaluate(() => document.querySelectorAll(".message.assistant").length);

async function send(page, text) {
  await page.fill("#input", text);
  await page.click("#send");
}

test("send, stream and stop from the page", async () => {
  const { id, page } = await openPage();
  const full = words(200);
  await send(page, mock(full, { rate: 40 }));
  await until(async () => (await assistantText(page)).length > 20, 30000, "streamed text");
  await page.click("#stop");
  await until(() => idle(id), 30000, "the run to stop");
  const shown = await assistantText(page);
  assert.ok(full.startsWith(shown) && shown.length < full.length);
  await page.close();
});

test("reload mid-reply resumes the reply, shown once", async () => {
  const { page } = await openPage();
  const full = words(120);
  await send(page, mock(full, { rate: 40 }));
  await until(async () => (await assistantText(page)).length > 20, 30000, "streamed text");
  await page.reload();
  await until(async () => (await assistantText(page)) === full, 30000, "the whole reply after reload");
  assert.equal(await assistantCount(page), 1);
  await page.close();
});

test("reload after a kill -9 of the daemon resumes the reply", async () => {
  const { page } = await openPage();
  const full = words(120);
  await send(page, mock(full, { rate: 40 }));
  await until(async () => (await assistantText(page)).length > 20, 30000, "streamed text");
  await daemon.kill();
  await daemon.start();
  await page.reload();
  await until(async () => (await assistantText(page)) === full, 30000, "the whole reply after the restart");
  assert.equal(await assistantCount(page), 1);
  await page.close();
});

test("a tool call is rendered with its result, a client-side tool is answered on the page", async () => {
  const { page } = await openPage();
  const listing = { steps: [{ tool_calls: [{ name: "list_dir", args: { path: "." } }] }, { text: "Listed." }] };
  await send(page, mock("what is here?", listing));
  await page.waitForSelector('.tool[data-tool="tool-list_dir"][data-state="output-available"] .output');
  await until(async () => (await assistantText(page)) === "Listed.", 30000, "the text after the tool");

  const asking = { steps: [{ tool_calls: [{ name: "favourite_colour", args: {} }] }, { text: "Green it is." }] };
  await send(page, mock("guess my colour", asking));
  await page.click("button.answer");
  await until(async () => (await assistantText(page)).endsWith("Green it is."), 30000, "the continued reply");
  await page.waitForSelector('.tool[data-tool="tool-favourite_colour"][data-state="output-available"]');
  await page.close();
});

const texts = (page, role) =>
  page.evaluate((role) => [...document.querySelectorAll(`.message.${role}`)].map((e) => [...e.querySelectorAll(".text")].map((t) => t.textContent).join("")), role);

test("an edit with messageId makes a branch, and regenerate({ messageId }) answers an older message again", async () => {
  const { id, page } = await openPage();
  for (const text of ["first", "second"]) {
    await send(page, text);
    await until(async () => (await texts(page, "assistant")).at(-1) === text && (await idle(id)), 30000, `the reply to ${text}`);
  }
  // Regenerate the older reply: the page keeps the history up to it and streams a new one.
  await page.locator(".message.assistant button.regenerate").first().click();
  await until(async () => JSON.stringify(await texts(page, "assistant")) === '["first"]' && (await idle(id)), 30000, "the regenerated reply");
  assert.deepEqual(await texts(page, "user"), ["first"]);
  const history = async () => (await (await fetch(`${daemon.url}/api/v1/ai-sdk/chat/${id}/messages`)).json()).map((m) => m.parts.filter((p) => p.type === "text").map((p) => p.text).join(""));
  assert.deepEqual(await history(), ["first", "first"]);

  // Edit the first message: a new branch from it, the same after a reload.
  await send(page, "second");
  await until(async () => (await texts(page, "assistant")).length === 2 && (await idle(id)), 30000, "the second reply");
  await page.fill("#input", "first, edited");
  await page.locator(".message.user button.edit").first().click();
  await until(async () => JSON.stringify(await texts(page, "assistant")) === '["first, edited"]' && (await idle(id)), 30000, "the reply to the edit");
  assert.deepEqual(await history(), ["first, edited", "first, edited"]);
  await page.reload();
  await until(async () => JSON.stringify(await texts(page, "user")) === '["first, edited"]', 30000, "the edited history after reload");
  await page.close();
});

test("reload mid-reply after the page ran a client-side tool: the tool is not run again", async () => {
  const { id, page } = await openPage();
  const full = words(150);
  const rolling = {
    id: `react-roll-${id}`,
    steps: [{ tool_calls: [{ name: "roll_die", args: {} }] }, { text: full, rate: 40 }],
  };
  const runs = () => page.evaluate((id) => Number(localStorage.getItem(`roll_die runs ${id}`) ?? 0), id);
  await send(page, mock("roll for me", rolling));
  // The page ran the tool, its result continued the reply, which is streaming now.
  await until(async () => (await assistantText(page)).length > 20, 30000, "the continued reply");
  assert.equal(await runs(), 1);
  await page.reload();
  await until(async () => (await assistantText(page)) === full, 30000, "the whole reply after reload");
  await page.waitForSelector('.tool[data-tool="tool-roll_die"][data-state="output-available"]');
  assert.equal(await assistantCount(page), 1);
  assert.equal(await runs(), 1, "the resumed stream did not ask the page to run the tool again");
  await until(() => idle(id), 30000, "the run to end");
  await page.reload();
  await until(async () => (await assistantText(page)) === full, 30000, "the history after the end");
  assert.equal(await runs(), 1);
  await page.close();
});
