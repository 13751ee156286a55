// Drives the web page in headless Chromium against a running `keel serve` with the demo
// model: streams a slow reply, stops it mid-stream, reloads and finds it marked interrupted;
// continues a stopped reply; retries a failed one; says so when the API cannot be reached;
// answers a client-side tool call and shows the chat's tokens in its header.
// KEEL_URL names the daemon; CHROMIUM and SCREENSHOT_DIR may override the defaults.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { launch } from './launch.mjs';

const base = process.env.KEEL_URL;
const screenshots = process.env.SCREENSHOT_DIR || 'target/browser';
const TIMEOUT = 30_000;

const words = Array.from({ length: 40 }, (_, i) => `word${i + 1}`).join(' ');

test('a streamed reply can be stopped and stays marked interrupted after a reload', async () => {
  assert.ok(base, 'KEEL_URL must name the daemon');
  mkdirSync(screenshots, { recursive: true });
  const browser = await launch();
  try {
    const page = await browser.newPage({ viewport: { width: 1100, height: 760 } });
    page.setDefaultTimeout(TIMEOUT);
    const foreign = [];
    page.on('request', (request) => {
      if (!request.url().startsWith(base)) foreign.push(request.url());
    });
    const errors = [];
    page.on('pageerror', (error) => errors.push(String(error)));

    await page.goto(base);
    await page.fill('#input', `#mock {"text": "${words}", "rate": 10}`);
    await page.click('#send');

    // Streamed text appears while the reply is still running.
    await page.waitForFunction(() => {
      const live = document.querySelector('#live .text');
      return live && live.textContent.includes('word1 word2 word3');
    });
    await page.waitForSelector('#stop:not([disabled])');
    await page.click('#stop');

    const badge = '.msg.assistant .badge.interrupted';
    await page.waitForSelector(badge);
    const stopped = await page.textContent('.msg.assistant .text');
    assert.match(stopped, /^word1 word2 word3/);
    assert.ok(stopped.length < words.length, `the reply was not cut: ${stopped}`);
    await page.waitForFunction(() => document.querySelector('#chat-status').dataset.status === 'waiting');

    await page.reload();
    await page.waitForSelector(badge);
    const reloaded = await page.textContent('.msg.assistant .text');
    assert.equal(reloaded, stopped, 'the stored partial reply differs from what was shown');
    assert.equal(await page.textContent('.msg.user .text'), `#mock {"text": "${words}", "rate": 10}`);
    await page.screenshot({ path: `${screenshots}/chat.png`, fullPage: true });

    await page.setViewportSize({ width: 390, height: 844 });
    // On a phone width the chat list slides away; wait until it has.
    await page.waitForFunction(() => document.querySelector('#sidebar').getBoundingClientRect().right <= 0);
    assert.ok(await page.isVisible('#toggle-sidebar'));
    await page.screenshot({ path: `${screenshots}/chat-phone.png` });

    assert.deepEqual(foreign, [], 'the page made requests to other origins');
    assert.deepEqual(errors, [], 'the page raised errors');
  } finally {
    await browser.close();
  }
});

test('a client-side tool call is answered from the page', async () => {
  const script = '#mock {"steps": [{"tool_calls": [{"name": "pick_colour", "args": {"options": ["red", "blue"]}}]}, {"text": "You picked it."}]}';
  const created = await fetch(`${base}/api/v1/chats`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({
      text: script,
      tools: [{ name: 'pick_colour', description: 'Asks the user for a colour', parameters: { type: 'object' } }],
    }),
  });
  assert.equal(created.status, 201);
  const chat = await created.json();
  const browser = await launch();
  try {
    const page = await browser.newPage({ viewport: { width: 1100, height: 760 } });
    page.setDefaultTimeout(TIMEOUT);
    await page.goto(`${base}/#chat=${chat.id}`);
    await page.waitForSelector('#tool-prompt:not([hidden]) textarea');
    assert.match(await page.textContent('#tool-prompt'), /pick_colour/);
    await page.waitForFunction(() => document.querySelector('#chat-status').textContent === 'Waiting for tool results');
    await page.screenshot({ path: `${screenshots}/tool-results.png`, fullPage: true });
    await page.fill('#tool-prompt textarea', '"blue"');
    await page.click('#tool-prompt button');
    await page.waitForFunction(() => [...document.querySelectorAll('.msg.assistant .text')]
      .some((node) => node.textContent === 'You picked it.'));
    assert.match(await page.textContent('.tool-card .result'), /blue/);
    // The header shows what the chat used once the run ends (the demo model has no price).
    // The reply is committed with its usage, so the API's sum is final here.
    const api = await (await fetch(`${base}/api/v1/chats/${chat.id}`)).json();
    const tokens = api.usage.input_tokens + api.usage.cached_input_tokens + api.usage.output_tokens;
    assert.ok(tokens > 0, JSON.stringify(api.usage));
    await page.waitForFunction((expected) => {
      const node = document.querySelector('#chat-usage');
      return !node.hidden && node.textContent === expected;
    }, `${tokens.toLocaleString('en-US')} tokens`);
  } finally {
    await browser.close();
  }
});

