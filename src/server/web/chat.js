// gem4 chat page: a conversation kept in the page, sent whole to /v1/chat/completions with
// stream: true on every turn (the server's prefix cache makes the repeated history cheap).
// Each assistant message element carries data-state ("streaming", "done", "stopped", "error") and
// data-chunks (content/reasoning deltas received) so a test can follow the stream.
'use strict';

const $ = (id) => document.getElementById(id);
const history = [];  // {role, content} of the finished turns
let controller = null;  // the AbortController of the reply being streamed
let epoch = 0;  // bumped by Clear chat: a reply that ends after it is not added to the new history

const settings = ['system', 'temperature', 'max-tokens', 'think', 'extra', 'api-key'];
function loadSettings() {
  for (const id of settings) {
    const v = localStorage.getItem('gem4.' + id);
    if (v === null) continue;
    if ($(id).type === 'checkbox') $(id).checked = v === 'true';
    else $(id).value = v;
  }
  $('temperature-value').textContent = $('temperature').value;
}
function saveSettings() {
  for (const id of settings)
    localStorage.setItem('gem4.' + id, $(id).type === 'checkbox' ? String($(id).checked) : $(id).value);
  $('temperature-value').textContent = $('temperature').value;
}

function headers() {
  const h = { 'Content-Type': 'application/json' };
  const key = $('api-key').value.trim();
  if (key) h.Authorization = 'Bearer ' + key;
  return h;
}

function setStatus(text) { $('status').textContent = text; }

async function loadModel() {
  try {
    const r = await fetch('/v1/models', { headers: headers() });
    const j = await r.json();
    if (!r.ok) throw new Error(j.error ? j.error.message : r.statusText);
    $('model').textContent = j.data[0].id;
    $('model').dataset.ready = 'true';
  } catch (e) {
    $('model').textContent = 'model unavailable: ' + e.message;
    setTimeout(loadModel, 2000);  // e.g. still loading (503)
  }
}

function addMessage(role, text) {
  const el = document.createElement('div');
  el.className = 'message ' + role;
  const label = document.createElement('span');
  label.className = 'role';
  label.textContent = role;
  el.appendChild(label);
  if (role === 'assistant') {
    const details = document.createElement('details');
    details.className = 'reasoning';
    details.hidden = true;  // shown once reasoning arrives; stays collapsed unless opened
    const summary = document.createElement('summary');
    summary.textContent = 'Reasoning';
    const body = document.createElement('div');
    body.className = 'reasoning-text';
    details.append(summary, body);
    el.appendChild(details);
  }
  const content = document.createElement('div');
  content.className = 'content';
  content.textContent = text || '';
  el.appendChild(content);
  $('messages').appendChild(el);
  el.scrollIntoView({ block: 'end' });
  return el;
}

function note(el, text) {
  const n = document.createElement('span');
  n.className = 'note';
  n.textContent = text;
  el.appendChild(n);
}

function requestBody() {
  const messages = [];
  const system = $('system').value.trim();
  if (system) messages.push({ role: 'system', content: system });
  messages.push(...history);
  const body = {
    model: $('model').textContent,
    messages,
    stream: true,
    stream_options: { include_usage: true },
    temperature: Number($('temperature').value),
    max_tokens: Number($('max-tokens').value) || 512,
  };
  if ($('think').checked) body.chat_template_kwargs = { enable_thinking: true };
  const extra = $('extra').value.trim();
  if (extra) Object.assign(body, JSON.parse(extra));  // a syntax error is reported by send()
  return body;
}

// Lets the page handle input (a Stop click) and paint. A fast server can have the whole answer
// buffered already; reader.read() then resolves as a microtask, and a loop over it would keep the
// main thread until the last event, so a click on Stop would land only after the end. A message to
// ourselves is a task the browser runs after pending input, and unlike setTimeout it is not slowed
// to one a second (or a minute) in a background tab, where the reply must keep being read.
const yieldChannel = new MessageChannel();
const yieldWaiting = [];
yieldChannel.port1.onmessage = () => yieldWaiting.shift()();
const nextTask = () => new Promise((resolve) => {
  yieldWaiting.push(resolve);
  yieldChannel.port2.postMessage(null);
});

