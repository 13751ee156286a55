// Keel's web client: the chat list (titles, rename, archive, delete, search, kept current by
// the list feed), a conversation with live streaming rendered as Markdown, interrupt, edit,
// queue, client-side tool results, a per-chat model picker, reconnection, Continue on a
// stopped reply and Retry on a failed one, with errors shown where they happened, and
// versions of a message (branches: edits and regenerated replies) switched with arrows. It
// uses only the public API under /api/v1; live events are read with fetch (not EventSource) so the
// bearer token can be sent. Markdown goes through marked, then DOMPurify, then highlight.js
// (vendored, loaded before this file); without them text is shown as it is.
'use strict';

const API = '/api/v1';
const TOKEN_KEY = 'keel-token';
// Events that take a place in the chat's order and are never to be applied twice.
const DURABLE = new Set(['part', 'message', 'stream_reset', 'tool_call_cancel', 'branch']);
const IDLE = new Set(['waiting', 'error', 'requires_action']);
// What each status is called on the page.
const STATUS_WORDS = {
  waiting: 'Ready',
  running: 'Replying…',
  interrupting: 'Stopping…',
  requires_action: 'Waiting for tool results',
  error: 'Failed',
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === 'class') node.className = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null) node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === 'string' ? document.createTextNode(child) : child);
  }
  return node;
}

// ---------------------------------------------------------------- API access

let tokenPrompt = null;

// Asks for a token after a 401. `rejected` is the token that was refused, if one was sent:
// the dialog then says so, instead of coming back without a word.
function askToken(rejected) {
  if (!tokenPrompt) {
    tokenPrompt = new Promise((resolve) => {
      const dialog = $('token-dialog');
      $('token-error').hidden = !rejected;
      $('token-input').value = '';
      $('token-form').onsubmit = () => {
        localStorage.setItem(TOKEN_KEY, $('token-input').value.trim());
        tokenPrompt = null;
        showLogOut();
        resolve();
      };
      dialog.showModal();
    });
  }
  return tokenPrompt;
}

function showLogOut() {
  $('log-out').hidden = !localStorage.getItem(TOKEN_KEY);
}

function logOut() {
  localStorage.removeItem(TOKEN_KEY);
  location.hash = '';
  location.reload();
}

function authHeaders(extra) {
  const headers = Object.assign({}, extra);
  const token = localStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = 'Bearer ' + token;
  return headers;
}

async function api(method, path, body) {
  for (;;) {
    const init = { method, headers: authHeaders(body === undefined ? {} : { 'Content-Type': 'application/json' }) };
    if (body !== undefined) init.body = JSON.stringify(body);
    let response;
    try {
      response = await fetch(API + path, init);
    } catch (_) {
      throw new Error(unreachableSentence());
    }
    if (response.status === 401) {
      await askToken(init.headers.Authorization);
      continue;
    }
    const text = await response.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (_) { data = null; }
    if (!response.ok) {
      const message = data && data.error ? data.error.message : response.status + ' ' + response.statusText;
      throw new Error(message);
    }
    return data;
  }
}

// ---------------------------------------------------------------- state

const view = {
  chats: new Map(), // id -> Chat, as the list shows them
  models: [], // from GET /models
  chatId: null,
  chatModel: null, // the open chat's model
  status: null,
  lastEventId: null, // resume position for Last-Event-ID
  position: 0, // last durable event applied
  live: [], // parts of the step in progress
  stream: null, // AbortController of the event stream
  renderQueued: false,
  retry: null, // what the step in progress says of a failed attempt being retried
  listErrors: new Map(), // chat id -> what a Rename, Archive or Delete of it ran into
  listError: null, // what loading the chat list ran into
};

function isBusy() {
  return view.status !== null && !IDLE.has(view.status);
}

function showBanner(text, kind) {
  const banner = $('banner');
  banner.textContent = text || '';
  banner.className = 'banner' + (kind ? ' ' + kind : '');
  banner.hidden = !text;
}

function showError(error) {
  showBanner(String(error && error.message ? error.message : error), 'error');
}

// ---------------------------------------------------------------- chat list

function chatLabel(chat) {
  return chat.title || 'New chat';
}

const relative = new Intl.RelativeTimeFormat(undefined, { numeric: 'auto' });

// "5 minutes ago", "yesterday", or a local date for anything older than a week.
function relativeTime(iso) {
  const seconds = (Date.parse(iso) - Date.now()) / 1000;
  const abs = Math.abs(seconds);
  if (abs < 45) return relative.format(0, 'second');
  if (abs < 3600) return relative.format(Math.round(seconds / 60), 'minute');
  if (abs < 86400) return relative.format(Math.round(seconds / 3600), 'hour');
  if (abs < 7 * 86400) return relative.format(Math.round(seconds / 86400), 'day');
  return new Date(iso).toLocaleDateString();
}

