// The chat list's own failures, in headless Chromium: a Rename, Archive or Delete that fails
// (the chat gone: a 404; the daemon down: no answer at all) is said at that chat's entry in
// the list (in the drawer on a phone), never in the banner above the open chat, which
// belongs to that chat. The failures are made by answering the page's request in the
// browser, so the daemon's own state is untouched. KEEL_URL is a daemon with the demo model;
// screenshots land in SCREENSHOT_DIR.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { launch } from './launch.mjs';
import { rowAction } from './helpers.mjs';

const base = process.env.KEEL_URL;
const screenshots = process.env.SCREENSHOT_DIR || 'target/browser';
const TIMEOUT = 30_000;

async function createChat(text) {
  const response = await fetch(`${base}/api/v1/chats`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ text, title: text }),
  });
  assert.equal(response.status, 201);
  return response.json();
}

async function withPage(viewport, body) {
  mkdirSync(screenshots, { recursive: true });
  const browser = await launch();
  try {
    const page = await (await browser.newContext({ viewport })).newPage();
    page.setDefaultTimeout(TIMEOUT);
    const errors = [];
    page.on('pageerror', (error) => errors.push(String(error)));
    await body(page);
    assert.deepEqual(errors, [], 'the page raised errors');
  } finally {
    await browser.close();
  }
}

const NOT_FOUND = {
  status: 404,
  contentType: 'application/json',
  body: JSON.stringify({ error: { code: 'not_found', message: 'no such chat' }, request_id: 'r1' }),
};

async function listErrorOf(page, item) {
  await page.waitForSelector(`${item} .list-error`);
  return page.textContent(`${item} .list-error`);
}

// The banner above the open chat says nothing of another chat's failures.
async function assertBannerQuiet(page) {
  assert.equal(await page.isHidden('#banner'), true, await page.textContent('#banner'));
}

for (const [size, viewport] of [['desktop', { width: 1100, height: 760 }], ['phone', { width: 390, height: 844 }]]) {
  test(`failed chat-list actions are said at the chat's entry (${size})`, async () => {
    const open = await createChat(`Open chat ${size}`);
    const other = await createChat(`Other chat ${size}`);
    await withPage(viewport, async (page) => {
      await page.goto(`${base}/c/${open.id}`);
      const item = `#chat-list li[data-id="${other.id}"]`;
      await page.waitForSelector(`#chat-list li[data-id="${open.id}"]`, { state: 'attached' });
      await page.waitForSelector(item, { state: 'attached' });
      if (size === 'phone') {
        await page.click('#toggle-sidebar');
        await page.waitForFunction(() => document.querySelector('#sidebar').getBoundingClientRect().left >= 0);
      }

      // Rename answered 404: the chat is gone.
      await page.route(`**/api/v1/chats/${other.id}`, (route) =>
        (route.request().method() === 'PATCH' ? route.fulfill(NOT_FOUND) : route.continue()));
      await rowAction(page, other.id, 'rename');
      await page.fill('#rename-input', 'A new name');
      await page.click('#rename-dialog button.primary');
      assert.match(await listErrorOf(page, item), /^Rename failed: no such chat/);
      await assertBannerQuiet(page);

      // Archive with the daemon unreachable.
      await page.route(`**/api/v1/chats/${other.id}/archive`, (route) => route.abort('connectionrefused'));
      await rowAction(page, other.id, 'archive');
      await page.waitForFunction((selector) =>
        document.querySelector(`${selector} .list-error`)?.textContent.startsWith('Archive failed'), item);
      assert.match(await listErrorOf(page, item), /^Archive failed: Cannot reach Keel at /);
      await assertBannerQuiet(page);
      await page.screenshot({ path: `${screenshots}/list-error-${size}.png` });

      // Delete answered 404; the error stays at the entry while the list redraws.
      await page.route(`**/api/v1/chats/${other.id}`, (route) =>
        (route.request().method() === 'DELETE' ? route.fulfill(NOT_FOUND) : route.continue()));
      await rowAction(page, other.id, 'delete');
      await page.click('#delete-dialog button.danger');
      await page.waitForFunction((selector) =>
        document.querySelector(`${selector} .list-error`)?.textContent.startsWith('Delete failed'), item);
      assert.match(await listErrorOf(page, item), /^Delete failed: no such chat/);
      await assertBannerQuiet(page);
      // Only that entry says it; the open chat's entry does not.
      assert.equal(await page.$(`#chat-list li[data-id="${open.id}"] .list-error`), null);
      await page.screenshot({ path: `${screenshots}/list-error-${size}-delete.png` });

      // Nothing changed on the daemon.
      const stored = await (await fetch(`${base}/api/v1/chats/${other.id}`)).json();
      assert.equal(stored.title, `Other chat ${size}`);
      assert.equal(stored.archived, false);
    });
  });
}
