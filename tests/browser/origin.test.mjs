// A page on another site, in headless Chromium, tries to read and create chats on a running
// `keel serve` (KEEL_URL): cross-origin requests, a script tag, live events, and DNS
// rebinding (a foreign name resolved to 127.0.0.1, simulated with Chromium's resolver
// rules). None of it may read or change anything; the daemon's own page still works.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { chromium } from 'playwright-core';

const base = process.env.KEEL_URL;
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
const TIMEOUT = 30_000;
const keelPort = base && new URL(base).port;

// The other site: one empty page, on its own port, reached as http://evil.test:PORT.
let evil;
let evilOrigin;
let browser;

before(async () => {
  assert.ok(base, 'KEEL_URL must name the daemon');
  evil = createServer((_, response) => {
    response.writeHead(200, { 'Content-Type': 'text/html' });
    response.end('<!doctype html><title>another site</title><p>nothing to see</p>');
  });
  await new Promise((resolve) => evil.listen(0, '127.0.0.1', resolve));
  evilOrigin = `http://evil.test:${evil.address().port}`;
  browser = await chromium.launch({
    executablePath,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--disable-quic', '--host-resolver-rules=MAP evil.test 127.0.0.1, MAP rebound.test 127.0.0.1'],
  });
});

after(async () => {
  await browser?.close();
  evil?.close();
});

// What the daemon holds, asked directly (no Origin): the chat ids and the messages of each.
async function snapshot() {
  const listed = await (await fetch(`${base}/api/v1/chats`)).json();
  const chats = {};
  for (const chat of listed.chats) {
    const messages = await (await fetch(`${base}/api/v1/chats/${chat.id}/messages`)).json();
    chats[chat.id] = messages.messages.length;
  }
  return chats;
}

// How many requests the daemon refused for `reason`, from its metrics.
async function refused(reason) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`keel_http_refused_total{reason="${reason}"}`));
  return line ? Number(line.split(' ').pop()) : 0;
}

async function createChat(text) {
  const created = await fetch(`${base}/api/v1/chats`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ text }),
  });
  assert.equal(created.status, 201);
  return (await created.json()).id;
}

