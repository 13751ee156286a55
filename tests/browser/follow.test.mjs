// The view follows the conversation: a long reply streamed after a tall message stays in
// view to its last word; a reader who scrolls up stays where they are while it goes on,
// with "Jump to latest" to come back; an old chat opens at its end. And what the page says
// of a daemon it cannot reach goes once the daemon is back: it is killed (kill -9) mid-reply
// and restarted on the same address, the reply finishes with every word once, and no stale
// "Cannot reach Keel" is left under the message box. At desktop size and 390 px, light and
// dark; screenshots in SCREENSHOT_DIR.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  base, createChat, kill9, script, sendMessage, serve, settled, shot, waitIdle, withPage, words,
} from './helpers.mjs';

// A reply long enough to fill several screens: paragraphs of ten words.
function longReply(n) {
  const all = words(n).split(' ');
  const paragraphs = [];
  for (let i = 0; i < all.length; i += 10) paragraphs.push(all.slice(i, i + 10).join(' '));
  return paragraphs.join('\n\n');
}

const distance = (page) => page.evaluate(() => {
  const m = document.querySelector('#messages');
  return m.scrollHeight - m.scrollTop - m.clientHeight;
});

const streamed = (page) => page.evaluate(() => (document.querySelector('#live .text')?.textContent.match(/word\d+/g) || []).length);

async function waitStreamed(page, n) {
  await page.waitForFunction((want) => (document.querySelector('#live .text')?.textContent.match(/word\d+/g) || []).length >= want, n);
}

for (const [size, scheme] of [['desktop', 'light'], ['phone', 'dark']]) {
  test(`a long reply after a tall message is followed to its end; scrolling up stays put (${size}, ${scheme})`, async () => {
    await withPage({ size, scheme }, async (page) => {
      await page.goto(base);
      const tall = Array.from({ length: 40 }, (_, i) => `line ${i + 1} of a tall message`).join('\n');
      await page.fill('#input', tall + '\n' + script(longReply(240), 25));
      await page.keyboard.press('Enter');
      // While it streams, the newest words are in view, after the tall message too.
      for (const n of [20, 50, 80]) {
        await waitStreamed(page, n);
        assert.ok(await distance(page) <= 2, `the view fell behind the reply at ${n} words: ${await distance(page)} px`);
        assert.ok(await page.isHidden('#jump-latest'));
      }
      await shot(page, `follow-streaming-${size}-${scheme}`);

      // The reader scrolls up: the view stays there while the reply goes on below.
      const box = await page.$eval('#messages', (m) => { const r = m.getBoundingClientRect(); return { x: r.x + r.width / 2, y: r.y + r.height / 2 }; });
      await page.mouse.move(box.x, box.y);
      await page.mouse.wheel(0, -600);
      await page.waitForFunction(() => document.querySelector('#messages').scrollHeight
        - document.querySelector('#messages').scrollTop - document.querySelector('#messages').clientHeight > 300);
      const top = await page.$eval('#messages', (m) => m.scrollTop);
      const before = await streamed(page);
      await waitStreamed(page, before + 20);
      assert.equal(await page.$eval('#messages', (m) => m.scrollTop), top, 'the view moved while the reader was reading');
      assert.ok(await page.isVisible('#jump-latest'), 'no way back to the end');
      await shot(page, `follow-scrolled-up-${size}-${scheme}`);

      // "Jump to latest" goes back to the end and follows again.
      await page.click('#jump-latest');
      assert.ok(await distance(page) <= 2);
      await waitStreamed(page, (await streamed(page)) + 15);
      assert.ok(await distance(page) <= 2, 'not following after Jump to latest');
      assert.ok(await page.isHidden('#jump-latest'));
      await waitIdle(page);
      assert.ok(await distance(page) <= 2, 'the end of the finished reply is out of view');
      const last = await page.$$eval('.msg.assistant[data-id]', (n) => n[n.length - 1].getBoundingClientRect().bottom);
      const bottom = await page.$eval('#messages', (m) => m.getBoundingClientRect().bottom);
      assert.ok(last <= bottom + 1, 'the last line of the reply is below the fold');
    });
  });

  test(`an old chat opens at its end (${size}, ${scheme})`, async () => {
    const chat = await createChat(script(longReply(150)));
    await settled(chat.id);
    await sendMessage(chat.id, script('the newest reply, at the very end'));
    await withPage({ size, scheme }, async (page) => {
      await page.goto(`${base}/c/${chat.id}`);
      await page.waitForFunction(() => [...document.querySelectorAll('.msg.assistant .text')]
        .some((n) => n.textContent.includes('the newest reply, at the very end')));
      await waitIdle(page);
      assert.ok(await distance(page) <= 2, `opened ${await distance(page)} px above the end`);
      const visible = await page.evaluate(() => {
        const texts = [...document.querySelectorAll('.msg.assistant .text')];
        const last = texts[texts.length - 1].getBoundingClientRect();
        const view = document.querySelector('#messages').getBoundingClientRect();
        return last.top >= view.top && last.bottom <= view.bottom;
      });
      assert.ok(visible, 'the newest reply is not in view');
      assert.ok(await page.isHidden('#jump-latest'));
      await shot(page, `old-chat-at-end-${size}-${scheme}`);
      // Scrolled to the top, the way back to the end shows.
      await page.$eval('#messages', (m) => { m.scrollTop = 0; });
      await page.waitForSelector('#jump-latest:not([hidden])');
      await shot(page, `jump-to-latest-${size}-${scheme}`);
    });
  });
}

