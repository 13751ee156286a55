// Keel's web client, started here: the page's state, its addresses (`/c/CHAT_ID`, with
// Back and Forward between chats and a clear page for an unknown one), the header and tab
// title, the first screen (the model's name and starter prompts), the message box (it grows
// with its text), the model picker, and the keyboard: every action has a key or is reached
// with Tab, and the focus is always visible. The other files: api.js (requests, events),
// render.js (messages, scrolling), list.js (the chat list), chat.js (the open chat).
'use strict';

const view = {
  chats: new Map(), // id -> Chat, as the list shows them
  models: [], // from GET /models
  chatId: null,
  notFound: false, // the address names a chat the daemon does not have
  chatModel: null, // the open chat's model
  status: null,
  lastError: null, // the open chat's last_error while it is in `error`
  lastEventId: null, // resume position for Last-Event-ID
  position: 0, // last durable event applied
  live: [], // parts of the step in progress
  stream: null, // AbortController of the event stream
  renderQueued: false,
  retry: null, // what the step in progress says of a failed attempt being retried
  listErrors: new Map(), // chat id -> what a Rename, Archive or Delete of it ran into
  listError: null, // what loading the chat list ran into
  listStale: false, // the list changed while a row's menu was open
  deleting: new Map(), // chat id -> sends its delete; until then it can be undone
  composerError: null,
  bannerUnreachable: false,
};

const STARTERS = [
  'Explain how a write-ahead log keeps data safe',
  'Write a haiku about the sea',
  'List the files in my workspace',
  'Suggest three names for a sailing boat',
];

function showBanner(text, kind) {
  const banner = $('banner');
  banner.textContent = text || '';
  banner.className = 'banner' + (kind ? ' ' + kind : '');
  banner.hidden = !text;
  view.bannerUnreachable = false;
}

function showError(error) {
  showBanner(errorText(error), 'error');
  view.bannerUnreachable = error instanceof UnreachableError;
}

// A message that could not be sent: said under the message box, which keeps the text.
function showComposerError(error) {
  const node = $('composer-error');
  view.composerError = error || null;
  node.textContent = error ? errorText(error) : '';
  node.hidden = !error;
}

// The daemon answered again: what the page said of not reaching it is over.
onReached(() => {
  if (view.composerError instanceof UnreachableError) showComposerError(null);
  if (view.bannerUnreachable) showBanner('');
});

// ---------------------------------------------------------------- addresses

function chatPath(id) {
  return '/c/' + encodeURIComponent(id);
}

// The chat the address names: `/c/ID`, or the older `#chat=ID`.
function chatFromLocation() {
  const path = /^\/c\/([^/]+)\/?$/.exec(location.pathname);
  if (path) return decodeURIComponent(path[1]);
  const hash = /chat=([0-9a-fA-F-]+)/.exec(location.hash);
  return hash ? hash[1] : null;
}

// Opens a chat (null: a new one) and gives it its own entry in the browser's history, so
// Back and Forward move between chats.
function navigate(chatId, options) {
  const path = chatId ? chatPath(chatId) : '/';
  if (options && options.replace) history.replaceState(null, '', path);
  else if (location.pathname !== path || location.hash) history.pushState(null, '', path);
  openChat(chatId);
}

function setTitle(text) {
  document.title = text ? text + ' – Keel' : 'Keel';
}

// ---------------------------------------------------------------- header and models

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
  showWelcome();
}

// The model picker: for a new chat it picks the model it is created with; for an open chat
// it switches the chat's model, which the next reply uses.
async function pickModel() {
  const model = $('model').value;
  showWelcome();
  if (!view.chatId || view.notFound || model === view.chatModel) return;
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
  setTitle(chatLabel(chat));
  showUsage(chat.usage);
  view.chatModel = chat.model;
  if (view.models.some((m) => m.id === chat.model)) $('model').value = chat.model;
  // An archived chat stays open, and says so.
  $('archived-note').hidden = !chat.archived;
}

