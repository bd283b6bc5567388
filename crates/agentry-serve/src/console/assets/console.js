'use strict';
// The console's shell: sign-in, the hash router (#/runs, #/runs/ID), the
// runs list with its filters, pages and polling, the queue and limits, and
// the new-run form. A run's own view is in run.js.

const POLL_MS = 2000;

const shell = {
  view: null,
  runView: null,
  pollTimer: null,
  // Cursors of the pages before the current one; the current page's cursor.
  pages: [],
  cursor: null,
  nextCursor: null,
  agentsLoaded: false,
  // Each listed run's steps and calls, by id.
  spend: new Map(),
};

function $(id) { return document.getElementById(id); }

function setStatus(text, isError) {
  const status = $('status');
  status.textContent = text;
  status.classList.toggle('error', Boolean(isError));
}

function show(view) {
  for (const id of ['signin', 'runs', 'run']) $(id).hidden = id !== view;
  $('sign-out').hidden = view === 'signin';
  shell.view = view;
}

function signInPage(message) {
  stopPolling();
  if (shell.runView) { shell.runView.close(); shell.runView = null; }
  show('signin');
  $('signin-error').textContent = message || '';
  $('token').value = '';
  $('token').focus();
}

async function signIn(event) {
  event.preventDefault();
  const token = $('token').value.trim();
  if (!token) return;
  api.setToken(token);
  try {
    await api.get('/runs?limit=1');
  } catch (e) {
    if (e.status !== 401) { api.forget(); $('signin-error').textContent = e.message; }
    return;
  }
  setStatus('Signed in.');
  shell.agentsLoaded = false;
  if (!location.hash || location.hash === '#' || location.hash === '#/') location.hash = '#/runs';
  else route();
}

function signOut() {
  api.forget();
  // The next tenant starts from the list, not from this one's run.
  history.replaceState(null, '', '#/runs');
  signInPage('Signed out.');
}

function stopPolling() {
  if (shell.pollTimer) clearInterval(shell.pollTimer);
  shell.pollTimer = null;
}

function route() {
  if (!api.token()) { signInPage(); return; }
  const hash = location.hash || '#/runs';
  const match = /^#\/runs\/(.+)$/.exec(hash);
  if (shell.runView) { shell.runView.close(); shell.runView = null; }
  stopPolling();
  if (match) {
    show('run');
    shell.runView = new RunView(decodeURIComponent(match[1]));
    shell.runView.start();
  } else {
    show('runs');
    loadRuns();
    loadAgents();
    shell.pollTimer = setInterval(() => { loadRuns(); loadAgents(); }, POLL_MS);
  }
}

function runsQuery() {
  const params = new URLSearchParams();
  const status = $('filter-status').value;
  const agent = $('filter-agent').value.trim();
  if (status) params.set('status', status);
  if (agent) params.set('agent', agent);
  params.set('limit', '20');
  if (shell.cursor) params.set('cursor', shell.cursor);
  return '/runs?' + params.toString();
}

async function loadRuns() {
  let page;
  try {
    page = await api.get(runsQuery());
  } catch (e) {
    if (e.status !== 401) setStatus('Runs: ' + e.message, true);
    return;
  }
  if (shell.view !== 'runs') return;
  shell.nextCursor = page.next_cursor || null;
  renderRuns(page.runs || []);
  $('page-older').disabled = !shell.nextCursor;
  $('page-newer').disabled = shell.pages.length === 0;
  $('page-label').textContent = 'page ' + (shell.pages.length + 1);
}

function renderRuns(runs) {
  const body = $('runs-body');
  const rows = runs.map((run) => {
    const tr = el('tr');
    tr.dataset.runId = run.run_id;
    const link = el('a', null, run.run_id);
    link.href = '#/runs/' + encodeURIComponent(run.run_id);
    const first = el('td');
    first.appendChild(link);
    tr.appendChild(first);
    const status = el('td');
    status.appendChild(el('span', 'badge ' + run.status, run.status));
    tr.appendChild(status);
    tr.appendChild(el('td', null, run.agent || '—'));
    tr.appendChild(el('td', null, run.model || '—'));
    tr.appendChild(el('td', null, run.stop_reason || '—'));
    const spend = el('td', 'spend', shell.spend.get(run.run_id) || '…');
    tr.appendChild(spend);
    tr.appendChild(el('td', null, run.created_at_ms ? age(run.created_at_ms) : '—'));
    return tr;
  });
  body.replaceChildren(...rows);
  $('runs-empty').hidden = runs.length > 0;
  fillSpend(runs);
}