// The chat list's own failures are said in the list, never in the banner above the open
// chat: that banner belongs to the chat, and a failed Rename of another chat is not its news.
async function loadChats() {
  try {
    const { chats } = await api('GET', '/chats?limit=200');
    view.chats = new Map(chats.map((chat) => [chat.id, chat]));
    view.listError = null;
  } catch (error) {
    view.listError = 'The chat list could not be loaded: ' + errorText(error);
  }
  renderChatList();
}

// A Rename, Archive or Delete that failed is said at its chat's entry, and stays there
// (through the list redrawing) until the next action on that chat.
function chatActions(chat) {
  const action = (label, handler) => el('button', {
    type: 'button', class: 'chat-action', 'data-action': label.toLowerCase(),
    onclick: (event) => {
      event.stopPropagation();
      view.listErrors.delete(chat.id);
      handler().catch((error) => {
        view.listErrors.set(chat.id, label + ' failed: ' + errorText(error));
        renderChatList();
      }).then(() => renderChatList());
    },
  }, label);
  return el('span', { class: 'chat-actions' },
    action('Rename', async () => {
      const title = window.prompt('New name for this chat', chatLabel(chat));
      if (title === null || !title.trim()) return;
      const updated = await api('PATCH', '/chats/' + chat.id, { title: title.trim() });
      upsertChat(updated);
    }),
    action(chat.archived ? 'Unarchive' : 'Archive', async () => {
      upsertChat(await api('POST', '/chats/' + chat.id + (chat.archived ? '/unarchive' : '/archive')));
    }),
    action('Delete', async () => {
      if (!window.confirm('Delete "' + chatLabel(chat) + '" and all its messages?')) return;
      await api('DELETE', '/chats/' + chat.id);
      removeChat(chat.id);
    }));
}

function renderChatList() {
  const query = $('search').value.trim().toLowerCase();
  const archived = $('show-archived').checked;
  const shown = [...view.chats.values()]
    .filter((chat) => (archived || !chat.archived) && (!query || chatLabel(chat).toLowerCase().includes(query)))
    .sort((a, b) => b.created_at.localeCompare(a.created_at));
  const list = $('chat-list');
  list.replaceChildren(...shown.map((chat) => el('li', {
    class: (chat.id === view.chatId ? 'active' : '') + (chat.archived ? ' archived' : ''),
    'data-id': chat.id,
    title: chatLabel(chat),
    onclick: () => { openChat(chat.id); closeSidebar(); },
  }, el('span', { class: 'chat-name' }, chatLabel(chat)),
  el('span', { class: 'meta' }, relativeTime(chat.updated_at)
    + (chat.status === 'waiting' ? '' : ' · ' + (STATUS_WORDS[chat.status] || chat.status))
    + (chat.archived ? ' · archived' : '')),
  chatActions(chat),
  view.listErrors.has(chat.id)
    ? el('div', { class: 'list-error form-error', role: 'alert' }, view.listErrors.get(chat.id))
    : null)));
  if (!shown.length) {
    list.append(el('li', { class: 'empty' }, query ? 'No chat matches.' : 'No chats yet.'));
  }
  const listError = $('list-error');
  listError.textContent = view.listError || '';
  listError.hidden = !view.listError;
}

function upsertChat(chat) {
  view.chats.set(chat.id, chat);
  if (chat.id === view.chatId) showChatHeader(chat);
  renderChatList();
}

function removeChat(id) {
  view.chats.delete(id);
  view.listErrors.delete(id);
  if (id === view.chatId) {
    openChat(null);
    showBanner('That chat was deleted.');
  }
  renderChatList();
}

// Follows the list feed: every open page sees chats created, renamed, archived or deleted
// by any client. After a reconnect (or a `resync`) it reloads the whole list.
async function followList() {
  let delay = 250;
  for (;;) {
    try {
      const response = await fetch(API + '/events', { headers: authHeaders({ Accept: 'text/event-stream' }) });
      if (response.status === 401) { await askToken(authHeaders().Authorization); continue; }
      if (!response.ok) throw new Error('list feed: ' + response.status);
      delay = 250;
      await loadChats();
      await readEvents(response.body, (name, _id, raw) => {
        let data = {};
        try { data = JSON.parse(raw); } catch (_) { return; }
        if (name === 'resync') loadChats();
        else if (name === 'chat' && data.deleted) removeChat(data.id);
        else if (name === 'chat') upsertChat(data);
      });
    } catch (_) {
      // Reconnect below.
    }
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, 5000);
  }
}

async function loadModels() {
  try {
    const { models } = await api('GET', '/models');
    view.models = models;
    const select = $('model');
    select.replaceChildren(...models.map((m) => el('option', { value: m.id, selected: m.default ? '' : null }, m.id)));
    select.hidden = models.length < 2;
    if (view.chatModel) select.value = view.chatModel;
  } catch (_) {
    // The model list is a convenience; the server's default is used without it.
  }
}

