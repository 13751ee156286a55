// What the browser tests of the page share: the sizes and themes they run at, a page in a
// fresh browser that fails the test on a script error or a request to another origin,
// chats made through the API, screenshots, axe-core's accessibility check, and a
// `keel serve` of a test's own (to kill and restart). KEEL_URL names the demo daemon.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { launch } from './launch.mjs';

export const base = process.env.KEEL_URL;
export const screenshots = process.env.SCREENSHOT_DIR || 'target/browser';
export const TIMEOUT = 30_000;

export const SIZES = {
  desktop: { width: 1280, height: 800 },
  phone: { width: 390, height: 844 },
};

// Every size in both themes.
export const COMBOS = [['desktop', 'light'], ['desktop', 'dark'], ['phone', 'light'], ['phone', 'dark']];

export function words(n, from = 1) {
  return Array.from({ length: n }, (_, i) => `word${from + i}`).join(' ');
}

// The message that has the demo model answer `text` at `rate` tokens a second (0: at once).
export function script(text, rate = 0, extra = {}) {
  return '#mock ' + JSON.stringify({ text, rate, ...extra });
}

// Runs `body(page, context)` in a fresh headless Chromium at `size` in `scheme`. The page
// must raise no error, ask nothing of another origin, and open no browser dialog
// (`alert`, `confirm`, `prompt`): its dialogs are its own.
export async function withPage(options, body) {
  mkdirSync(screenshots, { recursive: true });
  const origin = options.origin || base;
  const browser = await launch();
  try {
    const phone = options.size === 'phone';
    const context = await browser.newContext({
      viewport: SIZES[options.size || 'desktop'],
      colorScheme: options.scheme || 'light',
      hasTouch: phone,
      isMobile: phone,
    });
    if (options.clipboard) {
      await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin });
    }
    const page = await context.newPage();
    page.setDefaultTimeout(TIMEOUT);
    const errors = [];
    const foreign = [];
    const dialogs = [];
    page.on('pageerror', (error) => errors.push(String(error)));
    page.on('request', (request) => {
      const origins = [origin, ...(options.origins || [])];
      if (!origins.some((o) => request.url().startsWith(o))) foreign.push(request.url());
    });
    page.on('dialog', (dialog) => {
      dialogs.push(dialog.type() + ': ' + dialog.message());
      dialog.dismiss().catch(() => {});
    });
    await body(page, context);
    assert.deepEqual(errors, [], 'the page raised errors');
    assert.deepEqual(foreign, [], 'the page made requests to other origins');
    assert.deepEqual(dialogs, [], 'the page opened a browser dialog');
  } finally {
    await browser.close();
  }
}

export async function shot(page, name) {
  await page.screenshot({ path: `${screenshots}/${name}.png` });
}

export async function createChat(body, url = base) {
  const response = await fetch(`${url}/api/v1/chats`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(typeof body === 'string' ? { text: body } : body),
  });
  assert.equal(response.status, 201);
  return response.json();
}

export async function getChat(id, url = base) {
  const response = await fetch(`${url}/api/v1/chats/${id}`);
  return response.status === 200 ? response.json() : null;
}

// Waits (through the API) until the chat's run is over.
export async function settled(id, url = base) {
  for (let i = 0; i < 600; i++) {
    const chat = await getChat(id, url);
    if (chat && ['waiting', 'error', 'requires_action'].includes(chat.status)) return chat;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`chat ${id} never settled`);
}

export async function sendMessage(id, text, url = base) {
  const response = await fetch(`${url}/api/v1/chats/${id}/messages`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ text }),
  });
  assert.equal(response.status, 202);
  return settled(id, url);
}

export async function waitIdle(page) {
  await page.waitForFunction(() => ['waiting', 'error', 'requires_action']
    .includes(document.querySelector('#chat-status').dataset.status));
}

// The drawer of a phone is opened first; on a desktop the list is always there.
export async function showList(page) {
  if (await page.isVisible('#toggle-sidebar')) {
    if (!(await page.evaluate(() => document.querySelector('#sidebar').classList.contains('open')))) {
      await page.click('#toggle-sidebar');
    }
    await page.waitForFunction(() => document.querySelector('#sidebar').getBoundingClientRect().left >= 0);
  }
}

// Opens the "⋯" menu of a chat's row and clicks one of its actions.
export async function rowAction(page, chatId, action) {
  await showList(page);
  const row = `#chat-list li[data-id="${chatId}"]`;
  await page.click(`${row} .chat-menu-button`);
  await page.click(`${row} .chat-menu [data-action="${action}"]`);
}

const require = createRequire(import.meta.url);
const AXE = readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');

// Runs axe-core in the page and fails on any serious or critical violation, naming the
// rule and the elements. `screen` names the screen in the message.
export async function assertAccessible(page, screen) {
  await page.evaluate(AXE);
  const violations = await page.evaluate(async () => {
    const result = await window.axe.run(document, {
      runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa', 'best-practice'] },
    });
    return result.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
      .map((v) => `${v.id} (${v.impact}): ${v.help} — ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')
        + (n.failureSummary ? ' [' + n.failureSummary.replace(/\s+/g, ' ') + ']' : '')).join('; ')}`);
  });
  assert.deepEqual(violations, [], `axe found problems on the ${screen} screen`);
}

// WCAG's contrast ratio of two CSS colours (rgb or rgba over an opaque background).
export function contrast(foreground, background) {
  const parse = (text) => text.match(/[\d.]+/g).map(Number);
  const [br, bg, bb] = parse(background);
  const [fr, fg, fb, fa = 1] = parse(foreground);
  const mix = [fr * fa + br * (1 - fa), fg * fa + bg * (1 - fa), fb * fa + bb * (1 - fa)];
  const lum = ([r, g, b]) => {
    const f = (c) => { const s = c / 255; return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const [hi, lo] = [lum(mix), lum([br, bg, bb])].sort((a, b) => b - a);
  return (hi + 0.05) / (lo + 0.05);
}

// Starts `keel serve` (KEEL_BIN) in `dir`, whose database lives there, on `listen`, and
// resolves with the daemon's process and URL once it listens.
export function serve(dir, listen = '127.0.0.1:0') {
  const env = { ...process.env };
  for (const name of ['KEEL_CONFIG', 'KEEL_LISTEN', 'KEEL_DATABASE_URL', 'OPENAI_API_KEY', 'ANTHROPIC_API_KEY']) {
    delete env[name];
  }
  const child = spawn(process.env.KEEL_BIN, ['serve', '--listen', listen], { cwd: dir, env });
  return new Promise((resolve, reject) => {
    let log = '';
    const read = (chunk) => {
      log += chunk;
      const found = log.match(/keel listening on (http:\/\/[0-9.:]+)/);
      if (found) resolve({ child, url: found[1] });
    };
    child.stdout.on('data', read);
    child.stderr.on('data', read);
    child.on('exit', (code) => reject(new Error(`keel exited (${code}) before listening:\n${log}`)));
  });
}

export function kill9(daemon) {
  if (daemon.child.exitCode !== null || daemon.child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    daemon.child.removeAllListeners('exit');
    daemon.child.on('exit', resolve);
    daemon.child.kill('SIGKILL');
  });
}

// The id of the chat the page's address names.
export function chatIdOf(page) {
  const match = /\/c\/([^/?#]+)/.exec(new URL(page.url()).pathname);
  return match ? decodeURIComponent(match[1]) : null;
}
