// Editing a message and failed turns, at desktop size and 390 px, light and dark: Edit turns
// the message into an editor as wide as the conversation, where Enter saves, Shift+Enter
// starts a new line and Escape cancels; the "‹ 2/2 ›" switcher is large and labelled. A
// failed turn keeps its error and Retry after the next message is sent and after a reload,
// until Retry answers it; a reply with tool calls has one Regenerate, not one per step.
// Screenshots in SCREENSHOT_DIR.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { base, chatIdOf, script, shot, waitIdle, withPage } from './helpers.mjs';

const replies = (page) => page.$$eval('#messages .msg.assistant[data-id] .text', (n) => n.map((x) => x.textContent.trim()));

async function messagesOf(id) {
  return (await (await fetch(`${base}/api/v1/chats/${id}/messages`)).json()).messages;
}

for (const [size, scheme] of [['desktop', 'dark'], ['phone', 'light']]) {
  test(`a message is edited in place: Enter saves, Shift+Enter breaks the line, Escape cancels (${size}, ${scheme})`, async () => {
    await withPage({ size, scheme }, async (page) => {
      await page.goto(base);
      await page.fill('#input', script('first answer'));
      await page.keyboard.press('Enter');
      await page.waitForFunction(() => document.querySelector('.msg.assistant[data-id] .text')?.textContent === 'first answer');
      await waitIdle(page);
      const id = chatIdOf(page);
      const bubble = await page.$eval('.msg.user', (n) => n.getBoundingClientRect().toJSON());

      await page.click('.msg.user .edit-link');
      const box = '.msg.user.editing textarea.edit-box';
      await page.waitForSelector(box);
      assert.equal(await page.evaluate(() => document.activeElement.className), 'edit-box');
      const sizes = await page.evaluate(() => ({
        editor: document.querySelector('.msg.user.editing').getBoundingClientRect().toJSON(),
        column: (() => {
          const m = document.querySelector('#messages');
          const style = getComputedStyle(m);
          return m.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
        })(),
      }));
      assert.ok(sizes.editor.width >= bubble.width, 'the editor is narrower than the message');
      assert.ok(sizes.editor.width >= sizes.column * 0.85, `the editor is narrow: ${sizes.editor.width} of ${sizes.column}`);
      assert.ok(Math.abs(sizes.editor.top - bubble.top) < 4, 'the editor is not where the message was');
      await page.keyboard.press('End');
      await page.keyboard.press('Shift+Enter');
      await page.keyboard.type('a second line');
      assert.match(await page.inputValue(box), /\na second line$/);
      await shot(page, `editing-${size}-${scheme}`);
      await page.keyboard.press('Escape');
      await page.waitForSelector(box, { state: 'detached' });
      assert.equal(await page.textContent('.msg.user .text'), script('first answer'));
      assert.equal((await messagesOf(id))[0].siblings.length, 1, 'Escape saved a version');

      // Enter saves: a second version, answered anew.
      await page.click('.msg.user .edit-link');
      await page.fill(box, script('second answer'));
      await page.keyboard.press('Enter');
      await page.waitForFunction(() => document.querySelector('.msg.user .branch-count')?.textContent === '2/2'
        && document.querySelector('.msg.assistant[data-id] .text')?.textContent === 'second answer');
      await waitIdle(page);

      // The switcher: large arrows with names, a count that reads.
      const least = size === 'phone' ? 44 : 32;
      for (const arrow of ['.branch-prev', '.branch-next']) {
        const rect = await page.$eval(`.msg.user ${arrow}`, (n) => n.getBoundingClientRect().toJSON());
        assert.ok(rect.width >= least && rect.height >= least, `${arrow} is ${rect.width}×${rect.height}`);
        assert.ok(await page.getAttribute(`.msg.user ${arrow}`, 'aria-label'));
      }
      assert.ok(parseFloat(await page.$eval('.msg.user .branch-count', (n) => getComputedStyle(n).fontSize)) >= 14);
      await shot(page, `branch-switcher-${size}-${scheme}`);
      await page.click('.msg.user .branch-prev');
      await page.waitForFunction(() => document.querySelector('.msg.user .branch-count')?.textContent === '1/2');
      assert.deepEqual(await replies(page), ['first answer']);
    });
  });

  test(`a failed turn keeps its error and Retry until it is answered (${size}, ${scheme})`, async () => {
    await withPage({ size, scheme }, async (page) => {
      const failing = script('Second time lucky.', 0, {
        id: `kept-failure-${size}-${Date.now()}`, error: { status: 400, message: 'not this time', times: 1 },
      });
      await page.goto(base);
      await page.fill('#input', failing);
      await page.keyboard.press('Enter');
      await page.waitForSelector('#run-error .retry-run');
      assert.match(await page.textContent('#run-error'), /not this time/);

      // The next message is answered; the failure stays where it happened, with Retry.
      await page.fill('#input', script('the later answer'));
      await page.keyboard.press('Enter');
      await page.waitForFunction(() => [...document.querySelectorAll('.msg.assistant[data-id] .text')]
        .some((n) => n.textContent === 'the later answer'));
      await waitIdle(page);
      const kept = async () => page.evaluate(() => {
        const box = document.querySelector('.run-error');
        return box && {
          text: box.textContent,
          after: box.previousElementSibling.querySelector('.text')?.textContent,
          retry: !!box.querySelector('.retry-run:not([disabled])'),
        };
      });
      let box = await kept();
      assert.ok(box, 'the failure went away when the next message was sent');
      assert.match(box.text, /not this time/);
      assert.equal(box.after, failing, 'the failure is not at the message it failed to answer');
      assert.ok(box.retry);
      await shot(page, `failure-kept-${size}-${scheme}`);

      // A reload keeps it too.
      await page.reload();
      await page.waitForSelector('.run-error .retry-run');
      box = await kept();
      assert.match(box.text, /not this time/);
      assert.equal(box.after, failing);

      // Retry answers it (a new version beside the later messages): the failure is over.
      await page.click('.run-error .retry-run');
      await page.waitForFunction(() => [...document.querySelectorAll('.msg.assistant[data-id] .text')]
        .some((n) => n.textContent === 'Second time lucky.'));
      await waitIdle(page);
      assert.equal(await page.$('.run-error'), null);
      assert.equal(await page.textContent('.msg.assistant[data-id] .branch-count'), '2/2');
    });
  });
}

test('a reply with tool calls has one Regenerate', async () => {
  await withPage({ size: 'desktop' }, async (page) => {
    await page.goto(base);
    await page.fill('#input', '/list_dir {"path":"."}');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => [...document.querySelectorAll('.msg.assistant[data-id] .text')]
      .some((n) => n.textContent.includes('Tool list_dir returned')));
    await waitIdle(page);
    assert.ok(await page.$$eval('.msg.assistant[data-id]', (n) => n.length) >= 2, 'a reply of one step');
    assert.equal(await page.$$eval('.regenerate', (n) => n.length), 1);
    // On the reply's last step, and another turn gets its own.
    const last = await page.$$eval('#messages > .msg[data-id]', (nodes) => nodes[nodes.length - 1].querySelector('.regenerate') !== null);
    assert.ok(last);
    await page.fill('#input', script('plain words'));
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.querySelectorAll('.regenerate').length === 2);
    await waitIdle(page);
    assert.equal(await page.$$eval('.regenerate', (n) => n.length), 2);
    await shot(page, 'tool-turn-one-regenerate');
  });
});