// The model picker: for a new chat it picks the model it is created with; for an open chat
// it switches the chat's model, which the next reply uses.
async function pickModel() {
  const model = $('model').value;
  if (!view.chatId || model === view.chatModel) return;
  try {
    const chat = await api('PATCH', '/chats/' + view.chatId, { model });
    upsertChat(chat);
    showBanner('The next reply will come from ' + model + '.');
  } catch (error) {
    $('model').value = view.chatModel;
    showError(error);
  }
}

// A chat's tokens and cost, as `GET /chats/{id}` sums them (list entries carry none).
function showUsage(usage) {
  const node = $('chat-usage');
  if (!usage) return;
  const tokens = usage.input_tokens + usage.cached_input_tokens + usage.output_tokens;
  node.hidden = tokens === 0;
  node.textContent = tokens.toLocaleString('en-US') + ' tokens'
    + (usage.cost === null ? '' : ' · $' + usage.cost.toFixed(4));
}

function showChatHeader(chat) {
  $('chat-title').textContent = chatLabel(chat);
  showUsage(chat.usage);
  view.chatModel = chat.model;
  if (view.models.some((m) => m.id === chat.model)) $('model').value = chat.model;
}

function openSidebar() {
  $('sidebar').classList.add('open');
  $('backdrop').hidden = false;
}

function closeSidebar() {
  $('sidebar').classList.remove('open');
  $('backdrop').hidden = true;
}

// ---------------------------------------------------------------- rendering

function partText(part) {
  return typeof part.text === 'string' ? part.text : '';
}

function prettyArgs(args) {
  try { return JSON.stringify(JSON.parse(args), null, 2); } catch (_) { return args || ''; }
}

function resultText(result) {
  return typeof result === 'string' ? result : JSON.stringify(result, null, 2);
}

function toolCard(call) {
  const card = el('div', { class: 'tool-card' + (call.cancelled ? ' cancelled' : ''), 'data-call': call.tool_call_id },
    el('div', {}, el('span', { class: 'name' }, call.tool_name || 'tool'),
      call.complete === false ? ' (streaming arguments…)' : null,
      call.cancelled ? ' — cancelled: ' + call.cancelled : null),
    el('pre', { class: 'args' }, prettyArgs(call.args)),
    el('pre', { class: 'result', hidden: '' }));
  return card;
}

function fillResult(card, part) {
  const node = card.querySelector('.result');
  node.hidden = false;
  node.textContent = (part.is_error ? 'error: ' : '→ ') + resultText(part.result);
  node.classList.toggle('error', !!part.is_error);
}

// ---------------------------------------------------------------- Markdown

function copyText(text, button) {
  const done = (word) => {
    button.textContent = word;
    setTimeout(() => { button.textContent = 'Copy'; }, 1500);
  };
  navigator.clipboard.writeText(text).then(() => done('Copied'), () => done('Copy failed'));
}

