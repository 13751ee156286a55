// The web page as a person uses it, in headless Chromium: Markdown replies (a table, a
// highlighted code block and its copy button), the chat list kept current by the list feed
// (a chat made with curl appears, gets its title, can be renamed, searched and deleted), the
// model picker switching the model of the next reply (whose provider error is shown at the
// message), a rejected token and log-out, Escape stopping a reply, dark mode and the phone
// drawer. KEEL_URL is a daemon with the demo model; KEEL_USERS_URL one with a user whose
// token is KEEL_TOKEN and two models. Screenshots land in SCREENSHOT_DIR.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { launch } from './launch.mjs';
import { chatIdOf, rowAction } from './helpers.mjs';

const base = process.env.KEEL_URL;
const usersBase = process.env.KEEL_USERS_URL;
const token = process.env.KEEL_TOKEN;
const screenshots = process.env.SCREENSHOT_DIR || 'target/browser';
const TIMEOUT = 30_000;

async function withPage(options, body) {
  mkdirSync(screenshots, { recursive: true });
  const browser = await launch();
  try {
    const context = await browser.newContext({
      viewport: options.viewport || { width: 1100, height: 760 },
      colorScheme: options.colorScheme || 'light',
    });
    if (options.clipboard) {
      await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: options.origin });
    }
    const page = await context.newPage();
    page.setDefaultTimeout(TIMEOUT);
    const errors = [];
    const foreign = [];
    page.on('pageerror', (error) => errors.push(String(error)));
    page.on('request', (request) => {
      if (!request.url().startsWith(options.origin)) foreign.push(request.url());
    });
    await body(page);
    assert.deepEqual(errors, [], 'the page raised errors');
    assert.deepEqual(foreign, [], 'the page made requests to other origins');
  } finally {
    await browser.close();
  }
}

async function createChat(url, body, headers = {}) {
  const response = await fetch(`${url}/api/v1/chats`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  assert.equal(response.status, 201);
  return response.json();
}

const MARKDOWN = [
  '## Results',
  '',
  'The **fast** path wins:',
  '',
  '| run | time |',
  '| --- | --- |',
  '| cold | 12 ms |',
  '| warm | 3 ms |',
  '',
  '```rust',
  'fn main() {',
  '    println!("hello");',
  '}',
  '```',
  '',
  'Done.',
].join('\n');

test('a Markdown reply shows a table and a highlighted code block whose copy button copies the code', async () => {
  assert.ok(base, 'KEEL_URL must name the daemon');
  await withPage({ origin: base, clipboard: true }, async (page) => {
    await page.goto(base);
    // The message box has the focus on load.
    assert.equal(await page.evaluate(() => document.activeElement.id), 'input');
    await page.fill('#input', '#mock ' + JSON.stringify({ text: MARKDOWN, rate: 0 }));
    await page.keyboard.press('Enter');
    const reply = '.msg.assistant .text.markdown';
    await page.waitForSelector(`${reply} table`);
    await page.waitForSelector(`${reply} .code-block pre code.hljs`);
    const cells = await page.$$eval(`${reply} td`, (tds) => tds.map((td) => td.textContent));
    assert.deepEqual(cells, ['cold', '12 ms', 'warm', '3 ms']);
    assert.equal(await page.textContent(`${reply} h2`), 'Results');
    assert.equal(await page.textContent(`${reply} strong`), 'fast');
    const font = await page.$eval(`${reply} pre code`, (node) => getComputedStyle(node).fontFamily);
    assert.match(font, /mono/i);
    // Highlighted: the keyword is its own styled span.
    assert.ok(await page.$(`${reply} pre code .hljs-keyword`), 'the code was not highlighted');
    assert.equal(await page.textContent(`${reply} .code-language`), 'rust');

    await page.click(`${reply} .copy-code`);
    await page.waitForFunction(() => document.querySelector('.copy-code').textContent === 'Copied');
    const copied = await page.evaluate(() => navigator.clipboard.readText());
    assert.equal(copied.trim(), 'fn main() {\n    println!("hello");\n}');
    await page.screenshot({ path: `${screenshots}/markdown.png`, fullPage: true });

    // The whole reply copies as the Markdown it came as.
    await page.click('.msg.assistant .copy-message');
    assert.equal((await page.evaluate(() => navigator.clipboard.readText())).trim(), MARKDOWN);

    // Escape stops a reply in progress.
    const words = Array.from({ length: 60 }, (_, i) => `word${i + 1}`).join(' ');
    await page.fill('#input', '#mock ' + JSON.stringify({ text: words, rate: 8 }));
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => (document.querySelector('#live .text') || {}).textContent?.includes('word2'));
    await page.keyboard.press('Escape');
    await page.waitForSelector('.msg.assistant .badge.interrupted');
    await page.waitForFunction(() => document.querySelector('#chat-status').textContent === 'Ready');
  });
});