// The list does not carry spend: each row's comes from the run's own view,
// asked again while it runs and kept once it stopped.
async function fillSpend(runs) {
  const wanted = runs.filter((r) => !(r.status === 'stopped' && shell.spend.has(r.run_id)));
  await Promise.all(wanted.map(async (run) => {
    let view;
    try {
      view = await api.get('/runs/' + encodeURIComponent(run.run_id));
    } catch (e) {
      return;
    }
    if (view.steps === undefined) return;
    shell.spend.set(run.run_id, spendText(view));
  }));
  for (const tr of $('runs-body').children) {
    const text = shell.spend.get(tr.dataset.runId);
    if (text) tr.querySelector('.spend').textContent = text;
  }
}

function pageOlder() {
  if (!shell.nextCursor) return;
  shell.pages.push(shell.cursor);
  shell.cursor = shell.nextCursor;
  loadRuns();
}

function pageNewer() {
  if (shell.pages.length === 0) return;
  shell.cursor = shell.pages.pop();
  loadRuns();
}

function filter(event) {
  event.preventDefault();
  shell.pages = [];
  shell.cursor = null;
  loadRuns();
}

async function loadAgents() {
  let info;
  try {
    info = await api.get('/agents');
  } catch (e) {
    if (e.status !== 401) $('limits').textContent = 'Unavailable: ' + e.message;
    return;
  }
  renderLimits(info);
  if (shell.agentsLoaded) return;
  shell.agentsLoaded = true;
  const select = $('new-agent');
  const options = (info.agents || []).map((a) => {
    const option = el('option', null, a.model ? a.name + ' (' + a.model + ')' : a.name);
    option.value = a.name;
    return option;
  });
  select.replaceChildren(...options);
  $('new-run').querySelector('button').disabled = options.length === 0;
  if (options.length === 0) $('new-result').textContent = 'No agents are configured for this tenant.';
}

function renderLimits(info) {
  const box = $('limits');
  const list = el('dl', 'facts');
  const add = (name, value) => {
    const div = el('div');
    div.appendChild(el('dt', null, name));
    div.appendChild(el('dd', null, value));
    list.appendChild(div);
  };
  const q = info.queue || {};
  add('Running', String(q.running) + (q.max_running ? ' of ' + q.max_running : ''));
  add('Queued', String(q.queued) + ' of ' + q.max_queued);
  for (const m of info.models || []) {
    add('Model ' + m.name, m.in_flight + ' in flight, ' + m.throttled + ' throttled');
  }
  box.replaceChildren(list);
  box.classList.remove('muted');
}

async function readFiles(input) {
  const files = {};
  for (const file of input.files) files[file.name] = await file.text();
  return files;
}

async function newRun(event) {
  event.preventDefault();
  const body = { agent: $('new-agent').value };
  const input = $('new-input').value;
  if (input.trim()) body.input = input;
  const files = await readFiles($('new-files'));
  if (Object.keys(files).length > 0) body.files = files;
  try {
    const created = await api.post('/runs', body);
    $('new-result').textContent = 'Started run ' + created.run_id + '.';
    location.hash = '#/runs/' + encodeURIComponent(created.run_id);
  } catch (e) {
    $('new-result').textContent = 'Not started: ' + e.message;
  }
}

function init() {
  api.onUnauthorized = (message) => signInPage(message);
  $('signin-form').addEventListener('submit', signIn);
  $('sign-out').addEventListener('click', signOut);
  $('filters').addEventListener('submit', filter);
  $('filter-status').addEventListener('change', filter);
  $('page-older').addEventListener('click', pageOlder);
  $('page-newer').addEventListener('click', pageNewer);
  $('new-run').addEventListener('submit', newRun);
  window.addEventListener('hashchange', route);
  route();
}

init();

/** A run's spend as its view gives it: steps, calls, tokens and cost. */
function spendText(view) {
  const parts = [view.steps + ' steps', view.tool_calls + ' calls'];
  const tokens = (view.tokens_in || 0) + (view.tokens_out || 0);
  if (tokens) parts.push(tokens + ' tokens');
  if (view.cost_micros) parts.push((view.cost_micros / 1e6).toFixed(4) + ' cost');
  return parts.join(', ');
}