// The first screen: which model answers, and a few prompts to start from.
function showWelcome() {
  const shown = !view.chatId && !view.notFound;
  $('welcome').hidden = !shown;
  $('messages').hidden = shown || view.notFound;
  if (!shown) return;
  const model = $('model').value || (view.models.find((m) => m.default) || {}).id;
  $('welcome-model').textContent = model ? 'You are talking to ' + model + '.' : '';
  if (!$('starters').childElementCount) {
    $('starters').append(...STARTERS.map((text) => el('button', {
      type: 'button', class: 'starter',
      onclick: () => submitText(text),
    }, text)));
  }
}

function showNotFound(chatId) {
  if (view.chatId !== chatId) return;
  if (view.stream) view.stream.abort();
  view.notFound = true;
  $('messages').hidden = true;
  $('welcome').hidden = true;
  $('not-found').hidden = false;
  $('chat-title').textContent = 'Chat not found';
  $('chat-status').textContent = '';
  setTitle('Chat not found');
}

function openSidebar() {
  $('sidebar').classList.add('open');
  $('backdrop').hidden = false;
  $('toggle-sidebar').setAttribute('aria-expanded', 'true');
  $('search').focus();
}

function closeSidebar() {
  const wasOpen = $('sidebar').classList.contains('open');
  $('sidebar').classList.remove('open');
  $('backdrop').hidden = true;
  $('toggle-sidebar').setAttribute('aria-expanded', 'false');
  return wasOpen;
}

function isPhone() {
  return matchMedia('(max-width: 700px)').matches;
}

// ---------------------------------------------------------------- opening and sending

function openChat(chatId) {
  if (view.stream) view.stream.abort();
  closeMenus();
  Object.assign(view, {
    chatId, notFound: false, status: null, lastError: null, lastEventId: null, position: 0,
    live: [], retry: null, stream: new AbortController(),
  });
  scroll.stick = true;
  showComposerError(null);
  $('messages').replaceChildren();
  $('not-found').hidden = true;
  $('archived-note').hidden = true;
  $('tool-prompt').hidden = true;
  $('queue').hidden = true;
  $('connection').hidden = true;
  showBanner('');
  const known = chatId ? view.chats.get(chatId) : null;
  $('chat-title').textContent = chatId ? chatLabel(known || {}) : 'New chat';
  setTitle(chatId ? (known ? chatLabel(known) : '') : 'New chat');
  $('chat-status').textContent = '';
  $('chat-status').dataset.status = '';
  $('chat-usage').hidden = true;
  view.chatModel = null;
  $('stop').disabled = true;
  $('send').textContent = 'Send';
  for (const item of $('chat-list').children) {
    const active = item.dataset.id === chatId;
    item.classList.toggle('active', active);
    const link = item.querySelector('.chat-link');
    if (link) {
      if (active) link.setAttribute('aria-current', 'page');
      else link.removeAttribute('aria-current');
    }
  }
  showWelcome();
  if (!chatId) {
    const fallback = view.models.find((m) => m.default);
    if (fallback) $('model').value = fallback.id;
    showWelcome();
    return;
  }
  if (known) showChatHeader(known);
  api('GET', '/chats/' + encodeURIComponent(chatId)).then((chat) => {
    if (view.chatId === chatId) showChatHeader(chat);
  }).catch((error) => {
    if (error.status === 404 || error.status === 400) showNotFound(chatId);
    else showError(error);
  });
  follow(chatId, view.stream);
}

async function send(text) {
  scroll.stick = true;
  if (!view.chatId || view.notFound) {
    const body = { text };
    const model = $('model').value;
    if (model) body.model = model;
    const chat = await api('POST', '/chats', body);
    upsertChat(chat);
    navigate(chat.id, { replace: !!view.notFound });
    return;
  }
  await api('POST', '/chats/' + view.chatId + '/messages', { text, busy: 'queue' });
}

async function submitText(text) {
  const input = $('input');
  if (!text.trim()) return;
  input.value = '';
  autosize(input);
  showComposerError(null);
  try {
    await send(text);
  } catch (error) {
    input.value = text;
    autosize(input);
    showComposerError(error);
  }
}

// A text box grows with its text, up to its CSS max-height, then scrolls.
function autosize(box) {
  box.style.height = 'auto';
  box.style.height = (box.scrollHeight + box.offsetHeight - box.clientHeight) + 'px';
}

function stopReply() {
  if (view.chatId && isBusy()) api('POST', '/chats/' + view.chatId + '/interrupt').catch(showError);
}

