// What a chat looks like on the page: Markdown (marked, then DOMPurify, then highlight.js;
// without them text is shown as it is), parts and tool cards, committed messages, the step
// in progress, and the scroll position: the view follows a streaming reply to its end
// unless the reader scrolled up, when "Jump to latest" brings it back.
'use strict';

// ---------------------------------------------------------------- following the end

const scroll = {
  stick: true, // the view follows the end of the conversation
  lastTop: 0,
  touchY: null,
};

function distanceFromEnd() {
  const m = $('messages');
  return m.scrollHeight - m.scrollTop - m.clientHeight;
}

function updateJump() {
  $('jump-latest').hidden = scroll.stick || distanceFromEnd() <= 24;
}

// Called whenever the conversation changed: at its end the view stays at its end.
function keepAtEnd() {
  const m = $('messages');
  if (scroll.stick && distanceFromEnd() > 0) {
    m.scrollTop = m.scrollHeight;
    scroll.lastTop = m.scrollTop;
  }
  updateJump();
}

// The reader asked for the end: the view goes there and follows again.
function jumpToLatest() {
  scroll.stick = true;
  keepAtEnd();
}

// The reader moved up: the view stays where it is while the reply goes on below.
function letGo() {
  if (distanceFromEnd() > 1) scroll.stick = false;
  updateJump();
}

function watchScrolling() {
  const m = $('messages');
  m.addEventListener('scroll', () => {
    if (distanceFromEnd() <= 4) scroll.stick = true;
    else if (m.scrollTop < scroll.lastTop - 1) scroll.stick = false;
    scroll.lastTop = m.scrollTop;
    updateJump();
  }, { passive: true });
  // A wheel, finger or key moving up lets go at once, before a streamed word pulls the
  // view back down between two scroll events.
  m.addEventListener('wheel', (event) => { if (event.deltaY < 0) { scroll.stick = false; updateJump(); } }, { passive: true });
  m.addEventListener('touchstart', (event) => { scroll.touchY = event.touches[0].clientY; }, { passive: true });
  m.addEventListener('touchmove', (event) => {
    if (scroll.touchY !== null && event.touches[0].clientY > scroll.touchY + 4) letGo();
  }, { passive: true });
  m.addEventListener('keydown', (event) => {
    if (['PageUp', 'ArrowUp', 'Home'].includes(event.key)) letGo();
  });
  new MutationObserver(keepAtEnd).observe(m, { childList: true, subtree: true, characterData: true });
  new ResizeObserver(keepAtEnd).observe(m);
  $('jump-latest').addEventListener('click', () => {
    jumpToLatest();
    $('input').focus();
  });
}

// ---------------------------------------------------------------- parts

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
  return el('div', { class: 'tool-card' + (call.cancelled ? ' cancelled' : ''), 'data-call': call.tool_call_id },
    el('div', {}, el('span', { class: 'name' }, call.tool_name || 'tool'),
      call.complete === false ? ' (streaming arguments…)' : null,
      call.cancelled ? ' — cancelled: ' + call.cancelled : null),
    el('pre', { class: 'args', tabindex: '0', 'aria-label': 'Arguments' }, prettyArgs(call.args)),
    el('pre', { class: 'result', hidden: '', tabindex: '0', 'aria-label': 'Result' }));
}

function fillResult(card, part) {
  const node = card.querySelector('.result');
  node.hidden = false;
  node.textContent = (part.is_error ? 'error: ' : '→ ') + resultText(part.result);
  node.classList.toggle('error', !!part.is_error);
}