// A fenced code block: highlighted, monospace, with its language and a copy button.
function decorateCode(pre) {
  const code = pre.querySelector('code') || pre;
  const language = (/language-([\w+#.-]+)/.exec(code.className) || [])[1] || '';
  if (window.hljs) {
    try { window.hljs.highlightElement(code); } catch (_) { /* unknown language: left plain */ }
  }
  const source = code.textContent;
  const button = el('button', { type: 'button', class: 'copy-code' }, 'Copy');
  button.addEventListener('click', () => copyText(source, button));
  const block = el('div', { class: 'code-block' }, el('div', { class: 'code-head' },
    el('span', { class: 'code-language' }, language), button));
  pre.replaceWith(block);
  block.append(pre);
}

// Renders Markdown into `node`, sanitised; does nothing when the text did not change, so a
// streaming reply only re-renders the block that grew.
function renderMarkdown(node, text) {
  if (node.dataset.source === text) return;
  node.dataset.source = text;
  if (!window.marked || !window.DOMPurify) {
    node.textContent = text;
    return;
  }
  const html = window.DOMPurify.sanitize(window.marked.parse(text, { gfm: true }));
  node.innerHTML = html.trim();
  node.classList.add('markdown');
  for (const link of node.querySelectorAll('a[href]')) {
    link.target = '_blank';
    link.rel = 'noopener noreferrer';
  }
  for (const pre of node.querySelectorAll('pre')) decorateCode(pre);
}

function markdownText(text) {
  const node = el('div', { class: 'text' });
  renderMarkdown(node, text);
  return node;
}

function renderPart(part, container) {
  switch (part.type) {
    case 'text':
      container.append(markdownText(partText(part)));
      break;
    case 'reasoning':
      container.append(el('details', { class: 'reasoning' }, el('summary', {}, 'Reasoning'),
        el('div', { class: 'text' }, partText(part))));
      break;
    case 'refusal':
      container.append(el('div', { class: 'refusal' }, el('span', { class: 'badge refused' }, 'declined'),
        el('div', { class: 'text' }, partText(part))));
      break;
    case 'tool_call':
      container.append(toolCard(part));
      break;
    case 'tool_result': {
      const card = findCard(part.tool_call_id, container);
      if (card) fillResult(card, part);
      else {
        const standalone = toolCard({ tool_call_id: part.tool_call_id, tool_name: part.tool_name, args: '' });
        fillResult(standalone, part);
        container.append(standalone);
      }
      break;
    }
    case 'source':
      container.append(el('div', { class: 'notice' }, 'source: ' + (part.title || part.url)));
      break;
    case 'file':
      container.append(el('div', { class: 'notice' }, '[file ' + (part.media_type || '') + ']'));
      break;
    default:
      break;
  }
}

function findCard(callId, within) {
  const escaped = CSS.escape(callId || '');
  return (within && within.querySelector('[data-call="' + escaped + '"]'))
    || $('messages').querySelector('[data-call="' + escaped + '"]');
}

function liveContainer() {
  let live = $('live');
  if (!live) {
    live = el('div', { id: 'live', class: 'msg assistant live' });
  }
  $('messages').append(live); // keep it last
  return live;
}

function userMessage(message) {
  const text = message.parts.filter((p) => p.type === 'text').map(partText).join('');
  const node = el('div', { class: 'msg user', 'data-id': message.id },
    el('div', { class: 'text' }, text));
  node.append(el('a', { href: '#', class: 'edit-link', onclick: (e) => { e.preventDefault(); editMessage(node, message.id, text); } }, 'edit'));
  addBranchControls(node, message);
  return node;
}

function committedMessage(message) {
  if (message.role === 'user') return userMessage(message);
  const node = el('div', { class: 'msg ' + message.role, 'data-id': message.id });
  for (const part of message.parts) renderPart(part, node);
  if (message.interrupted) node.append(el('span', { class: 'badge interrupted' }, 'stopped'));
  if (isStoppedReply(message)) node.dataset.stopped = '1';
  const text = message.parts.filter((p) => p.type === 'text').map(partText).join('\n\n');
  if (message.role === 'assistant' && text) {
    node.dataset.reply = text;
    const button = el('button', { type: 'button', class: 'copy-message' }, 'Copy');
    button.addEventListener('click', () => copyText(replyText(node), button));
    node.append(el('div', { class: 'msg-actions' }, button));
  }
  addBranchControls(node, message);
  return node;
}

function scrollToEnd() {
  const messages = $('messages');
  const nearEnd = messages.scrollHeight - messages.scrollTop - messages.clientHeight < 120;
  if (nearEnd) messages.scrollTop = messages.scrollHeight;
}

// The step in progress. While only text grows (the usual case) the text blocks are updated
// in place; anything else (a new part, a tool call's progress) rebuilds the container.
function renderLive() {
  view.renderQueued = false;
  const live = liveContainer();
  const parts = view.live.filter((p) => p.type !== 'tool_result')
    .concat(view.live.filter((p) => p.type === 'tool_result'));
  const waiting = isBusy() && parts.length === 0;
  const shape = parts.map((p) => (p.type === 'text' ? 'text' : JSON.stringify(p))).join('|')
    + (waiting ? '|waiting' : '') + (view.retry ? '|' + view.retry : '');
  if (live.dataset.shape === shape) {
    const texts = live.querySelectorAll(':scope > .text');
    parts.filter((p) => p.type === 'text').forEach((part, i) => {
      if (texts[i]) renderMarkdown(texts[i], partText(part));
    });
  } else {
    live.dataset.shape = shape;
    live.replaceChildren();
    for (const part of parts) renderPart(part, live);
    if (waiting && !view.retry) live.append(el('div', { class: 'notice' }, 'Waiting for the model…'));
    if (view.retry) live.append(el('div', { class: 'notice retry-notice', role: 'status' }, view.retry));
  }
  scrollToEnd();
}

function renderLiveSoon() {
  if (!view.renderQueued) {
    view.renderQueued = true;
    requestAnimationFrame(renderLive);
  }
}

// ---------------------------------------------------------------- events

function applyPart(data) {
  const part = data.part || {};
  const role = data.role || 'assistant';
  const last = view.live[view.live.length - 1];
  showBanner('');
  view.retry = null;
  if (part.type === 'text' || part.type === 'reasoning' || part.type === 'refusal') {
    if (last && last.type === part.type && last.role === role) last.text += partText(part);
    else view.live.push({ role, type: part.type, text: partText(part) });
  } else if (part.type === 'tool_call') {
    let call = view.live.find((p) => p.type === 'tool_call' && p.tool_call_id === part.tool_call_id);
    if (!call) {
      call = { role, type: 'tool_call', tool_call_id: part.tool_call_id, tool_name: part.tool_name, args: '', complete: false };
      view.live.push(call);
    }
    call.args += part.args_delta || '';
    if (part.complete) { call.args = part.args; call.complete = true; }
  } else {
    view.live.push(Object.assign({ role }, part));
  }
  renderLiveSoon();
}

function applyMessage(message) {
  if (message.role === 'system') {
    // A compaction's notice: the summary that streamed as system parts is stored now.
    view.live = view.live.filter((p) => p.role !== 'system');
    renderLiveSoon();
    return;
  }
  const messages = $('messages');
  const existing = messages.querySelector('.msg[data-id="' + message.id + '"]');
  if (existing) {
    // An edited message: everything after it was deleted with the old version.
    let node = existing;
    while (node) {
      const next = node.nextElementSibling;
      if (node.id !== 'live') node.remove();
      node = next;
    }
  }
  view.live = view.live.filter((p) => p.role !== message.role && !(message.role === 'user'));
  if (message.role === 'tool') {
    for (const part of message.parts) {
      const card = part.type === 'tool_result' && findCard(part.tool_call_id);
      if (card) fillResult(card, part);
      else renderPart(part, messages.appendChild(el('div', { class: 'msg tool', 'data-id': message.id })));
    }
  } else {
    const node = committedMessage(message);
    messages.append(node);
    joinContinuation(node);
  }
  renderLive();
  renderContinue();
}

function applyStatus(data) {
  const before = view.status;
  view.status = data.status;
  $('chat-status').textContent = STATUS_WORDS[data.status] || data.status;
  $('chat-status').dataset.status = data.status;
  $('stop').disabled = !(data.status === 'running' || data.status === 'interrupting');
  $('send').textContent = isBusy() ? 'Queue' : 'Send';
  showRunError(data.status === 'error' ? data.last_error : null);
  if (IDLE.has(data.status)) showBanner('');
  if (before !== null && !IDLE.has(before) && IDLE.has(data.status) && view.chatId) {
    const chatId = view.chatId;
    api('GET', '/chats/' + chatId).then((chat) => {
      if (view.chatId === chatId) showUsage(chat.usage);
    }).catch(() => {});
  }
  if (data.status === 'requires_action') loadPendingTools();
  else $('tool-prompt').hidden = true;
  if (IDLE.has(data.status)) view.retry = null;
  renderContinue();
  renderLiveSoon();
}

function applyQueue(data) {
  const panel = $('queue');
  const queued = data.queued || [];
  panel.hidden = queued.length === 0;
  panel.replaceChildren(el('strong', {}, 'Queued'), el('ul', {}, ...queued.map((q) => {
    const text = (q.parts || []).filter((p) => p.type === 'text').map(partText).join('');
    return el('li', {}, text + ' ', el('button', {
      type: 'button',
      onclick: () => api('DELETE', '/chats/' + view.chatId + '/queue/' + q.id).catch(showError),
    }, 'remove'));
  })));
}

function applyEvent(name, id, data) {
  if (DURABLE.has(name) && id !== null) {
    if (id <= view.position) return; // already applied before a reconnect
    view.position = id;
  }
  switch (name) {
    case 'part': applyPart(data); break;
    case 'message': applyMessage(data); break;
    case 'stream_reset':
      view.live = view.live.filter((p) => p.role === 'user');
      showBanner('The reply restarted from the beginning.');
      renderLiveSoon();
      break;
    case 'tool_call_cancel': {
      const call = view.live.find((p) => p.type === 'tool_call' && p.tool_call_id === data.tool_call_id);
      if (call) call.cancelled = data.reason || 'cancelled';
      renderLiveSoon();
      break;
    }
    case 'status': applyStatus(data); break;
    case 'retry': showRetry(data); break;
    case 'queue': applyQueue(data); break;
    case 'branch': applyBranch(); break;
    default: break;
  }
}

// Reads one server-sent event stream; calls back per event. Resolves when it ends.
async function readEvents(body, onEvent) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let event = { name: 'message', id: null, data: [] };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let newline;
    while ((newline = buffer.search(/\r\n|\r|\n/)) >= 0) {
      const line = buffer.slice(0, newline);
      buffer = buffer.slice(newline + (buffer.startsWith('\r\n', newline) ? 2 : 1));
      if (line === '') {
        if (event.data.length) onEvent(event.name, event.id, event.data.join('\n'));
        event = { name: 'message', id: event.id, data: [] };
        continue;
      }
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'event') event.name = value;
      else if (field === 'data') event.data.push(value);
      else if (field === 'id') event.id = value;
    }
  }
}

