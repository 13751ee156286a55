// The chat list: one row a chat, the most recently active first (`updated_at`), kept
// current by the list feed. A row is one link to its chat; its actions (Rename, Archive,
// Delete) sit behind its "⋯" menu, Rename and Delete ask in a dialog of the page, and an
// archive or a delete can be undone for a few seconds (a delete is sent when that time is
// up, or when the page goes away). The list is worked with the keyboard as well: arrows
// move between rows, Shift+F10 or the menu key opens a row's menu.
'use strict';

// How long an archive or a delete can be undone.
const UNDO_MS = 6000;

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
  if (view.chatId && view.chats.has(view.chatId)) showChatHeader(view.chats.get(view.chatId));
}

// The chats the list shows, in its order: the most recently active first.
function shownChats() {
  const query = $('search').value.trim().toLowerCase();
  const archived = $('show-archived').checked;
  return [...view.chats.values()]
    .filter((chat) => !view.deleting.has(chat.id))
    .filter((chat) => (archived || !chat.archived) && (!query || chatLabel(chat).toLowerCase().includes(query)))
    .sort((a, b) => b.updated_at.localeCompare(a.updated_at) || b.created_at.localeCompare(a.created_at));
}

// A Rename, Archive or Delete that failed is said at its chat's entry, and stays there
// (through the list redrawing) until the next action on that chat.
function chatAction(chat, label, handler) {
  closeMenus();
  view.listErrors.delete(chat.id);
  handler().catch((error) => {
    view.listErrors.set(chat.id, label + ' failed: ' + errorText(error));
  }).then(() => renderChatList());
}

function chatMenu(chat) {
  const item = (action, label, handler) => el('button', {
    type: 'button', role: 'menuitem', class: 'menu-item', 'data-action': action, tabindex: '-1',
    onclick: (event) => {
      event.stopPropagation();
      chatAction(chat, label, handler);
    },
  }, label);
  return el('div', { class: 'chat-menu', role: 'menu', 'aria-label': 'Actions for ' + chatLabel(chat), hidden: '' },
    item('rename', 'Rename', () => renameChat(chat)),
    chat.archived
      ? item('unarchive', 'Unarchive', () => setArchived(chat, false))
      : item('archive', 'Archive', () => setArchived(chat, true)),
    item('delete', 'Delete', () => deleteChat(chat)));
}

function chatRow(chat) {
  const active = chat.id === view.chatId;
  const menuButton = el('button', {
    type: 'button', class: 'chat-menu-button icon-button', 'aria-haspopup': 'menu', 'aria-expanded': 'false',
    'aria-label': 'Actions for ' + chatLabel(chat), title: 'Rename, archive or delete',
  }, '⋯');
  const menu = chatMenu(chat);
  menuButton.addEventListener('click', (event) => {
    event.stopPropagation();
    if (menu.hidden) openMenu(menuButton, menu, false);
    else closeMenus();
  });
  menuButton.addEventListener('keydown', (event) => {
    if (event.key === 'ArrowDown' || event.key === 'ArrowUp') {
      event.preventDefault();
      openMenu(menuButton, menu, event.key === 'ArrowUp');
    }
  });
  const link = el('a', {
    class: 'chat-link', href: chatPath(chat.id), 'aria-current': active ? 'page' : null,
    onclick: (event) => {
      if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
      event.preventDefault();
      navigate(chat.id);
      closeSidebar();
    },
  }, el('span', { class: 'chat-name' }, chatLabel(chat)),
  el('span', { class: 'meta' }, relativeTime(chat.updated_at)
    + (chat.status === 'waiting' ? '' : ' · ' + (STATUS_WORDS[chat.status] || chat.status))
    + (chat.archived ? ' · archived' : '')));
  return el('li', {
    class: 'chat-row' + (active ? ' active' : '') + (chat.archived ? ' archived' : ''),
    'data-id': chat.id, title: chatLabel(chat),
  }, link, menuButton, menu,
  view.listErrors.has(chat.id)
    ? el('div', { class: 'list-error form-error', role: 'alert' }, view.listErrors.get(chat.id))
    : null);
}

