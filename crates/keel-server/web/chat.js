// The open chat: its live events applied to the page (exactly once each, resumed with
// Last-Event-ID after a reconnect), its status, queue and client-side tool calls, editing a
// message in place, versions (branches), Continue on a stopped reply, and failed turns:
// each is shown after the message it failed to answer, with Retry, until it is answered.
'use strict';

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

function isBusy() {
  return view.status !== null && !IDLE.has(view.status);
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
    const live = $('live');
    if (live) live.before(node);
    else messages.append(node);
    joinContinuation(node);
  }
  renderLive();
  refreshTurns();
}

function applyStatus(data) {
  const before = view.status;
  view.status = data.status;
  $('chat-status').textContent = STATUS_WORDS[data.status] || data.status;
  $('chat-status').dataset.status = data.status;
  $('stop').disabled = !(data.status === 'running' || data.status === 'interrupting');
  $('send').textContent = isBusy() ? 'Queue' : 'Send';
  view.lastError = data.status === 'error' ? data.last_error || null : null;
  if (view.lastError) rememberFailure(view.lastError);
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
  refreshTurns();
  renderLiveSoon();
}

function applyQueue(data) {
  const panel = $('queue');
  const queued = data.queued || [];
  panel.hidden = queued.length === 0;
  panel.replaceChildren(el('strong', {}, 'Queued'), el('ul', {}, ...queued.map((q) => {
    const text = (q.parts || []).filter((p) => p.type === 'text').map(partText).join('');
    return el('li', {}, text + ' ', el('button', {
      type: 'button', 'aria-label': 'Remove the queued message',
      onclick: () => api('DELETE', '/chats/' + view.chatId + '/queue/' + q.id).catch(showError),
    }, 'Remove'));
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

async function follow(chatId, controller) {
  let delay = 250;
  while (!controller.signal.aborted && view.chatId === chatId) {
    try {
      const headers = authHeaders({ Accept: 'text/event-stream' });
      if (view.lastEventId !== null) headers['Last-Event-ID'] = String(view.lastEventId);
      const response = await fetch(API + '/chats/' + chatId + '/events', { headers, signal: controller.signal });
      reached();
      if (response.status === 401) { await askToken(headers.Authorization); continue; }
      if (response.status === 404) { showNotFound(chatId); return; }
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

// ---------------------------------------------------------------- editing a message

// The message turns into an editor as wide as the conversation allows: Enter saves it as a
// new version, Shift+Enter starts a new line, Escape (or Cancel) puts the message back.
function editMessage(node, messageId, text) {
  if (node.classList.contains('editing')) return;
  const box = el('textarea', { class: 'edit-box', 'aria-label': 'Edit the message', rows: '1' });
  box.value = text;
  const restore = () => {
    form.replaceWith(...saved);
    node.classList.remove('editing');
    const button = node.querySelector('.edit-link');
    if (button) button.focus();
  };
  const save = async () => {
    if (!box.value.trim()) return;
    saveButton.disabled = true;
    try {
      await api('PUT', '/chats/' + view.chatId + '/messages/' + messageId, { text: box.value });
      scroll.stick = true;
    } catch (error) {
      saveButton.disabled = false;
      showErrorAt(node, error);
    }
  };
  const saveButton = el('button', { type: 'submit', class: 'primary save-edit' }, 'Save');
  const form = el('form', { class: 'edit-form', onsubmit: (event) => { event.preventDefault(); save(); } }, box,
    el('div', { class: 'edit-foot' },
      el('span', { class: 'notice' }, 'The current version is kept: the arrows switch back to it.'),
      el('span', { class: 'edit-buttons' },
        el('button', { type: 'button', class: 'cancel-edit', onclick: restore }, 'Cancel'),
        saveButton)));
  box.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      save();
    } else if (event.key === 'Escape') {
      event.preventDefault();
      event.stopPropagation();
      restore();
    }
  });
  box.addEventListener('input', () => autosize(box));
  const saved = [...node.children];
  node.classList.add('editing');
  node.replaceChildren(form);
  autosize(box);
  box.focus();
  box.setSelectionRange(box.value.length, box.value.length);
}

// ---------------------------------------------------------------- branches

async function switchBranch(messageId) {
  try {
    await api('POST', '/chats/' + view.chatId + '/branch', { message_id: messageId });
  } catch (error) {
    showError(error);
  }
}

async function regenerate(messageId, button) {
  if (button) button.disabled = true;
  try {
    scroll.stick = true;
    await api('POST', '/chats/' + view.chatId + '/messages/' + messageId + '/regenerate');
  } catch (error) {
    if (button) button.disabled = false;
    showError(error);
  }
}

// The current branch changed: what is shown goes; the branch's messages follow as events.
function applyBranch() {
  for (const node of [...$('messages').children]) {
    if (node.id !== 'live') node.remove();
  }
  view.live = [];
  renderLiveSoon();
}

// ---------------------------------------------------------------- turns

// A turn is a user message and what answered it. Its last reply carries the turn's one
// Regenerate (a reply of several steps, tool calls and results, is written again whole);
// a stopped last reply carries Continue; a user message nothing answered carries the
// failure. Recomputed from what is shown whenever it changes.
function refreshTurns() {
  for (const old of document.querySelectorAll('#messages .regenerate, #messages .continue-reply, #messages .run-error')) old.remove();
  const nodes = committedNodes();
  const idle = view.status === 'waiting' || view.status === 'error';
  const users = nodes.filter((n) => n.classList.contains('user'));
  nodes.forEach((node, i) => {
    const next = nodes[i + 1];
    const endsTurn = !next || next.classList.contains('user');
    if (!next && view.status === 'error') addFailure(node, users[users.length - 1], true);
    if (node.classList.contains('user')) {
      if (next && next.classList.contains('user')) addFailure(node, node, false);
      return;
    }
    if (!endsTurn || !node.classList.contains('assistant')) return;
    const actions = node.querySelector(':scope > .msg-actions');
    actions.append(el('button', {
      type: 'button', class: 'regenerate', disabled: !idle,
      title: 'Write a new version of this reply; this one is kept',
      onclick: (event) => regenerate(Number(node.dataset.id), event.currentTarget),
    }, 'Regenerate'));
    if (!next && node.dataset.stopped === '1' && idle) {
      const button = el('button', { type: 'button', class: 'continue-reply' }, 'Continue');
      button.addEventListener('click', () => rerun('continue', button, node));
      actions.prepend(button);
    }
  });
}

function failuresKey() {
  return 'keel-failures:' + view.chatId;
}

function storedFailures() {
  try { return JSON.parse(localStorage.getItem(failuresKey())) || {}; } catch (_) { return {}; }
}

// What a failed run said is kept with the message it failed to answer (in this browser):
// after the next message, a reload or a restart the failure still says what went wrong.
function rememberFailure(error) {
  const users = committedNodes().filter((n) => n.classList.contains('user'));
  const last = users[users.length - 1];
  if (!last) return;
  const failures = storedFailures();
  failures[last.dataset.id] = Object.assign({ model: view.chatModel }, error);
  const ids = Object.keys(failures);
  if (ids.length > 50) delete failures[ids[0]];
  try { localStorage.setItem(failuresKey(), JSON.stringify(failures)); } catch (_) { /* full: not kept */ }
}

// The failure of the turn of user message `user`, shown after `node` (the last message of
// the turn). `current`: the chat's last run failed (Retry runs it again); otherwise a later
// message was sent since, and Retry writes a new reply to `user` (a new version; the
// conversation after it is kept on its branch).
function addFailure(node, user, current) {
  const error = (current && view.lastError) || (user && storedFailures()[user.dataset.id]) || null;
  const model = view.models.find((m) => m.id === ((error && error.model) || view.chatModel));
  const provider = (error && error.provider) || (model && model.provider);
  const modelName = (error && error.model) || view.chatModel;
  const who = (modelName ? 'model ' + modelName : 'the model') + (provider ? ' (provider ' + provider + ')' : '');
  const retry = el('button', { type: 'button', class: 'retry-run', disabled: !(view.status === 'waiting' || view.status === 'error') }, 'Retry');
  const box = el('div', { class: 'msg run-error', role: 'alert', id: current ? 'run-error' : null },
    el('strong', {}, 'The reply failed'),
    error ? ' — ' + who + ', ' + String(error.kind).replace(/_/g, ' ') + ': ' : ' — this message has no reply.',
    error ? el('span', { class: 'error-message' }, error.message) : null,
    error && error.url ? el('div', { class: 'error-url' }, 'Address: ', el('code', {}, error.url)) : null,
    el('div', { class: 'run-error-actions' }, retry,
      current ? ' or send a new message.' : ' writes a new reply to this message; what followed is kept as another version.'));
  retry.addEventListener('click', () => {
    scroll.stick = true;
    if (current) rerun('retry', retry, box);
    else regenerate(Number(user.dataset.id), retry);
  });
  node.after(box);
}

// ---------------------------------------------------------------- continue, retry, errors

// Continue or Retry: the chat runs again without a new message.
async function rerun(action, button, at) {
  button.disabled = true;
  scroll.stick = true;
  try {
    await api('POST', '/chats/' + view.chatId + '/' + action);
  } catch (error) {
    button.disabled = false;
    showErrorAt(at, error);
  }
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

async function loadPendingTools() {
  const panel = $('tool-prompt');
  try {
    const chat = await api('GET', '/chats/' + view.chatId);
    const calls = chat.pending_tool_calls || [];
    if (!calls.length) { panel.hidden = true; return; }
    const inputs = calls.map((call) => {
      const box = el('textarea', { rows: '2', placeholder: 'Result: JSON or text', 'aria-label': 'Result of ' + call.tool_name, 'data-call': call.tool_call_id });
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
