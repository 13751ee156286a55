// The page with the keyboard alone, at desktop size, light and dark: Ctrl+K and the arrows
// reach another chat, Enter opens it, Alt+Up and Alt+Down step through the list, a row's
// menu opens with Shift+F10 and renames through the page's dialog, Ctrl+Shift+O starts a
// new chat, Shift+Escape comes back to the message box, Ctrl+/ lists the keys; Tab reaches
// every control and the focus is always visible. On a phone, Tab never lands in the closed
// drawer. Screenshots in SCREENSHOT_DIR.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { base, createChat, getChat, settled, shot, withPage } from './helpers.mjs';

const focused = (page) => page.evaluate(() => {
  const node = document.activeElement;
  return {
    id: node.id,
    row: node.closest('#chat-list li')?.dataset.id || null,
    className: node.className,
    tag: node.tagName.toLowerCase(),
  };
});

// The focus ring of the focused element: an outline at least 2 px wide, not the default
// `none`, in a colour that is not the background's.
async function assertFocusVisible(page) {
  const ring = await page.evaluate(() => {
    const style = getComputedStyle(document.activeElement);
    return { style: style.outlineStyle, width: parseFloat(style.outlineWidth), color: style.outlineColor, tag: document.activeElement.tagName };
  });
  assert.notEqual(ring.style, 'none', `no focus ring on ${ring.tag}`);
  assert.ok(ring.width >= 2, `a thin focus ring on ${ring.tag}: ${ring.width}px`);
}