async function follow(chatId, controller) {
  let delay = 250;
  while (!controller.signal.aborted && view.chatId === chatId) {
    try {
      const headers = authHeaders({ Accept: 'text/event-stream' });
      if (view.lastEventId !== null) headers['Last-Event-ID'] = String(view.lastEventId);
      const response = await fetch(API + '/chats/' + chatId + '/events', { headers, signal: controller.signal });
      if (response.status === 401) { await askToken(headers.Authorization); continue; }
      if (response.status === 404) { showError('This chat no longer exists.'); return; }
      if (!response.ok) throw new Error('events: ' + response.status);
      $('connection').hidden = true;
      delay = 250;
      await readEvents(response.body, (name, id, raw) => {
        if (controller.signal.aborted) return;
        const number = id !== null && /^\d+$/.test(id) ? Number(id) : null;
        if (number !== null) view.lastEventId = number;
        let data = {};
        try { data = JSON.parse(raw); } catch (_) { return; }
        applyEvent(name, number, data);
      });
    } catch (_) {
      // A network failure: reconnect below with the last event id.
    }
    if (controller.signal.aborted) return;
    $('connection').hidden = false;
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, 5000);
  }
}

// ---------------------------------------------------------------- actions

function openChat(chatId) {
  if (view.stream) view.stream.abort();
  Object.assign(view, { chatId, status: null, lastEventId: null, position: 0, live: [], retry: null, stream: new AbortController() });
  showComposerError(null);
  $('messages').replaceChildren();
  $('tool-prompt').hidden = true;
  $('queue').hidden = true;
  $('connection').hidden = true;
  showBanner('');
  $('chat-title').textContent = chatId ? chatLabel(view.chats.get(chatId) || {}) : 'New chat';
  $('chat-status').textContent = '';
  view.chatModel = null;
  $('stop').disabled = true;
  $('send').textContent = 'Send';
  for (const item of $('chat-list').children) item.classList.toggle('active', item.dataset.id === chatId);
  if (!chatId) {
    const fallback = view.models.find((m) => m.default);
    if (fallback) $('model').value = fallback.id;
    history.replaceState(null, '', '#');
    return;
  }
  history.replaceState(null, '', '#chat=' + chatId);
  $('chat-usage').hidden = true;
  api('GET', '/chats/' + chatId).then((chat) => {
    if (view.chatId === chatId) showChatHeader(chat);
  }).catch(showError);
  follow(chatId, view.stream);
}