async function waitIdle(id) {
  const deadline = Date.now() + TIMEOUT;
  for (;;) {
    const chat = await (await fetch(`${base}/api/v1/chats/${id}`)).json();
    if (chat.status === 'waiting') return;
    assert.ok(Date.now() < deadline, `chat ${id} never became idle`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

test('a page on another site can neither read nor create a chat', async () => {
  const id = await createChat('a private chat');
  await waitIdle(id);
  const before = await snapshot();
  const [origins, sites] = [await refused('foreign_origin'), await refused('cross_site')];

  const page = await browser.newPage();
  page.setDefaultTimeout(TIMEOUT);
  await page.goto(`${evilOrigin}/`);
  const tried = await page.evaluate(async ({ keel, id }) => {
    const outcome = async (attempt) => {
      try {
        const response = await attempt();
        // An opaque answer (no-cors) has status 0 and no body the page can read.
        return { status: response.status, body: response.type === 'opaque' ? '' : await response.text() };
      } catch (error) {
        return { error: String(error) };
      }
    };
    const json = { 'Content-Type': 'application/json' };
    const body = JSON.stringify({ text: 'planted by another site' });
    const events = await new Promise((resolve) => {
      const source = new EventSource(`${keel}/api/v1/chats/${id}/events`);
      const received = [];
      source.onmessage = (event) => received.push(event.data);
      source.addEventListener('message', (event) => received.push(event.data));
      source.onerror = () => { source.close(); resolve({ errored: true, received }); };
      setTimeout(() => { source.close(); resolve({ errored: false, received }); }, 10_000);
    });
    const image = await new Promise((resolve) => {
      const img = new Image();
      img.onload = () => resolve('loaded');
      img.onerror = () => resolve('failed');
      img.src = `${keel}/api/v1/chats`;
    });
    return {
      list: await outcome(() => fetch(`${keel}/api/v1/chats`)),
      read: await outcome(() => fetch(`${keel}/api/v1/chats/${id}/messages`)),
      create: await outcome(() => fetch(`${keel}/api/v1/chats`, { method: 'POST', headers: json, body })),
      simple: await outcome(() => fetch(`${keel}/api/v1/chats`, {
        method: 'POST', mode: 'no-cors', headers: { 'Content-Type': 'text/plain' }, body,
      })),
      send: await outcome(() => fetch(`${keel}/api/v1/chats/${id}/messages`, {
        method: 'POST', mode: 'no-cors', headers: { 'Content-Type': 'text/plain' }, body,
      })),
      events,
      image,
    };
  }, { keel: base, id });

  // Reads fail outright: the browser gets no CORS permission.
  assert.ok(tried.list.error, `the chat list was readable: ${JSON.stringify(tried.list)}`);
  assert.ok(tried.read.error, `the messages were readable: ${JSON.stringify(tried.read)}`);
  assert.ok(tried.create.error, `the JSON POST went through: ${JSON.stringify(tried.create)}`);
  assert.deepEqual(tried.events, { errored: true, received: [] });
  assert.equal(tried.image, 'failed');
  // Requests a browser sends without asking (no-cors) reach the daemon and are refused.
  for (const attempt of [tried.simple, tried.send]) {
    assert.equal(attempt.status, 0, JSON.stringify(attempt));
    assert.equal(attempt.body, '');
  }
  assert.deepEqual(await snapshot(), before, 'the other site changed what the daemon holds');
  // The daemon itself refused them (not only the browser's same-origin rules): the two
  // reads, the preflight, the two no-cors posts and the event stream named their origin;
  // the image tag did not, and its fetch metadata said cross-site.
  assert.ok(await refused('foreign_origin') >= origins + 6, 'the daemon served a foreign origin');
  assert.ok(await refused('cross_site') >= sites + 1, 'the daemon served a cross-site image tag');
  await page.close();
});

test('a rebound name reaching the daemon is refused, page and API alike', async () => {
  const before = await snapshot();
  const page = await browser.newPage();
  page.setDefaultTimeout(TIMEOUT);
  // The attacker's name now resolves to the daemon: the browser treats this as the
  // attacker's own origin, so only the Host check stands between it and the API.
  const response = await page.goto(`http://rebound.test:${keelPort}/`);
  assert.equal(response.status(), 403);
  assert.equal((await response.json()).error.reason, 'foreign_host');
  const tried = await page.evaluate(async () => {
    const list = await fetch('/api/v1/chats');
    const create = await fetch('/api/v1/chats', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ text: 'planted through a rebound name' }),
    });
    return {
      list: { status: list.status, body: await list.json() },
      create: { status: create.status, body: await create.json() },
    };
  });
  assert.equal(tried.list.status, 403);
  assert.equal(tried.list.body.error.reason, 'foreign_host');
  assert.equal(tried.list.body.chats, undefined);
  assert.equal(tried.create.status, 403);
  assert.deepEqual(await snapshot(), before, 'the rebound page changed what the daemon holds');
  await page.close();
});

test("the daemon's own page may read and create chats from either loopback name", async () => {
  for (const origin of [base, `http://localhost:${keelPort}`]) {
    const page = await browser.newPage();
    page.setDefaultTimeout(TIMEOUT);
    const response = await page.goto(`${origin}/`);
    assert.equal(response.status(), 200);
    const created = await page.evaluate(async () => {
      const answer = await fetch('/api/v1/chats', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ text: 'from the page itself' }),
      });
      const listed = await fetch('/api/v1/chats');
      return { status: answer.status, listed: (await listed.json()).chats.length };
    });
    assert.equal(created.status, 201);
    assert.ok(created.listed >= 1);
    await page.close();
  }
});
