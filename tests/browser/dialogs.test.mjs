// The page's own dialogs and the list's order, at desktop size and 390 px, light and dark:
// Rename and Delete ask in dialogs of the page (never `prompt()` or `confirm()`, which the
// test refuses), Cancel and Escape change nothing; an archived open chat stays open and says
// it is archived, with Unarchive; the list puts the chat with the latest activity first.
// Screenshots in SCREENSHOT_DIR.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { base, createChat, getChat, rowAction, sendMessage, settled, shot, showList, withPage } from './helpers.mjs';

const order = (page) => page.$$eval('#chat-list li[data-id]', (rows) => rows.map((r) => r.dataset.id));

for (const [size, scheme] of [['desktop', 'dark'], ['phone', 'light']]) {
  test(`rename and delete ask in the page's own dialogs (${size}, ${scheme})`, async () => {
    const chat = await createChat({ text: 'name me', title: `Old name ${size}` });
    await settled(chat.id);
    await withPage({ size, scheme }, async (page) => {
      await page.goto(base);
      const row = `#chat-list li[data-id="${chat.id}"]`;
      await page.waitForSelector(row, { state: 'attached' });

      // Rename: the dialog holds the name, selected; Escape leaves it as it was.
      await rowAction(page, chat.id, 'rename');
      await page.waitForSelector('#rename-dialog[open]');
      assert.equal(await page.inputValue('#rename-input'), `Old name ${size}`);
      await shot(page, `rename-dialog-${size}-${scheme}`);
      await page.keyboard.press('Escape');
      await page.waitForSelector('#rename-dialog[open]', { state: 'detached' });
      assert.equal((await getChat(chat.id)).title, `Old name ${size}`);

      // Cancel leaves it too; Save renames.
      await rowAction(page, chat.id, 'rename');
      await page.fill('#rename-input', `New name ${size}`);
      await page.click('#rename-dialog .dialog-cancel');
      await page.waitForSelector('#rename-dialog[open]', { state: 'detached' });
      assert.equal((await getChat(chat.id)).title, `Old name ${size}`);
      await rowAction(page, chat.id, 'rename');
      await page.fill('#rename-input', `New name ${size}`);
      await page.click('#rename-dialog button.primary');
      await page.waitForFunction(({ selector, want }) => document.querySelector(`${selector} .chat-name`)?.textContent === want,
        { selector: row, want: `New name ${size}` });
      assert.equal((await getChat(chat.id)).title, `New name ${size}`);

      // Delete: the dialog names the chat; Cancel keeps it.
      await rowAction(page, chat.id, 'delete');
      await page.waitForSelector('#delete-dialog[open]');
      assert.match(await page.textContent('#delete-text'), new RegExp(`New name ${size}`));
      await page.click('#delete-dialog .dialog-cancel');
      await page.waitForSelector('#delete-dialog[open]', { state: 'detached' });
      assert.ok(await page.$(row));
      assert.ok(await getChat(chat.id));
    });
  });

  test(`an archived open chat stays open and says so (${size}, ${scheme})`, async () => {
    const chat = await createChat({ text: 'archive me while open', title: `Open and archived ${size}` });
    await settled(chat.id);
    await withPage({ size, scheme }, async (page) => {
      await page.goto(`${base}/c/${chat.id}`);
      await page.waitForSelector('.msg.assistant[data-id]');
      assert.ok(await page.isHidden('#archived-note'));
      await rowAction(page, chat.id, 'archive');
      await page.waitForSelector('#archived-note:not([hidden])');
      assert.match(await page.textContent('#archived-note'), /archived/);
      assert.equal(new URL(page.url()).pathname, `/c/${chat.id}`, 'the chat stays open');
      assert.ok(await page.isVisible('.msg.assistant[data-id]'));
      if (size === 'phone') await page.click('#close-sidebar');
      await shot(page, `archived-open-${size}-${scheme}`);
      // A reload still says so, and Unarchive brings it back to the list.
      await page.reload();
      await page.waitForSelector('#archived-note:not([hidden])');
      await page.click('#unarchive-open');
      await page.waitForSelector('#archived-note', { state: 'hidden' });
      assert.equal((await getChat(chat.id)).archived, false);
      await showList(page);
      await page.waitForSelector(`#chat-list li[data-id="${chat.id}"]`);
    });
  });
}

test('the chat list puts the chat with the latest activity first', async () => {
  const older = await createChat({ text: 'older chat', title: 'Older chat' });
  await settled(older.id);
  const newer = await createChat({ text: 'newer chat', title: 'Newer chat' });
  await settled(newer.id);
  await withPage({ size: 'desktop' }, async (page) => {
    await page.goto(base);
    await page.waitForSelector(`#chat-list li[data-id="${older.id}"]`);
    let ids = await order(page);
    assert.ok(ids.indexOf(newer.id) < ids.indexOf(older.id), 'the newer chat is not above the older');
    // A new message in the older chat: it moves to the top, while the page is open.
    await sendMessage(older.id, 'back to the older chat');
    await page.waitForFunction((id) => document.querySelector('#chat-list li[data-id]')?.dataset.id === id, older.id);
    ids = await order(page);
    assert.ok(ids.indexOf(older.id) < ids.indexOf(newer.id));
    // And after a reload, from the API's `updated_at`.
    await page.reload();
    await page.waitForSelector(`#chat-list li[data-id="${older.id}"]`);
    ids = await order(page);
    assert.equal(ids[0], older.id);
  });
});