async function send(text) {
  if (!view.chatId) {
    const body = { text };
    const model = $('model').value;
    if (model) body.model = model;
    const chat = await api('POST', '/chats', body);
    upsertChat(chat);
    openChat(chat.id);
    return;
  }
  await api('POST', '/chats/' + view.chatId + '/messages', { text, busy: 'queue' });
}

function editMessage(node, messageId, text) {
  const box = el('textarea', { rows: '3' });
  box.value = text;
  const restore = () => { form.replaceWith(original); };
  const original = node.querySelector('.text');
  const form = el('div', {}, box,
    el('button', {
      type: 'button',
      onclick: async () => {
        try {
          await api('PUT', '/chats/' + view.chatId + '/messages/' + messageId, { text: box.value });
        } catch (error) {
          restore();
          showErrorAt(node, error);
        }
      },
    }, 'Save as a new version'),
    el('button', { type: 'button', onclick: restore }, 'Cancel'),
    el('div', { class: 'notice' }, 'The current version is kept: the arrows switch back to it.'));
  original.replaceWith(form);
  box.focus();
}

// ---------------------------------------------------------------- branches

// A message with other versions (an edit, a regenerated reply) gets "‹ 2/3 ›": the arrows
// make the branch through the previous or next version current, for every client of the
// chat; the daemon then sends a `branch` event and the branch's messages. An assistant
// reply gets a regenerate button.
function addBranchControls(node, message) {
  const siblings = message.siblings || [message.id];
  const index = siblings.indexOf(message.id);
  const bar = el('div', { class: 'branch-bar' });
  if (siblings.length > 1 && index >= 0) {
    const go = (to) => () => switchBranch(to);
    bar.append(el('span', { class: 'branch-nav', 'aria-label': 'Versions of this message' },
      el('button', { type: 'button', class: 'branch-prev', 'aria-label': 'Previous version', disabled: index === 0 ? '' : null, onclick: go(siblings[index - 1]) }, '‹'),
      el('span', { class: 'branch-count' }, (index + 1) + '/' + siblings.length),
      el('button', { type: 'button', class: 'branch-next', 'aria-label': 'Next version', disabled: index === siblings.length - 1 ? '' : null, onclick: go(siblings[index + 1]) }, '›')));
  }
  if (message.role === 'assistant') {
    bar.append(el('button', { type: 'button', class: 'regenerate', title: 'Write a new version of this reply; this one is kept', onclick: () => regenerate(message.id) }, 'Regenerate'));
  }
  if (!bar.childElementCount) return;
  // Beside the message's own actions (Copy) when it has them.
  const actions = node.querySelector(':scope > .msg-actions');
  (actions || node).append(bar);
}

