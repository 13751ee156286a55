// The chat list under a finger, at 390 px with touch, light and dark: a row is one large
// target (a tap anywhere on it opens the chat and changes nothing else), its actions wait
// behind its "⋯" menu, an archive and a delete can be undone, every control is at least
// 44 px each way, none appears only on hover, and the page keeps clear of a phone's notch
// and home bar (safe-area insets). Screenshots in SCREENSHOT_DIR.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { base, createChat, getChat, settled, shot, showList, withPage } from './helpers.mjs';

// Every visible control (buttons, links, fields) in `scope` smaller than 44×44 px.
const smallTargets = (page, scope) => page.evaluate((selector) => {
  const small = [];
  for (const node of document.querySelectorAll(`${selector} button, ${selector} a[href], ${selector} select, ${selector} input, ${selector} textarea, ${selector} summary`)) {
    const box = node.getBoundingClientRect();
    const style = getComputedStyle(node);
    if (!box.width || !box.height || style.visibility === 'hidden' || node.closest('[hidden]')) continue;
    if (node.closest('.markdown')) continue; // links inside a reply's text
    // A checkbox counts with its label, which is the target.
    const target = node.type === 'checkbox' && node.closest('label') ? node.closest('label').getBoundingClientRect() : box;
    if (target.height < 44 || target.width < 44) {
      small.push(`${node.tagName.toLowerCase()}${node.id ? '#' + node.id : ''}.${node.className} ${Math.round(target.width)}×${Math.round(target.height)}`);
    }
  }
  return small;
}, scope);