test('the same reply in dark mode', async () => {
  await withPage({ origin: base, colorScheme: 'dark' }, async (page) => {
    const chat = await createChat(base, { text: '#mock ' + JSON.stringify({ text: MARKDOWN, rate: 0 }) });
    await page.goto(`${base}/c/${chat.id}`);
    await page.waitForSelector('.msg.assistant .code-block pre code.hljs');
    const background = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    assert.notEqual(background, 'rgb(250, 250, 250)', 'the page stayed light');
    await page.screenshot({ path: `${screenshots}/markdown-dark.png`, fullPage: true });
  });
});

test('a chat created with curl appears in an open page, gets its title, and can be renamed, found and deleted', async () => {
  await withPage({ origin: base }, async (page) => {
    await page.goto(base);
    await page.waitForSelector('#chat-list li');
    const chat = await createChat(base, { text: 'Plan a trip to Lisbon' });
    const item = `#chat-list li[data-id="${chat.id}"]`;
    await page.waitForSelector(item);
    // The demo model writes the title after its first reply.
    await page.waitForFunction((selector) =>
      document.querySelector(`${selector} .chat-name`)?.textContent === 'Plan a trip to Lisbon', item);
    assert.match(await page.textContent(`${item} .meta`), /now|second|minute/);
    await page.screenshot({ path: `${screenshots}/chat-list.png` });

    await rowAction(page, chat.id, 'rename');
    await page.fill('#rename-input', 'Lisbon in May');
    await page.keyboard.press('Enter');
    await page.waitForFunction((selector) =>
      document.querySelector(`${selector} .chat-name`)?.textContent === 'Lisbon in May', item);
    const stored = await (await fetch(`${base}/api/v1/chats/${chat.id}`)).json();
    assert.equal(stored.title, 'Lisbon in May');

    await page.fill('#search', 'lisbon');
    await page.waitForFunction(() => document.querySelectorAll('#chat-list li[data-id]').length === 1);
    await page.fill('#search', 'no such chat');
    await page.waitForSelector('#chat-list li.empty');
    await page.fill('#search', '');

    const deleted = await fetch(`${base}/api/v1/chats/${chat.id}`, { method: 'DELETE' });
    assert.equal(deleted.status, 204);
    await page.waitForSelector(item, { state: 'detached' });
  });
});

test('on a phone the chat drawer opens and closes', async () => {
  await withPage({ origin: base, viewport: { width: 390, height: 844 } }, async (page) => {
    await page.goto(base);
    const edge = () => page.evaluate(() => document.querySelector('#sidebar').getBoundingClientRect());
    await page.waitForFunction(() => document.querySelector('#sidebar').getBoundingClientRect().right <= 0);
    await page.click('#toggle-sidebar');
    await page.waitForFunction(() => document.querySelector('#sidebar').getBoundingClientRect().left >= 0);
    assert.ok((await edge()).right > 200);
    await page.screenshot({ path: `${screenshots}/phone-drawer-open.png` });
    await page.click('#close-sidebar');
    await page.waitForFunction(() => document.querySelector('#sidebar').getBoundingClientRect().right <= 0);
    await page.screenshot({ path: `${screenshots}/phone-drawer-closed.png` });
    // Tapping beside the drawer closes it too.
    await page.click('#toggle-sidebar');
    await page.waitForFunction(() => document.querySelector('#sidebar').getBoundingClientRect().left >= 0);
    await page.mouse.click(380, 400);
    await page.waitForFunction(() => document.querySelector('#sidebar').getBoundingClientRect().right <= 0);
  });
});