function findCard(callId, within) {
  const escaped = CSS.escape(callId || '');
  return (within && within.querySelector('[data-call="' + escaped + '"]'))
    || $('messages').querySelector('[data-call="' + escaped + '"]');
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
  const button = el('button', { type: 'button', class: 'copy-code', 'aria-label': 'Copy the code' }, 'Copy');
  button.addEventListener('click', () => copyText(source, button));
  const block = el('div', { class: 'code-block' }, el('div', { class: 'code-head' },
    el('span', { class: 'code-language' }, language), button));
  pre.replaceWith(block);
  pre.tabIndex = 0;
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
  for (const table of node.querySelectorAll('table')) table.tabIndex = 0;
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

// ---------------------------------------------------------------- messages

function messageText(message, separator) {
  return message.parts.filter((p) => p.type === 'text').map(partText).join(separator);
}

// A reply the user stopped that the model can carry on: interrupted, with text, and no
// tool call or refusal (the daemon decides the same way).
function isStoppedReply(message) {
  if (message.role !== 'assistant' || !message.interrupted) return false;
  if (message.parts.some((p) => p.type === 'tool_call' || p.type === 'tool_result' || p.type === 'refusal')) return false;
  return message.parts.some((p) => p.type === 'text' && partText(p).trim());
}

function userMessage(message) {
  const text = messageText(message, '');
  const node = el('div', { class: 'msg user', 'data-id': message.id },
    el('div', { class: 'text' }, text));
  const actions = el('div', { class: 'msg-actions' },
    el('button', {
      type: 'button', class: 'edit-link', 'aria-label': 'Edit this message',
      onclick: () => editMessage(node, message.id, text),
    }, 'Edit'));
  node.append(actions);
  addBranchArrows(node, message);
  return node;
}

function committedMessage(message) {
  if (message.role === 'user') return userMessage(message);
  const node = el('div', { class: 'msg ' + message.role, 'data-id': message.id, 'data-role': message.role });
  for (const part of message.parts) renderPart(part, node);
  if (message.interrupted) node.append(el('span', { class: 'badge interrupted' }, 'stopped'));
  if (isStoppedReply(message)) node.dataset.stopped = '1';
  const text = messageText(message, '\n\n');
  const actions = el('div', { class: 'msg-actions' });
  if (message.role === 'assistant' && text) {
    node.dataset.reply = text;
    const button = el('button', { type: 'button', class: 'copy-message', 'aria-label': 'Copy the reply' }, 'Copy');
    button.addEventListener('click', () => copyText(replyText(node), button));
    actions.append(button);
  }
  node.append(actions);
  addBranchArrows(node, message);
  return node;
}

// A message with other versions (an edit, a regenerated reply) gets "‹ 2/3 ›": the arrows
// make the branch through the previous or next version current, for every client of the
// chat; the daemon then sends a `branch` event and the branch's messages.
function addBranchArrows(node, message) {
  const siblings = message.siblings || [message.id];
  const index = siblings.indexOf(message.id);
  if (siblings.length < 2 || index < 0) return;
  const go = (to) => () => switchBranch(to);
  const what = message.role === 'user' ? 'message' : 'reply';
  const nav = el('span', { class: 'branch-nav', role: 'group', 'aria-label': 'Versions of this ' + what },
    el('button', {
      type: 'button', class: 'branch-prev', 'aria-label': 'Previous version',
      title: 'Previous version', disabled: index === 0, onclick: go(siblings[index - 1]),
    }, '‹'),
    el('span', { class: 'branch-count', 'aria-label': 'Version ' + (index + 1) + ' of ' + siblings.length }, (index + 1) + '/' + siblings.length),
    el('button', {
      type: 'button', class: 'branch-next', 'aria-label': 'Next version',
      title: 'Next version', disabled: index === siblings.length - 1, onclick: go(siblings[index + 1]),
    }, '›'));
  node.querySelector(':scope > .msg-actions').append(el('span', { class: 'branch-bar' }, nav));
}

function committedNodes() {
  return [...$('messages').querySelectorAll(':scope > .msg[data-id]')];
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

// ---------------------------------------------------------------- the step in progress

function liveContainer() {
  let live = $('live');
  if (!live) {
    live = el('div', { id: 'live', class: 'msg assistant live' });
  }
  $('messages').append(live); // keep it last
  return live;
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
    if (waiting && !view.retry) live.append(el('div', { class: 'notice typing' }, 'Waiting for the model…'));
    if (view.retry) live.append(el('div', { class: 'notice retry-notice', role: 'status' }, view.retry));
  }
  keepAtEnd();
}

function renderLiveSoon() {
  if (!view.renderQueued) {
    view.renderQueued = true;
    requestAnimationFrame(renderLive);
  }
}