// ---------------------------------------------------------------- keyboard

// The chat `step` rows above or below the open one in the list (Alt+Up, Alt+Down).
function otherChat(step) {
  const shown = shownChats();
  if (!shown.length) return;
  const at = shown.findIndex((chat) => chat.id === view.chatId);
  const to = at < 0 ? (step > 0 ? 0 : shown.length - 1) : at + step;
  if (to < 0 || to >= shown.length) return;
  navigate(shown[to].id);
}

function globalKeys(event) {
  const key = event.key;
  const ctrl = event.ctrlKey || event.metaKey;
  if (document.querySelector('dialog[open]')) return;
  if (ctrl && event.shiftKey && (key === 'O' || key === 'o')) {
    event.preventDefault();
    navigate(null);
    closeSidebar();
    $('input').focus();
  } else if (ctrl && !event.shiftKey && (key === 'k' || key === 'K')) {
    event.preventDefault();
    if (isPhone()) openSidebar();
    $('search').focus();
    $('search').select();
  } else if (ctrl && key === '/') {
    event.preventDefault();
    $('shortcuts-dialog').showModal();
  } else if (event.altKey && (key === 'ArrowUp' || key === 'ArrowDown')) {
    event.preventDefault();
    otherChat(key === 'ArrowUp' ? -1 : 1);
  } else if (key === 'Escape' && event.shiftKey) {
    event.preventDefault();
    closeMenus();
    closeSidebar();
    $('input').focus();
  } else if (key === 'Escape') {
    if (closeMenus()) {
      const focused = document.activeElement;
      if (!focused || focused === document.body) $('input').focus();
    } else if (closeSidebar()) $('toggle-sidebar').focus();
    else stopReply();
  }
}

// ---------------------------------------------------------------- start

function start() {
  $('composer').addEventListener('submit', (event) => {
    event.preventDefault();
    submitText($('input').value);
  });
  const input = $('input');
  input.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $('composer').requestSubmit();
    }
  });
  input.addEventListener('input', () => autosize(input));
  $('stop').addEventListener('click', stopReply);
  document.addEventListener('keydown', globalKeys);
  document.addEventListener('click', (event) => {
    if (!event.target.closest('.chat-menu, .chat-menu-button')) closeMenus();
  });
  $('chat-list').addEventListener('keydown', listKeys);
  $('search').addEventListener('keydown', (event) => {
    if (event.key === 'ArrowDown') {
      const first = $('chat-list').querySelector('.chat-link');
      if (first) { event.preventDefault(); first.focus(); }
    } else if (event.key === 'Enter') {
      const first = $('chat-list').querySelector('.chat-link');
      if (first) { event.preventDefault(); first.click(); }
    }
  });
  $('search').addEventListener('input', renderChatList);
  $('show-archived').addEventListener('change', renderChatList);
  $('model').addEventListener('change', pickModel);
  $('close-sidebar').addEventListener('click', () => { closeSidebar(); $('toggle-sidebar').focus(); });
  $('backdrop').addEventListener('click', closeSidebar);
  $('toggle-sidebar').addEventListener('click', openSidebar);
  $('new-chat').addEventListener('click', () => { navigate(null); closeSidebar(); $('input').focus(); });
  $('not-found-new').addEventListener('click', () => { navigate(null); $('input').focus(); });
  $('shortcuts').addEventListener('click', () => $('shortcuts-dialog').showModal());
  $('unarchive-open').addEventListener('click', () => {
    const chat = view.chats.get(view.chatId) || { id: view.chatId };
    chatAction(chat, 'Unarchive', () => setArchived(chat, false, true));
  });
  $('log-out').addEventListener('click', logOut);
  window.addEventListener('popstate', () => openChat(chatFromLocation()));
  window.addEventListener('pagehide', flushDeletes);
  // Relative times move on.
  setInterval(renderChatList, 60_000);
  showLogOut();
  watchScrolling();
  const chatId = chatFromLocation();
  // The older `#chat=ID` address becomes the chat's own.
  if (chatId && !location.pathname.startsWith('/c/')) history.replaceState(null, '', chatPath(chatId));
  loadModels();
  followList();
  openChat(chatId);
  autosize(input);
  input.focus();
}

start();