test('a refusal is shown apart from the reply, live and after a reload', async () => {
  const browser = await launch();
  try {
    const page = await browser.newPage({ viewport: { width: 1100, height: 760 } });
    page.setDefaultTimeout(TIMEOUT);
    await page.goto(base);
    await page.fill('#input', '#mock {"text": "Let me see.", "refusal": "I cannot help with that request."}');
    await page.click('#send');
    const refusal = '.msg.assistant .refusal';
    await page.waitForSelector(refusal);
    await page.waitForFunction(() => document.querySelector('#chat-status').dataset.status === 'waiting');
    const shown = async () => ({
      text: await page.textContent('.msg.assistant > .text'),
      refusal: await page.textContent(`${refusal} .text`),
      badge: await page.textContent(`${refusal} .badge.refused`),
    });
    const expected = { text: 'Let me see.', refusal: 'I cannot help with that request.', badge: 'declined' };
    assert.deepEqual(await shown(), expected);
    await page.reload();
    await page.waitForSelector(refusal);
    assert.deepEqual(await shown(), expected);
  } finally {
    await browser.close();
  }
});

test('a stopped reply is continued from the page, nothing said twice', async () => {
  const browser = await launch();
  try {
    const page = await browser.newPage({ viewport: { width: 1100, height: 760 } });
    page.setDefaultTimeout(TIMEOUT);
    const errors = [];
    page.on('pageerror', (error) => errors.push(String(error)));
    await page.goto(base);
    await page.fill('#input', `#mock {"text": "${words}", "rate": 10}`);
    await page.click('#send');
    await page.waitForFunction(() => {
      const live = document.querySelector('#live .text');
      return live && live.textContent.includes('word1 word2 word3');
    });
    await page.keyboard.press('Escape');
    await page.waitForSelector('.msg.assistant[data-stopped="1"] .continue-reply');
    await page.screenshot({ path: `${screenshots}/stopped.png`, fullPage: true });
    await page.click('.continue-reply');
    await page.waitForFunction(() => document.querySelectorAll('.msg.assistant[data-id]').length === 2
      && document.querySelector('#chat-status').dataset.status === 'waiting');
    // One reply on screen: the continuation joins the stopped text, and Copy takes both.
    const texts = await page.$$eval('.msg.assistant[data-id] > .text', (nodes) => nodes.map((n) => n.textContent));
    assert.deepEqual(texts, [words], 'stopped + continued read as one text');
    assert.equal(await page.evaluate(() => replyText(document.querySelector('.msg.continuation'))), words);
    await page.reload();
    await page.waitForSelector('.msg.continuation');
    assert.deepEqual(await page.$$eval('.msg.assistant[data-id] > .text', (nodes) => nodes.map((n) => n.textContent)),
      [words], 'the same after a reload');
    assert.equal(await page.$$eval('.continue-reply', (nodes) => nodes.length), 0, 'nothing left to continue');
    assert.ok(await page.isHidden('.badge.interrupted'), 'a continued reply reads as one');
    await page.screenshot({ path: `${screenshots}/continued.png`, fullPage: true });
    assert.deepEqual(errors, [], 'the page raised errors');
  } finally {
    await browser.close();
  }
});

test('a failed reply is retried from the page without retyping it', async () => {
  const browser = await launch();
  try {
    const page = await browser.newPage({ viewport: { width: 390, height: 844 } });
    page.setDefaultTimeout(TIMEOUT);
    const script = JSON.stringify({
      id: `page-retry-${Date.now()}`, text: 'Second time lucky.',
      error: { status: 400, message: 'not this time', times: 1 },
    });
    await page.goto(base);
    await page.fill('#input', `#mock ${script}`);
    await page.keyboard.press('Enter');
    await page.waitForSelector('#run-error .retry-run');
    assert.match(await page.textContent('#run-error'), /not this time/);
    assert.equal(await page.textContent('#chat-status'), 'Failed');
    const before = await page.evaluate(() => document.querySelector('#run-error').previousElementSibling.className);
    assert.match(before, /user/, 'the failure sits right after the message it answers');
    assert.ok(await page.isHidden('#banner'), 'not a banner at the top');
    await page.screenshot({ path: `${screenshots}/failed-phone.png`, fullPage: true });
    await page.click('#run-error .retry-run');
    await page.waitForFunction(() => [...document.querySelectorAll('.msg.assistant .text')]
      .some((node) => node.textContent === 'Second time lucky.'));
    await page.waitForFunction(() => !document.querySelector('#run-error'));
    assert.equal(await page.$$eval('.msg.user', (nodes) => nodes.length), 1, 'nothing was sent again');
  } finally {
    await browser.close();
  }
});

test('a daemon that does not answer is said in a plain sentence, and the message is kept', async () => {
  const browser = await launch();
  try {
    const page = await browser.newPage({ viewport: { width: 1100, height: 760 } });
    page.setDefaultTimeout(TIMEOUT);
    await page.goto(base);
    // The network drops every request to the API, as when the daemon is down.
    await page.route('**/api/v1/chats', (route) => route.abort('connectionrefused'));
    await page.fill('#input', 'are you there?');
    await page.keyboard.press('Enter');
    await page.waitForSelector('#composer-error:not([hidden])');
    const said = await page.textContent('#composer-error');
    assert.match(said, /^Cannot reach Keel at /);
    assert.doesNotMatch(said, /Failed to fetch/);
    assert.equal(await page.inputValue('#input'), 'are you there?');
    await page.screenshot({ path: `${screenshots}/unreachable.png` });
  } finally {
    await browser.close();
  }
});
