// Branches on the web page, against a `keel serve` with the demo model that this test starts
// itself (KEEL_BIN names the binary) so that it can kill and restart it: an edit keeps the
// old version, the "‹ n/m ›" arrows switch between both versions, the switch survives a
// reload and a kill -9 and restart of the daemon, and a reply can be regenerated.
// CHROMIUM and SCREENSHOT_DIR may override the defaults.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { launch } from './launch.mjs';

const keel = process.env.KEEL_BIN;
const screenshots = process.env.SCREENSHOT_DIR || 'target/browser';
const TIMEOUT = 30_000;

// Starts `keel serve` in `dir` (its database lives there) and resolves with the daemon's
// process and URL once it listens.
function serve(dir) {
  const env = { ...process.env };
  for (const name of ['KEEL_CONFIG', 'KEEL_LISTEN', 'KEEL_DATABASE_URL', 'OPENAI_API_KEY', 'ANTHROPIC_API_KEY']) {
    delete env[name];
  }
  const child = spawn(keel, ['serve', '--listen', '127.0.0.1:0'], { cwd: dir, env });
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

function kill9(daemon) {
  if (daemon.child.exitCode !== null || daemon.child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    daemon.child.removeAllListeners('exit');
    daemon.child.on('exit', resolve);
    daemon.child.kill('SIGKILL');
  });
}

const script = (text) => `#mock {"text": "${text}"}`;

// Waits until the chat shows exactly these assistant texts and the user message's arrows
// say `count` (or none, when null).
async function shows(page, replies, count) {
  await page.waitForFunction(([want, label]) => {
    const texts = [...document.querySelectorAll('#messages .msg.assistant:not(.live) .text')]
      .map((n) => n.textContent.trim());
    const arrows = document.querySelector('.msg.user .branch-count');
    const idle = document.querySelector('#chat-status').dataset.status === 'waiting';
    return idle && JSON.stringify(texts) === JSON.stringify(want)
      && (label === null ? !arrows : arrows && arrows.textContent === label);
  }, [replies, count]);
}

test('an edit makes a branch; the arrows switch between both, across a reload and a restart', async () => {
  assert.ok(keel, 'KEEL_BIN must name the keel binary');
  mkdirSync(screenshots, { recursive: true });
  const dir = mkdtempSync(join(tmpdir(), 'keel-branches-'));
  let daemon = await serve(dir);
  const bases = [daemon.url];
  const browser = await launch();
  try {
    const page = await browser.newPage({ viewport: { width: 1100, height: 760 } });
    page.setDefaultTimeout(TIMEOUT);
    const foreign = [];
    page.on('request', (request) => {
      if (!bases.some((base) => request.url().startsWith(base))) foreign.push(request.url());
    });
    const errors = [];
    page.on('pageerror', (error) => errors.push(String(error)));

    await page.goto(daemon.url);
    await page.fill('#input', script('first answer'));
    await page.click('#send');
    await shows(page, ['first answer'], null);

    // The edit says it keeps the old version, and does.
    await page.click('.msg.user .edit-link');
    assert.match(await page.textContent('.msg.user'), /current version is kept/);
    await page.fill('.msg.user textarea', script('second answer'));
    await page.click('.msg.user .save-edit');
    await shows(page, ['second answer'], '2/2');
    const chatId = new URL(page.url()).pathname.replace('/c/', '');
    assert.ok(chatId, page.url());

    await page.click('.msg.user .branch-prev');
    await shows(page, ['first answer'], '1/2');
    assert.equal(await page.textContent('.msg.user .text'), script('first answer'));
    await page.screenshot({ path: `${screenshots}/branches.png`, fullPage: true });

    await page.reload();
    await shows(page, ['first answer'], '1/2');

    // kill -9 and a restart on the same database: the switch was stored.
    await kill9(daemon);
    daemon = await serve(dir);
    bases.push(daemon.url);
    await page.goto(`${daemon.url}/c/${chatId}`);
    await shows(page, ['first answer'], '1/2');
    await page.click('.msg.user .branch-next');
    await shows(page, ['second answer'], '2/2');

    // A reply regenerated: its own arrows, the user message's stay.
    await page.click('.msg.assistant .regenerate');
    await page.waitForFunction(() => {
      const arrows = document.querySelector('.msg.assistant .branch-count');
      return arrows && arrows.textContent === '2/2'
        && document.querySelector('#chat-status').dataset.status === 'waiting';
    });
    await shows(page, ['second answer'], '2/2');

    await page.setViewportSize({ width: 390, height: 844 });
    await page.waitForFunction(() => document.querySelector('#sidebar').getBoundingClientRect().right <= 0);
    await page.click('.msg.user .branch-prev');
    await shows(page, ['first answer'], '1/2');
    const nav = await page.$('.msg.user .branch-nav');
    const box = await nav.boundingBox();
    assert.ok(box.x >= 0 && box.x + box.width <= 390, `the arrows leave the screen: ${JSON.stringify(box)}`);
    await page.screenshot({ path: `${screenshots}/branches-phone.png` });

    assert.deepEqual(foreign, [], 'the page made requests to other origins');
    assert.deepEqual(errors, [], 'the page raised errors');
  } finally {
    await browser.close();
    await kill9(daemon);
    rmSync(dir, { recursive: true, force: true });
  }
});