for (const scheme of ['light', 'dark']) {
  test(`the keyboard alone opens, steps through, renames and starts chats (${scheme})`, async () => {
    const stamp = Date.now();
    const chats = [];
    for (const name of ['Alpha', 'Bravo', 'Charlie']) {
      const chat = await createChat({ text: `${name} question`, title: `${name} ${scheme} ${stamp}` });
      await settled(chat.id);
      chats.push(chat);
    }
    // The list puts the most recently active first: Charlie, Bravo, Alpha.
    await withPage({ size: 'desktop', scheme }, async (page) => {
      await page.goto(base);
      await page.waitForSelector(`#chat-list li[data-id="${chats[0].id}"]`);
      await page.fill('#search', `${scheme} ${stamp}`);
      await page.focus('#input');

      // Ctrl+K searches; Down goes into the list; Enter opens the chat there.
      await page.keyboard.press('Control+k');
      assert.equal((await focused(page)).id, 'search');
      await page.keyboard.press('ArrowDown');
      assert.equal((await focused(page)).row, chats[2].id);
      await assertFocusVisible(page);
      await page.keyboard.press('ArrowDown');
      assert.equal((await focused(page)).row, chats[1].id);
      await shot(page, `keyboard-list-focus-${scheme}`);
      await page.keyboard.press('Enter');
      await page.waitForFunction((id) => location.pathname === `/c/${id}`, chats[1].id);
      await page.waitForSelector('.msg.user');

      // Alt+Down and Alt+Up: the next and the previous chat of the list.
      await page.keyboard.press('Alt+ArrowDown');
      await page.waitForFunction((id) => location.pathname === `/c/${id}`, chats[0].id);
      await page.keyboard.press('Alt+ArrowUp');
      await page.waitForFunction((id) => location.pathname === `/c/${id}`, chats[1].id);

      // Shift+Escape: back to the message box, which sends with Enter.
      await page.keyboard.press('Shift+Escape');
      assert.equal((await focused(page)).id, 'input');
      await assertFocusVisible(page);

      // Shift+F10 on a row opens its menu; arrows move in it; Escape closes it and gives
      // the focus back to its button.
      await page.keyboard.press('Control+k');
      await page.keyboard.press('ArrowDown');
      await page.keyboard.press('Shift+F10');
      await page.waitForSelector(`#chat-list li[data-id="${chats[2].id}"] .chat-menu:not([hidden])`);
      assert.equal((await focused(page)).className, 'menu-item');
      await assertFocusVisible(page);
      await page.keyboard.press('ArrowDown');
      assert.match(await page.evaluate(() => document.activeElement.dataset.action), /archive/);
      await shot(page, `keyboard-menu-${scheme}`);
      await page.keyboard.press('Escape');
      await page.waitForSelector(`#chat-list li[data-id="${chats[2].id}"] .chat-menu`, { state: 'hidden' });
      assert.match((await focused(page)).className, /chat-menu-button/);

      // The menu from its button: Enter opens it, Enter on Rename asks in the page's own
      // dialog, whose field has the focus; Enter saves.
      await page.keyboard.press('Enter');
      await page.waitForSelector(`#chat-list li[data-id="${chats[2].id}"] .chat-menu:not([hidden])`);
      await page.keyboard.press('Enter');
      await page.waitForSelector('#rename-dialog[open]');
      assert.equal((await focused(page)).id, 'rename-input');
      await page.keyboard.type(`Renamed ${scheme} ${stamp}`);
      await shot(page, `keyboard-rename-${scheme}`);
      await page.keyboard.press('Enter');
      await page.waitForFunction(async (id) => (await (await fetch(`/api/v1/chats/${id}`)).json()).title.startsWith('Renamed'), chats[2].id);
      // The focus went back to the row it came from.
      await page.waitForFunction((id) => document.activeElement.closest('#chat-list li')?.dataset.id === id, chats[2].id);

      // Ctrl+Shift+O: a new chat, the message box ready.
      await page.keyboard.press('Control+Shift+O');
      await page.waitForFunction(() => location.pathname === '/');
      assert.equal((await focused(page)).id, 'input');
      assert.ok(await page.isVisible('#welcome'));

      // Ctrl+/ lists the keys; Escape closes the list.
      await page.keyboard.press('Control+/');
      await page.waitForSelector('#shortcuts-dialog[open]');
      await shot(page, `keyboard-shortcuts-${scheme}`);
      await page.keyboard.press('Escape');
      await page.waitForSelector('#shortcuts-dialog[open]', { state: 'detached' });

      // Tab from the top reaches the list, each row's menu button and the message box,
      // with the focus visible at every stop.
      await page.goto(`${base}/c/${chats[1].id}`);
      await page.waitForSelector('.msg.assistant .regenerate');
      await page.waitForSelector(`#chat-list li[data-id="${chats[0].id}"]`);
      await page.evaluate(() => document.activeElement.blur());
      const stops = [];
      for (let i = 0; i < 400; i++) {
        await page.keyboard.press('Tab');
        const at = await focused(page);
        // Past the last control the focus leaves the page, and the next Tab starts at its top.
        if (at.tag === 'body') continue;
        stops.push(at);
        await assertFocusVisible(page);
        if (at.id === 'input' && stops.some((s) => s.className === 'skip-link')) break;
      }
      const reached = (test) => stops.some(test);
      assert.ok(reached((s) => s.className === 'skip-link'), 'no skip link');
      assert.ok(reached((s) => s.id === 'new-chat'));
      assert.ok(reached((s) => s.className === 'chat-link' && s.row === chats[0].id), 'a chat row cannot be reached with Tab');
      assert.ok(reached((s) => /chat-menu-button/.test(s.className)), 'a row menu cannot be reached with Tab');
      assert.ok(reached((s) => s.className === 'regenerate'), 'the reply\'s actions cannot be reached with Tab');
      assert.ok(reached((s) => s.id === 'input'), 'the message box cannot be reached with Tab');
      assert.equal((await getChat(chats[0].id)).archived, false);
    });
  });
}

test('on a phone Tab never lands in the closed chat drawer', async () => {
  await withPage({ size: 'phone' }, async (page) => {
    await page.goto(base);
    await page.waitForSelector('#chat-list li[data-id]', { state: 'attached' });
    await page.evaluate(() => document.activeElement.blur());
    for (let i = 0; i < 15; i++) {
      await page.keyboard.press('Tab');
      const inDrawer = await page.evaluate(() => !!document.activeElement.closest('#sidebar'));
      assert.equal(inDrawer, false, 'the focus went into the closed drawer');
    }
    // Opened, the drawer takes the focus; Escape closes it and gives it back.
    await page.focus('#toggle-sidebar');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.activeElement.id === 'search');
    await page.keyboard.press('Escape');
    await page.waitForFunction(() => document.activeElement.id === 'toggle-sidebar');
  });
});
