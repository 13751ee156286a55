// The page's access to the daemon: the public API under /api/v1 with the bearer token the
// user enters when the server asks for one, the server-sent event reader, and what the page
// says when the daemon does not answer. Also the two DOM helpers every other file uses.
// Loaded first; the other files (render.js, list.js, chat.js, app.js) use its globals.
'use strict';

const API = '/api/v1';
const TOKEN_KEY = 'keel-token';

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === 'class') node.className = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null && value !== false) node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === 'string' ? document.createTextNode(child) : child);
  }
  return node;
}

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
  location.assign('/');
}

function authHeaders(extra) {
  const headers = Object.assign({}, extra);
  const token = localStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = 'Bearer ' + token;
  return headers;
}

// An error of a request the daemon answered, with its HTTP status (a 404 is told apart).
class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

// An error of a request that reached nothing: the daemon is down or the network is.
class UnreachableError extends Error {}

// Called each time a request or a live stream reaches the daemon: what the page said while
// it could not reach it is then out of date.
const reachedListeners = [];

function onReached(listener) {
  reachedListeners.push(listener);
}

function reached() {
  for (const listener of reachedListeners) listener();
}

// The sentence shown when the daemon does not answer at all (the browser only says
// "Failed to fetch").
function unreachableSentence() {
  return 'Cannot reach Keel at ' + location.host + '. Is keel serve still running? '
    + 'The page reconnects by itself once it is back.';
}

function errorText(error) {
  return String(error && error.message ? error.message : error);
}

async function api(method, path, body, options) {
  for (;;) {
    const init = { method, headers: authHeaders(body === undefined ? {} : { 'Content-Type': 'application/json' }) };
    if (body !== undefined) init.body = JSON.stringify(body);
    if (options && options.keepalive) init.keepalive = true;
    let response;
    try {
      response = await fetch(API + path, init);
    } catch (_) {
      throw new UnreachableError(unreachableSentence());
    }
    reached();
    if (response.status === 401) {
      await askToken(init.headers.Authorization);
      continue;
    }
    const text = await response.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (_) { data = null; }
    if (!response.ok) {
      const message = data && data.error ? data.error.message : response.status + ' ' + response.statusText;
      throw new ApiError(message, response.status);
    }
    return data;
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