test('a rejected token is said so, the model picker changes the next reply\'s model, and log-out forgets the token', async () => {
  assert.ok(usersBase && token, 'KEEL_USERS_URL and KEEL_TOKEN must be set');
  await withPage({ origin: usersBase }, async (page) => {
    await page.goto(usersBase);
    await page.waitForSelector('#token-dialog[open]');
    assert.ok(await page.isHidden('#token-error'), 'no token was refused yet');
    await page.fill('#token-input', 'not-a-token');
    await page.click('#token-form button');
    await page.waitForSelector('#token-dialog[open] #token-error:not([hidden])');
    await page.screenshot({ path: `${screenshots}/token-rejected.png` });
    await page.fill('#token-input', token);
    await page.click('#token-form button');
    await page.waitForSelector('#token-dialog[open]', { state: 'detached' });
    await page.waitForSelector('#log-out:not([hidden])');

    await page.waitForSelector('#model:not([hidden])');
    await page.fill('#input', 'hello from the page');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => [...document.querySelectorAll('.msg.assistant .text')]
      .some((node) => node.textContent === 'hello from the page'));
    await page.waitForFunction(() => document.querySelector('#chat-status').dataset.status === 'waiting');
    const id = chatIdOf(page);

    await page.selectOption('#model', 'unreachable');
    await page.waitForFunction(() => document.querySelector('#banner').textContent.includes('unreachable'));
    const chat = await (await fetch(`${usersBase}/api/v1/chats/${id}`, {
      headers: { Authorization: `Bearer ${token}` },
    })).json();
    assert.equal(chat.model, 'unreachable');
    await page.fill('#input', 'and again');
    await page.keyboard.press('Enter');
    // The next reply came from the switched model: its provider is down, and the failure is
    // shown after the message, naming the model and provider.
    await page.waitForSelector('#run-error');
    const error = await page.textContent('#run-error');
    assert.match(error, /unreachable/);
    assert.match(error, /offline/);
    // The address the request went to, so a wrong base URL or a dead host is plain to see.
    assert.match(await page.textContent('#run-error .error-url'), /http:\/\/127\.0\.0\.1:9\/v1\/chat\/completions/);
    assert.ok(await page.isVisible('#run-error .retry-run'));
    // It sits right after the message it belongs to.
    const before = await page.evaluate(() => document.querySelector('#run-error').previousElementSibling.textContent);
    assert.match(before, /and again/);
    await page.screenshot({ path: `${screenshots}/provider-error.png`, fullPage: true });

    await page.click('#log-out');
    await page.waitForSelector('#token-dialog[open]');
    assert.ok(await page.isHidden('#token-error'), 'logging out is no rejection');
    assert.equal(await page.evaluate(() => localStorage.getItem('keel-token')), null);
  });
});

test('on the page: Shift+Enter, a title within seconds, states in words, archive, unarchive and delete', async () => {
  await withPage({ origin: base }, async (page) => {
    await page.goto(base);
    assert.equal(await page.evaluate(() => document.activeElement.id), 'input');
    // Shift+Enter starts a new line; Enter sends the two lines as one message.
    await page.keyboard.type('Packing list for Lisbon');
    await page.keyboard.press('Shift+Enter');
    await page.keyboard.type('two days');
    assert.equal(await page.inputValue('#input'), 'Packing list for Lisbon\ntwo days');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.querySelector('.msg.user .text')?.textContent
      === 'Packing list for Lisbon\ntwo days');
    const id = await page.waitForFunction(() => /^\/c\//.test(location.pathname) && location.pathname.slice(3))
      .then((handle) => handle.jsonValue());
    const item = `#chat-list li[data-id="${id}"]`;
    // The title comes within seconds of the first reply, in the header and the list alike.
    await page.waitForFunction((selector) => {
      const title = document.querySelector('#chat-title').textContent;
      return title !== 'New chat' && document.querySelector(`${selector} .chat-name`)?.textContent === title;
    }, item);
    assert.equal(await page.textContent('#chat-status'), 'Ready');

    // A reply in progress says so in words.
    const words = Array.from({ length: 60 }, (_, i) => `word${i + 1}`).join(' ');
    await page.fill('#input', '#mock ' + JSON.stringify({ text: words, rate: 8 }));
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.querySelector('#chat-status').textContent === 'Replying…');
    assert.equal(await page.textContent('#send'), 'Queue', 'while a reply runs, Send queues');
    await page.screenshot({ path: `${screenshots}/replying.png` });
    await page.click('#stop');
    await page.waitForFunction(() => document.querySelector('#chat-status').textContent === 'Ready');

    // Archive hides the chat from the list; Show archived brings it back, marked.
    await rowAction(page, id, 'archive');
    await page.waitForSelector(item, { state: 'detached' });
    await page.check('#show-archived');
    await page.waitForSelector(`${item}.archived`);
    assert.match(await page.textContent(`${item} .meta`), /archived/);
    await page.screenshot({ path: `${screenshots}/archived.png` });
    await rowAction(page, id, 'unarchive');
    await page.waitForSelector(`${item}:not(.archived)`);
    await page.uncheck('#show-archived');
    await page.waitForSelector(item);

    // Delete asks first in the page, then the chat is gone from the page at once and from
    // the daemon when the time to undo it is up.
    await rowAction(page, id, 'delete');
    await page.click('#delete-dialog button.danger');
    await page.waitForSelector(item, { state: 'detached' });
    await page.waitForFunction(async (chat) => (await fetch(`/api/v1/chats/${chat}`)).status === 404, id, { polling: 250 });
  });
});