async function switchBranch(messageId) {
  try {
    await api('POST', '/chats/' + view.chatId + '/branch', { message_id: messageId });
  } catch (error) {
    showError(error);
  }
}

async function regenerate(messageId) {
  try {
    await api('POST', '/chats/' + view.chatId + '/messages/' + messageId + '/regenerate');
  } catch (error) {
    showError(error);
  }
}

// The current branch changed: what is shown goes; the branch's messages follow as events.
function applyBranch() {
  for (const node of [...$('messages').children]) {
    if (node.id !== 'live' && node.id !== 'run-error') node.remove();
  }
  view.live = [];
  renderLiveSoon();
}

async function loadPendingTools() {
  const panel = $('tool-prompt');
  try {
    const chat = await api('GET', '/chats/' + view.chatId);
    const calls = chat.pending_tool_calls || [];
    if (!calls.length) { panel.hidden = true; return; }
    const inputs = calls.map((call) => {
      const box = el('textarea', { rows: '2', placeholder: 'Result: JSON or text', 'data-call': call.tool_call_id });
      const error = el('input', { type: 'checkbox' });
      return { call, box, error, node: el('div', { class: 'tool-card' },
        el('div', {}, el('span', { class: 'name' }, call.tool_name), ' wants a result'),
        el('pre', {}, prettyArgs(call.args)), box,
        el('label', {}, error, ' is an error')) };
    });
    panel.replaceChildren(el('strong', {}, 'The model called a client-side tool'),
      ...inputs.map((i) => i.node),
      el('button', {
        type: 'button',
        onclick: async () => {
          const results = inputs.map(({ call, box, error }) => {
            let result = box.value;
            try { result = JSON.parse(box.value); } catch (_) { /* plain text stays text */ }
            return { tool_call_id: call.tool_call_id, result, is_error: error.checked };
          });
          try {
            await api('POST', '/chats/' + view.chatId + '/tool-results', { results });
            panel.hidden = true;
          } catch (error) {
            showErrorAt(panel, error);
          }
        },
      }, 'Send results'));
    panel.hidden = false;
  } catch (error) {
    showError(error);
  }
}

// ---------------------------------------------------------------- continue, retry, errors

// The sentence shown when the daemon does not answer at all (the browser only says
// "Failed to fetch").
function unreachableSentence() {
  return 'Cannot reach Keel at ' + location.host + '. Is keel serve still running? '
    + 'The page reconnects by itself once it is back.';
}

function errorText(error) {
  return String(error && error.message ? error.message : error);
}

// A reply the user stopped that the model can carry on: interrupted, with text, and no
// tool call or refusal (the daemon decides the same way).
function isStoppedReply(message) {
  if (message.role !== 'assistant' || !message.interrupted) return false;
  if (message.parts.some((p) => p.type === 'tool_call' || p.type === 'tool_result' || p.type === 'refusal')) return false;
  return message.parts.some((p) => p.type === 'text' && partText(p).trim());
}

function committedNodes() {
  return [...$('messages').querySelectorAll(':scope > .msg[data-id]')];
}

// The Continue button sits on the last message when it is a reply the user stopped and the
// chat is idle; it asks the daemon to carry the reply on (POST /continue).
function renderContinue() {
  for (const old of document.querySelectorAll('.continue-reply')) old.remove();
  const nodes = committedNodes();
  const last = nodes[nodes.length - 1];
  if (!last || last.dataset.stopped !== '1' || !(view.status === 'waiting' || view.status === 'error')) return;
  let actions = last.querySelector(':scope > .msg-actions');
  if (!actions) {
    actions = el('div', { class: 'msg-actions' });
    last.append(actions);
  }
  const button = el('button', { type: 'button', class: 'continue-reply' }, 'Continue');
  button.addEventListener('click', () => rerun('continue', button, last));
  actions.prepend(button);
}

// A continuation of a stopped reply joins it: the stopped text and the new text become one
// Markdown block again (a code block cut in two is whole), and Copy copies the whole reply.
function joinContinuation(node) {
  const nodes = committedNodes();
  const stopped = nodes[nodes.indexOf(node) - 1];
  if (!stopped || stopped.dataset.stopped !== '1' || !node.classList.contains('assistant')) return;
  stopped.classList.add('continued');
  node.classList.add('continuation');
  const first = node.firstElementChild;
  // A reply stopped and continued more than once: its text lives where the first part was.
  let holder = stopped;
  for (let i = nodes.indexOf(stopped); i > 0 && !holder.querySelector(':scope > .text')
    && holder.classList.contains('continuation'); i--) holder = nodes[i - 1];
  const texts = holder.querySelectorAll(':scope > .text');
  const last = texts[texts.length - 1];
  if (first && last && first.classList.contains('text') && first.dataset.source !== undefined) {
    renderMarkdown(last, last.dataset.source + first.dataset.source);
    first.remove();
  }
}

