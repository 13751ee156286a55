// Addresses: each chat has its own (`/c/ID`), Back and Forward move between chats, the tab
// is named after the open chat, an unknown chat gets a clear "not found" page, the older
// `#chat=ID` links still open their chat, and the page has an icon (no request of the page
// is answered 404). At desktop size and 390 px, light and dark; screenshots in
// SCREENSHOT_DIR.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { base, chatIdOf, createChat, settled, shot, showList, withPage } from './helpers.mjs';

const shows = (page, text) => page.waitForFunction((want) => [...document.querySelectorAll('.msg.user .text')]
  .some((n) => n.textContent === want), text);

for (const [size, scheme] of [['desktop', 'light'], ['phone', 'dark']]) {
  test(`Back and Forward move between chats, each with its address and tab title (${size}, ${scheme})`, async () => {
    const first = await createChat({ text: `first chat ${size}`, title: `Harbour ${size}` });
    const second = await createChat({ text: `second chat ${size}`, title: `Lighthouse ${size}` });
    await settled(first.id);
    await settled(second.id);
    await withPage({ size, scheme }, async (page) => {
      const missing = [];
      page.on('response', (response) => { if (response.status() === 404) missing.push(response.url()); });
      await page.goto(`${base}/c/${first.id}`);
      await shows(page, `first chat ${size}`);
      await page.waitForFunction((title) => document.title === `${title} – Keel`, `Harbour ${size}`);
      assert.equal(await page.textContent('#chat-title'), `Harbour ${size}`);

      // A click on the other chat gives it its own history entry.
      await showList(page);
      await page.click(`#chat-list li[data-id="${second.id}"] .chat-link`);
      await shows(page, `second chat ${size}`);
      assert.equal(chatIdOf(page), second.id);
      await page.waitForFunction((title) => document.title === `${title} – Keel`, `Lighthouse ${size}`);
      // Its link is a real link: the address it names is the chat's.
      assert.equal(await page.getAttribute(`#chat-list li[data-id="${second.id}"] .chat-link`, 'href'), `/c/${second.id}`);

      await page.goBack();
      await shows(page, `first chat ${size}`);
      assert.equal(chatIdOf(page), first.id);
      await page.waitForFunction((title) => document.title === `${title} – Keel`, `Harbour ${size}`);
      assert.equal(await page.$$eval('.msg.user', (n) => n.length), 1, 'the other chat\'s messages stayed');
      await page.goForward();
      await shows(page, `second chat ${size}`);
      assert.equal(chatIdOf(page), second.id);

      // New chat is an address of its own too, and Back returns to the chat.
      await showList(page);
      await page.click('#new-chat');
      await page.waitForFunction(() => location.pathname === '/' && document.title === 'New chat – Keel');
      await page.goBack();
      await shows(page, `second chat ${size}`);

      // A reload stays on the chat.
      await page.reload();
      await shows(page, `second chat ${size}`);
      await shot(page, `address-${size}-${scheme}`);

      // The older `#chat=ID` address opens its chat, under the new address.
      await page.goto(`${base}/#chat=${first.id}`);
      await shows(page, `first chat ${size}`);
      assert.equal(new URL(page.url()).pathname, `/c/${first.id}`);
      assert.deepEqual(missing, [], 'requests answered 404');
    });
  });

  test(`an unknown chat says so (${size}, ${scheme})`, async () => {
    await withPage({ size, scheme }, async (page) => {
      for (const id of ['00000000-0000-4000-8000-000000000000', 'not-a-chat']) {
        await page.goto(`${base}/c/${id}`);
        await page.waitForSelector('#not-found:not([hidden])');
        assert.match(await page.textContent('#not-found'), /Chat not found/);
        assert.equal(await page.title(), 'Chat not found – Keel');
        assert.ok(await page.isHidden('#messages'));
      }
      await shot(page, `not-found-${size}-${scheme}`);
      // A message typed here starts a new chat.
      await page.fill('#input', 'a fresh start');
      await page.keyboard.press('Enter');
      await shows(page, 'a fresh start');
      assert.ok(chatIdOf(page));
      assert.ok(await page.isHidden('#not-found'));
    });
  });
}

test('the page has an icon', async () => {
  const ico = await fetch(`${base}/favicon.ico`);
  assert.equal(ico.status, 200);
  assert.equal(ico.headers.get('content-type'), 'image/x-icon');
  const svg = await fetch(`${base}/favicon.svg`);
  assert.equal(svg.status, 200);
  await withPage({}, async (page) => {
    await page.goto(base);
    const icons = await page.$$eval('link[rel=icon]', (links) => links.map((l) => l.getAttribute('href')));
    assert.deepEqual(icons, ['/favicon.ico', '/favicon.svg']);
    // The browser's own request for the icon is answered.
    const response = await page.request.get(`${base}/favicon.ico`);
    assert.equal(response.status(), 200);
  });
});