function renderChatList() {
  const list = $('chat-list');
  // The row that has the focus keeps it through a redraw.
  const focused = document.activeElement && list.contains(document.activeElement)
    ? { id: document.activeElement.closest('li')?.dataset.id, menu: document.activeElement.classList.contains('chat-menu-button') }
    : null;
  if (list.querySelector('.chat-menu:not([hidden])')) {
    view.listStale = true; // redrawn when the menu closes
    return;
  }
  view.listStale = false;
  const shown = shownChats();
  const query = $('search').value.trim();
  list.replaceChildren(...shown.map(chatRow));
  if (!shown.length) {
    list.append(el('li', { class: 'empty' }, query ? 'No chat matches.' : 'No chats yet.'));
  }
  const listError = $('list-error');
  listError.textContent = view.listError || '';
  listError.hidden = !view.listError;
  if (focused && focused.id) {
    const row = list.querySelector('li[data-id="' + CSS.escape(focused.id) + '"]');
    const target = row && row.querySelector(focused.menu ? '.chat-menu-button' : '.chat-link');
    if (target) target.focus();
  }
}

function upsertChat(chat) {
  view.chats.set(chat.id, chat);
  if (chat.id === view.chatId) showChatHeader(chat);
  renderChatList();
}

function removeChat(id) {
  view.chats.delete(id);
  view.listErrors.delete(id);
  if (id === view.chatId && !view.deleting.has(id)) {
    navigate(null, { replace: true });
    showBanner('That chat was deleted.');
  }
  renderChatList();
}

// ---------------------------------------------------------------- the row menu

function openMenu(button, menu, last) {
  closeMenus();
  menu.hidden = false;
  button.setAttribute('aria-expanded', 'true');
  button.closest('li').classList.add('menu-open');
  const items = [...menu.querySelectorAll('[role=menuitem]')];
  (last ? items[items.length - 1] : items[0]).focus();
  menu.onkeydown = (event) => {
    const at = items.indexOf(document.activeElement);
    if (event.key === 'ArrowDown') items[(at + 1) % items.length].focus();
    else if (event.key === 'ArrowUp') items[(at - 1 + items.length) % items.length].focus();
    else if (event.key === 'Home') items[0].focus();
    else if (event.key === 'End') items[items.length - 1].focus();
    else if (event.key === 'Escape') { closeMenus(); button.focus(); } else if (event.key === 'Tab') { closeMenus(); return; } else return;
    event.preventDefault();
    event.stopPropagation();
  };
}

function closeMenus() {
  let closed = false;
  for (const menu of document.querySelectorAll('.chat-menu:not([hidden])')) {
    menu.hidden = true;
    const row = menu.closest('li');
    row.classList.remove('menu-open');
    row.querySelector('.chat-menu-button').setAttribute('aria-expanded', 'false');
    closed = true;
  }
  if (closed && view.listStale) setTimeout(renderChatList, 0);
  return closed;
}

// Arrows move between the rows' links; Shift+F10 or the context-menu key opens the row's
// menu; Home and End go to the first and last chat.
function listKeys(event) {
  const link = event.target.closest && event.target.closest('.chat-link');
  if (!link) return;
  const links = [...$('chat-list').querySelectorAll('.chat-link')];
  const at = links.indexOf(link);
  let to = null;
  if (event.key === 'ArrowDown') to = links[Math.min(at + 1, links.length - 1)];
  else if (event.key === 'ArrowUp') to = at === 0 ? $('search') : links[at - 1];
  else if (event.key === 'Home') to = links[0];
  else if (event.key === 'End') to = links[links.length - 1];
  else if (event.key === 'ContextMenu' || (event.key === 'F10' && event.shiftKey)) {
    const row = link.closest('li');
    openMenu(row.querySelector('.chat-menu-button'), row.querySelector('.chat-menu'), false);
  } else return;
  event.preventDefault();
  if (to) to.focus();
}

// ---------------------------------------------------------------- the actions