// The text of a whole reply: a continuation's together with the stopped replies it carries on.
function replyText(node) {
  const nodes = committedNodes();
  const parts = [node.dataset.reply || ''];
  for (let i = nodes.indexOf(node) - 1; i >= 0 && nodes[i].dataset.stopped === '1'
    && nodes[i + 1].classList.contains('continuation'); i--) {
    parts.unshift(nodes[i].dataset.reply || '');
  }
  return parts.join('');
}

// Continue or Retry: the chat runs again without a new message.
async function rerun(action, button, at) {
  button.disabled = true;
  try {
    await api('POST', '/chats/' + view.chatId + '/' + action);
  } catch (error) {
    button.disabled = false;
    showErrorAt(at, error);
  }
}

// A failed run is shown where it failed, after the last message: the model, the provider and
// the address the request went to, the provider's own words, and a Retry button.
function showRunError(error) {
  const old = $('run-error');
  if (old) old.remove();
  if (!error) return;
  const model = view.models.find((m) => m.id === view.chatModel);
  const provider = error.provider || (model && model.provider);
  const who = (view.chatModel ? 'model ' + view.chatModel : 'the model')
    + (provider ? ' (provider ' + provider + ')' : '');
  const retry = el('button', { type: 'button', class: 'retry-run' }, 'Retry');
  const node = el('div', { id: 'run-error', class: 'msg run-error', role: 'alert' },
    el('strong', {}, 'The reply failed'), ' — ' + who + ', ' + error.kind.replace(/_/g, ' ') + ': ',
    el('span', { class: 'error-message' }, error.message),
    error.url ? el('div', { class: 'error-url' }, 'Address: ', el('code', {}, error.url)) : null,
    el('div', { class: 'run-error-actions' }, retry, ' or send a new message.'));
  retry.addEventListener('click', () => rerun('retry', retry, node));
  const live = $('live');
  if (live) live.before(node);
  else $('messages').append(node);
  scrollToEnd();
}

// A failed attempt that will be retried is said in the reply it belongs to.
function showRetry(data) {
  // The provider's name and the request's address, as a failed reply shows them: a wrong
  // base URL is plain from the first retry.
  const source = [data.provider ? 'provider ' + data.provider : null, data.url || null]
    .filter(Boolean).join(', ');
  view.retry = 'The provider failed (' + String(data.kind).replace(/_/g, ' ')
    + (data.message ? ': ' + data.message : '') + ')' + (source ? ' — ' + source : '')
    + '; trying again in ' + (data.delay_ms / 1000).toFixed(1) + ' s (attempt ' + data.attempt + ').';
  renderLiveSoon();
}

// An action on one message (edit, Continue, Retry, tool results) that failed: said there.
function showErrorAt(node, error) {
  if (!node || !node.isConnected) { showError(error); return; }
  const old = node.querySelector(':scope > .action-error');
  if (old) old.remove();
  node.append(el('div', { class: 'action-error form-error', role: 'alert' }, errorText(error)));
}

// A message that could not be sent: said under the message box, which keeps the text.
function showComposerError(error) {
  const node = $('composer-error');
  node.textContent = error ? errorText(error) : '';
  node.hidden = !error;
}

function start() {
  $('composer').addEventListener('submit', async (event) => {
    event.preventDefault();
    const input = $('input');
    const text = input.value;
    if (!text.trim()) return;
    input.value = '';
    showComposerError(null);
    try {
      await send(text);
    } catch (error) {
      input.value = text;
      showComposerError(error);
    }
  });
  $('input').addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $('composer').requestSubmit();
    }
  });
  const stop = () => {
    if (view.chatId && isBusy()) api('POST', '/chats/' + view.chatId + '/interrupt').catch(showError);
  };
  $('stop').addEventListener('click', stop);
  document.addEventListener('keydown', (event) => {
    if (event.key === 'Escape' && !document.querySelector('dialog[open]')) {
      if ($('sidebar').classList.contains('open')) closeSidebar();
      else stop();
    }
  });
  $('search').addEventListener('input', renderChatList);
  $('show-archived').addEventListener('change', renderChatList);
  $('model').addEventListener('change', pickModel);
  $('close-sidebar').addEventListener('click', closeSidebar);
  $('backdrop').addEventListener('click', closeSidebar);
  // Relative times move on.
  setInterval(renderChatList, 60_000);
  $('log-out').addEventListener('click', logOut);
  showLogOut();
  $('new-chat').addEventListener('click', () => { openChat(null); $('input').focus(); });
  $('toggle-sidebar').addEventListener('click', openSidebar);
  const match = /chat=([0-9a-fA-F-]+)/.exec(location.hash);
  loadModels();
  followList();
  openChat(match ? match[1] : null);
  $('input').focus();
}

start();