for (const scheme of ['light', 'dark']) {
  test(`on a phone a tap on a chat row opens it and archives nothing (${scheme})`, async () => {
    const first = await createChat({ text: 'first of two', title: `Tap target one ${scheme}` });
    const second = await createChat({ text: 'second of two', title: `Tap target two ${scheme}` });
    await settled(first.id);
    await settled(second.id);
    await withPage({ size: 'phone', scheme }, async (page) => {
      await page.goto(base);
      await showList(page);
      await page.waitForSelector(`#chat-list li[data-id="${first.id}"]`);
      await shot(page, `phone-list-${scheme}`);
      // No control hides until hovered: the menu button of every row shows as it is.
      for (const id of [first.id, second.id]) {
        const button = `#chat-list li[data-id="${id}"] .chat-menu-button`;
        assert.ok(await page.isVisible(button));
        assert.equal(await page.$eval(button, (n) => getComputedStyle(n).opacity), '1');
      }
      assert.deepEqual(await smallTargets(page, '#sidebar'), [], 'targets under 44 px in the chat list');

      // Taps where Rename, Archive and Delete used to sit (the row's lower edge, its right
      // part left of the menu) and in its middle: each opens the chat, nothing else.
      const row = await page.$eval(`#chat-list li[data-id="${first.id}"]`, (n) => {
        const r = n.getBoundingClientRect();
        const menu = n.querySelector('.chat-menu-button').getBoundingClientRect();
        return { left: r.left, right: menu.left, top: r.top, bottom: r.bottom };
      });
      const spots = [
        [row.left + 12, row.bottom - 3], [row.left + 50, row.bottom - 3], [row.right - 8, row.bottom - 3],
        [row.right - 8, (row.top + row.bottom) / 2], [(row.left + row.right) / 2, (row.top + row.bottom) / 2],
      ];
      for (const [x, y] of spots) {
        await showList(page);
        await page.touchscreen.tap(x, y);
        await page.waitForFunction((id) => location.pathname === `/c/${id}`, first.id);
        await page.waitForFunction(() => document.querySelector('#sidebar').getBoundingClientRect().right <= 0);
        await page.waitForSelector('.msg.user');
        // Back to where the tap started from, for the next one.
        await page.goBack();
        await page.waitForFunction(() => location.pathname === '/');
      }
      for (const chat of [first, second]) {
        const stored = await getChat(chat.id);
        assert.equal(stored.archived, false, `a tap archived ${chat.title}`);
      }

      // The open chat at full size: every control a finger can hit.
      await page.goto(`${base}/c/${first.id}`);
      await page.waitForSelector('.msg.assistant .regenerate');
      assert.deepEqual(await smallTargets(page, '#main'), [], 'targets under 44 px in the chat');
      await shot(page, `phone-chat-${scheme}`);
    });
  });

  test(`on a phone archive and delete wait behind a menu and can be undone (${scheme})`, async () => {
    const chat = await createChat({ text: 'keep me', title: `Undo me ${scheme}` });
    await settled(chat.id);
    await withPage({ size: 'phone', scheme }, async (page) => {
      await page.goto(base);
      await showList(page);
      const row = `#chat-list li[data-id="${chat.id}"]`;
      await page.waitForSelector(row);
      await page.tap(`${row} .chat-menu-button`);
      await page.waitForSelector(`${row} .chat-menu:not([hidden])`);
      assert.deepEqual(await smallTargets(page, `${row} .chat-menu`), []);
      await shot(page, `phone-menu-${scheme}`);

      // Archive, then Undo: the chat is back, on the daemon too.
      await page.tap(`${row} [data-action="archive"]`);
      await page.waitForSelector(row, { state: 'detached' });
      await page.waitForSelector('.toast .toast-action');
      assert.match(await page.textContent('.toast'), /Archived "Undo me/);
      assert.equal((await getChat(chat.id)).archived, true);
      await shot(page, `phone-archived-toast-${scheme}`);
      await page.tap('.toast .toast-action');
      await page.waitForSelector(row);
      await page.waitForFunction(async (id) => !(await (await fetch(`/api/v1/chats/${id}`)).json()).archived, chat.id);

      // Delete asks in the page, then can be undone: nothing reaches the daemon.
      await page.tap(`${row} .chat-menu-button`);
      await page.tap(`${row} [data-action="delete"]`);
      await page.waitForSelector('#delete-dialog[open]');
      assert.match(await page.textContent('#delete-text'), /Undo me/);
      await shot(page, `phone-delete-dialog-${scheme}`);
      await page.tap('#delete-dialog button.danger');
      await page.waitForSelector(row, { state: 'detached' });
      await page.waitForSelector('.toast:has-text("Deleted") .toast-action');
      await page.tap('.toast:has-text("Deleted") .toast-action');
      await page.waitForSelector(row);
      // Nothing is left waiting to be sent: the delete is gone with its Undo.
      assert.equal(await page.evaluate(() => view.deleting.size), 0, 'an undone delete is still pending');
      assert.ok(await getChat(chat.id), 'an undone delete deleted the chat');

      // Delete without Undo: gone from the daemon once the undo time is up.
      await page.tap(`${row} .chat-menu-button`);
      await page.tap(`${row} [data-action="delete"]`);
      await page.tap('#delete-dialog button.danger');
      await page.waitForSelector(row, { state: 'detached' });
      await page.waitForFunction(async (id) => (await fetch(`/api/v1/chats/${id}`)).status === 404, chat.id, { polling: 250 });
    });
  });
}

test('the page keeps clear of a phone\'s notch and home bar', async () => {
  await withPage({ size: 'phone' }, async (page) => {
    await page.goto(base);
    assert.match(await page.getAttribute('meta[name=viewport]', 'content'), /viewport-fit=cover/);
    // The insets the browser reports are taken in by the page's edges.
    const rules = await page.evaluate(() => [...document.styleSheets].flatMap((sheet) => {
      try { return [...sheet.cssRules].map((r) => r.cssText); } catch (_) { return []; }
    }).join('\n'));
    for (const side of ['top', 'bottom', 'left', 'right']) {
      assert.match(rules, new RegExp(`env\\(safe-area-inset-${side}\\)`), `no safe-area inset at the ${side}`);
    }
    assert.match(rules, /#composer[^{]*\{[^}]*safe-area-inset-bottom/, 'the message box sits above the home bar');
  });
});