test('a daemon killed mid-reply and restarted: the reply ends whole and no stale error is left', async () => {
  assert.ok(process.env.KEEL_BIN, 'KEEL_BIN must name the keel binary');
  const dir = mkdtempSync(join(tmpdir(), 'keel-follow-'));
  let daemon = await serve(dir);
  const address = daemon.url.replace('http://', '');
  try {
    await withPage({ size: 'desktop', scheme: 'light', origin: daemon.url }, async (page) => {
      await page.goto(daemon.url);
      const reply = words(40);
      await page.fill('#input', script(reply, 5));
      await page.keyboard.press('Enter');
      await page.waitForFunction(() => document.querySelector('#live .text')?.textContent.includes('word3'));

      await kill9(daemon);
      await page.fill('#input', 'are you there?');
      await page.keyboard.press('Enter');
      await page.waitForSelector('#composer-error:not([hidden])');
      assert.match(await page.textContent('#composer-error'), /^Cannot reach Keel at /);
      await shot(page, 'daemon-down');

      daemon = await serve(dir, address);
      await page.waitForFunction(() => document.querySelector('.msg.assistant[data-id] .text')?.textContent.includes('word40'));
      await waitIdle(page);
      // Back, and finished: nothing says the daemon cannot be reached any more.
      await page.waitForSelector('#composer-error', { state: 'hidden' });
      assert.ok(await page.isHidden('#connection'));
      assert.equal(await page.inputValue('#input'), 'are you there?', 'the unsent text is kept');
      const shown = await page.$$eval('.msg.assistant[data-id] .text', (nodes) => nodes.map((n) => n.textContent).join(' '));
      assert.deepEqual(shown.match(/word\d+/g), reply.split(' '), 'every word once, in order');
      await page.reload();
      await page.waitForSelector('.msg.assistant[data-id] .text');
      const reloaded = await page.$$eval('.msg.assistant[data-id] .text', (nodes) => nodes.map((n) => n.textContent).join(' '));
      assert.equal(reloaded, shown, 'the stored reply is the one shown');
      await shot(page, 'daemon-back');
    });
  } finally {
    await kill9(daemon);
    rmSync(dir, { recursive: true, force: true });
  }
});