// Reads an SSE body: calls onData(payload) for every "data: ..." event, yielding to the event loop
// after each network read.
async function readEvents(response, onData) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let start = 0, end;
    while ((end = buf.indexOf('\n\n', start)) >= 0) {
      for (const line of buf.slice(start, end).split('\n'))
        if (line.startsWith('data: ')) onData(line.slice(6));
      start = end + 2;
    }
    buf = buf.slice(start);
    await nextTask();
  }
}

// Appends streamed text to an element through one text node (no re-parse of what is there) and
// scrolls the message into view once per frame rather than once per chunk (each scroll forces a
// layout of the whole conversation).
function textSink(target, scrollEl) {
  const node = document.createTextNode('');
  target.appendChild(node);
  let scrollPending = false;
  return (text) => {
    node.appendData(text);
    if (scrollEl && !scrollPending) {
      scrollPending = true;
      requestAnimationFrame(() => {
        scrollPending = false;
        scrollEl.scrollIntoView({ block: 'end' });
      });
    }
  };
}

async function send(text) {
  const mine = epoch;
  let body;
  history.push({ role: 'user', content: text });
  addMessage('user', text);
  const el = addMessage('assistant', '');
  const content = el.querySelector('.content');
  const details = el.querySelector('details.reasoning');
  const reasoning = el.querySelector('.reasoning-text');
  const addContent = textSink(content, el);
  const addReasoning = textSink(reasoning, null);
  el.dataset.state = 'streaming';
  el.dataset.chunks = '0';
  try {
    body = requestBody();
  } catch (e) {
    el.dataset.state = 'error';
    el.classList.add('error');
    content.textContent = 'Extra request fields are not valid JSON: ' + e.message;
    history.pop();
    return;
  }
  controller = new AbortController();
  $('send').disabled = true;
  $('stop').disabled = false;
  setStatus('generating…');
  const t0 = performance.now();
  let usage = null, finish = null;
  try {
    const r = await fetch('/v1/chat/completions', {
      method: 'POST', headers: headers(), body: JSON.stringify(body), signal: controller.signal,
    });
    if (!r.ok) {
      let message = r.status + ' ' + r.statusText;
      try { message = (await r.json()).error.message; } catch (_) { /* not JSON */ }
      if (r.status === 429) message += ' (retry in ' + (r.headers.get('Retry-After') || '1') + ' s)';
      throw new Error(message);
    }
    await readEvents(r, (data) => {
      if (data === '[DONE]') return;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.usage) usage = chunk.usage;
      const choice = chunk.choices && chunk.choices[0];
      if (!choice) return;
      const d = choice.delta || {};
      if (d.reasoning_content) {
        details.hidden = false;
        addReasoning(d.reasoning_content);
        el.dataset.chunks = String(Number(el.dataset.chunks) + 1);
      }
      if (d.content) {
        addContent(d.content);
        el.dataset.chunks = String(Number(el.dataset.chunks) + 1);
      }
      if (choice.finish_reason) finish = choice.finish_reason;
    });
    el.dataset.state = 'done';
  } catch (e) {
    if (e.name === 'AbortError') {
      el.dataset.state = 'stopped';
      note(el, 'stopped');
    } else {
      el.dataset.state = 'error';
      el.classList.add('error');
      note(el, 'error: ' + e.message);
    }
  } finally {
    controller = null;
    $('send').disabled = false;
    $('stop').disabled = true;
  }
  if (mine === epoch) history.push({ role: 'assistant', content: content.textContent });
  const seconds = (performance.now() - t0) / 1000;
  if (usage) {
    const cached = usage.prompt_tokens_details ? usage.prompt_tokens_details.cached_tokens : 0;
    note(el, `${usage.completion_tokens} tokens in ${seconds.toFixed(1)} s · prompt ${usage.prompt_tokens} ` +
      `(${cached} cached)` + (finish ? ' · ' + finish : ''));
  }
  setStatus('');
}

$('composer').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const text = $('input').value.trim();
  if (!text || controller) return;
  $('input').value = '';
  send(text);
});
$('input').addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey) {
    ev.preventDefault();
    $('composer').requestSubmit();
  }
});
$('stop').addEventListener('click', () => { if (controller) controller.abort(); });
$('clear').addEventListener('click', () => {
  if (controller) controller.abort();
  epoch++;
  history.length = 0;
  $('messages').textContent = '';
  $('input').focus();
});
for (const id of settings) $(id).addEventListener('input', saveSettings);

loadSettings();
loadModel();
$('input').focus();