// Asks for a name in the page's own dialog; resolves with the trimmed name, or null.
function askName(current) {
  const dialog = $('rename-dialog');
  const input = $('rename-input');
  input.value = current;
  return new Promise((resolve) => {
    let answer = null;
    $('rename-form').onsubmit = () => { answer = input.value.trim() || null; };
    dialog.querySelector('.dialog-cancel').onclick = () => dialog.close();
    dialog.addEventListener('close', () => resolve(answer), { once: true });
    dialog.showModal();
    input.select();
  });
}

function askDelete(chat) {
  const dialog = $('delete-dialog');
  $('delete-text').textContent = '"' + chatLabel(chat) + '" and all its messages will be deleted. '
    + 'You can undo this for a few seconds.';
  return new Promise((resolve) => {
    let answer = false;
    $('delete-form').onsubmit = () => { answer = true; };
    dialog.querySelector('.dialog-cancel').onclick = () => dialog.close();
    dialog.addEventListener('close', () => resolve(answer), { once: true });
    dialog.showModal();
    dialog.querySelector('.dialog-cancel').focus();
  });
}

async function renameChat(chat) {
  const opener = document.activeElement;
  const title = await askName(chatLabel(chat));
  refocus(chat.id, opener);
  if (title === null || title === chatLabel(chat)) return;
  upsertChat(await api('PATCH', '/chats/' + chat.id, { title }));
}

async function setArchived(chat, archived, quiet) {
  upsertChat(await api('POST', '/chats/' + chat.id + (archived ? '/archive' : '/unarchive')));
  if (quiet) return;
  if (archived) {
    toast('Archived "' + chatLabel(chat) + '".', 'Undo', () => {
      chatAction(chat, 'Unarchive', () => setArchived(chat, false, true));
    });
  }
}

// A deleted chat leaves the page at once; the daemon is told when the undo time is up.
async function deleteChat(chat) {
  const opener = document.activeElement;
  if (!(await askDelete(chat))) {
    refocus(chat.id, opener);
    return;
  }
  const wasOpen = chat.id === view.chatId;
  const send = () => {
    if (!view.deleting.has(chat.id)) return Promise.resolve();
    view.deleting.delete(chat.id);
    clearTimeout(timer);
    return api('DELETE', '/chats/' + chat.id, undefined, { keepalive: true }).then(() => removeChat(chat.id), (error) => {
      view.listErrors.set(chat.id, 'Delete failed: ' + errorText(error));
      renderChatList();
    });
  };
  const timer = setTimeout(send, UNDO_MS);
  view.deleting.set(chat.id, send);
  if (wasOpen) navigate(null);
  renderChatList();
  toast('Deleted "' + chatLabel(chat) + '".', 'Undo', () => {
    clearTimeout(timer);
    view.deleting.delete(chat.id);
    renderChatList();
    if (wasOpen) navigate(chat.id);
  }, UNDO_MS);
}

// Deletes still waiting for their undo time go out now (the page is being left).
function flushDeletes() {
  for (const send of [...view.deleting.values()]) send();
}

// After a dialog, the focus goes back to the row's menu button it came from.
function refocus(chatId, opener) {
  const row = $('chat-list').querySelector('li[data-id="' + CSS.escape(chatId) + '"]');
  const button = row && row.querySelector('.chat-menu-button');
  if (button) button.focus();
  else if (opener && opener.isConnected) opener.focus();
}

// A short message at the bottom of the page with one action (Undo), gone after `ms`.
function toast(text, actionLabel, action, ms) {
  const node = el('div', { class: 'toast' }, el('span', {}, text));
  const close = () => node.remove();
  if (actionLabel) {
    node.append(el('button', {
      type: 'button', class: 'toast-action',
      onclick: () => { close(); action(); },
    }, actionLabel));
  }
  node.append(el('button', { type: 'button', class: 'toast-close icon-button', 'aria-label': 'Dismiss', onclick: close }, '✕'));
  $('toasts').append(node);
  setTimeout(close, ms || UNDO_MS);
}

// Follows the list feed: every open page sees chats created, renamed, archived or deleted
// by any client. After a reconnect (or a `resync`) it reloads the whole list.
async function followList() {
  let delay = 250;
  for (;;) {
    try {
      const response = await fetch(API + '/events', { headers: authHeaders({ Accept: 'text/event-stream' }) });
      reached();
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
