// How the page looks and reads, at desktop size and 390 px, light and dark: axe-core finds
// no serious or critical problem on any screen (the first screen, a chat, editing, a failed
// reply, the chat list's drawer and menu, the rename dialog, an unknown chat); Send and the
// placeholder have a contrast of at least 4.5:1; the message box grows with its text until
// ten lines show; the first screen names the model and offers starter prompts.
// Screenshots of each screen in SCREENSHOT_DIR.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  COMBOS, assertAccessible, base, contrast, createChat, script, settled, shot, showList, waitIdle, withPage,
} from './helpers.mjs';

const MARKDOWN = ['## Plan', '', 'Some **bold** words and a [link](/api/v1/models).', '',
  '| step | time |', '| --- | --- |', '| one | 1 s |', '',
  '```rust', 'fn main() {', '    println!("hello");', '}', '```'].join('\n');

// The background colour a node is seen on: its own, or the nearest ancestor's that has one.
const backgroundOf = (page, selector) => page.$eval(selector, (node) => {
  for (let n = node; n; n = n.parentElement) {
    const color = getComputedStyle(n).backgroundColor;
    if (color && !/rgba\(.*, 0\)$/.test(color) && color !== 'transparent') return color;
  }
  return 'rgb(255, 255, 255)';
});

for (const [size, scheme] of COMBOS) {
  test(`every screen passes axe-core, and reads clearly (${size}, ${scheme})`, async () => {
    const other = await createChat({ text: 'a chat for the list', title: `Listed ${size} ${scheme}` });
    await settled(other.id);
    await withPage({ size, scheme }, async (page) => {
      const name = (screen) => `${screen}-${size}-${scheme}`;

      // The first screen: the model, starter prompts, a message box with the focus.
      await page.goto(base);
      await page.waitForSelector('#welcome:not([hidden]) .starter');
      assert.match(await page.textContent('#welcome'), /demo/);
      assert.ok(await page.$$eval('.starter', (n) => n.length) >= 3);
      await assertAccessible(page, name('empty'));
      await shot(page, name('screen-empty'));

      // Send and the placeholder: 4.5:1 at least.
      const send = await page.$eval('#send', (n) => ({ fg: getComputedStyle(n).color, bg: getComputedStyle(n).backgroundColor }));
      assert.ok(contrast(send.fg, send.bg) >= 4.5, `Send: ${contrast(send.fg, send.bg).toFixed(2)}:1`);
      const placeholder = await page.$eval('#input', (n) => getComputedStyle(n, '::placeholder').color);
      const field = await backgroundOf(page, '#input');
      assert.ok(contrast(placeholder, field) >= 4.5, `placeholder: ${contrast(placeholder, field).toFixed(2)}:1`);

      // The message box grows with its text: ten lines show whole, more scroll.
      const one = await page.$eval('#input', (n) => n.clientHeight);
      await page.fill('#input', Array.from({ length: 10 }, (_, i) => `line ${i + 1}`).join('\n'));
      const ten = await page.$eval('#input', (n) => ({ client: n.clientHeight, scroll: n.scrollHeight }));
      assert.ok(ten.client > one * 3, `the box did not grow: ${one} → ${ten.client}`);
      assert.ok(ten.scroll <= ten.client + 1, `ten lines do not show: ${ten.scroll} > ${ten.client}`);
      await shot(page, name('composer-ten-lines'));
      await page.fill('#input', Array.from({ length: 30 }, (_, i) => `line ${i + 1}`).join('\n'));
      const thirty = await page.$eval('#input', (n) => ({ client: n.clientHeight, scroll: n.scrollHeight }));
      assert.ok(thirty.scroll > thirty.client, 'the box grew without end');
      await page.fill('#input', '');
      assert.ok(await page.$eval('#input', (n) => n.clientHeight) < ten.client, 'the box did not shrink back');

      // A starter prompt starts a chat with it.
      const starter = await page.textContent('.starter');
      await page.click('.starter');
      await page.waitForFunction((text) => document.querySelector('.msg.user .text')?.textContent === text, starter);
      await waitIdle(page);

      // A chat with Markdown, code and versions.
      await page.fill('#input', script(MARKDOWN));
      await page.keyboard.press('Enter');
      await page.waitForSelector('.msg.assistant .code-block pre code.hljs');
      await waitIdle(page);
      await assertAccessible(page, name('chat'));
      await shot(page, name('screen-chat'));

      // Editing a message.
      await page.locator('.msg.user .edit-link').last().click();
      await page.waitForSelector('.edit-box');
      await assertAccessible(page, name('editing'));
      await shot(page, name('screen-editing'));
      await page.keyboard.press('Escape');

      // A failed reply.
      await page.fill('#input', script('never', 0, { error: { status: 400, message: 'the model refused the request' } }));
      await page.keyboard.press('Enter');
      await page.waitForSelector('#run-error .retry-run');
      await assertAccessible(page, name('error'));
      await shot(page, name('screen-error'));

      // The chat list (a drawer on a phone) with a row's menu open.
      await showList(page);
      await page.click(`#chat-list li[data-id="${other.id}"] .chat-menu-button`);
      await page.waitForSelector(`#chat-list li[data-id="${other.id}"] .chat-menu:not([hidden])`);
      await assertAccessible(page, name('menu'));
      await shot(page, name('screen-menu'));

      // The rename dialog.
      await page.click(`#chat-list li[data-id="${other.id}"] [data-action="rename"]`);
      await page.waitForSelector('#rename-dialog[open]');
      await assertAccessible(page, name('rename-dialog'));
      await page.keyboard.press('Escape');

      // An unknown chat.
      await page.goto(`${base}/c/00000000-0000-4000-8000-000000000000`);
      await page.waitForSelector('#not-found:not([hidden])');
      await assertAccessible(page, name('not-found'));
    });
  });
}
