'use strict';
// One run, live: its facts and pending approvals (GET /runs/{id}), its events
// as they happen (the stream, read by api.js), the timeline (lanes.js), and
// the inputs a client can send. Each action the page takes is matched to the
// event it produced, which is marked in the list.

const LIST_WINDOW = 300;
const REFRESH_MS = 150;

class RunView {
  constructor(id) {
    this.id = id;
    this.base = '/runs/' + encodeURIComponent(id);
    this.records = [];
    this.rendered = 0;
    this.showAll = false;
    this.pending = [];
    this.mine = new Map();
    // Parked calls' arguments as the stream gave them: redacted, as every
    // event a listener gets is (the run's view may hold them as they are).
    this.parked = new Map();
    // What a parked call would do (its effect, a diff), as its event said.
    this.impacts = new Map();
    this.frame = 0;
    this.refreshTimer = null;
    this.refreshing = false;
    this.closed = false;
    this.selectedSeq = null;
    this.timeline = new Timeline($('lanes'), $('budget'), $('legend'), (step) => this.pick(step));
    // Read by the browser tests and the benchmark.
    window.consoleRun = this;
  }

  start() {
    $('run-id').textContent = this.id;
    $('run-status').textContent = '…';
    $('run-status').className = 'badge';
    $('run-facts').replaceChildren();
    $('events').replaceChildren();
    $('events-count').textContent = '';
    $('approvals').replaceChildren(el('p', 'muted', 'None.'));
    $('decisions').replaceChildren();
    $('decisions-panel').hidden = true;
    $('act-result').textContent = '';
    $('step-detail').replaceChildren(el('p', 'muted', 'Pick a step in the timeline or the events.'));
    $('events-older').hidden = true;
    $('events-older').onclick = () => { this.showAll = true; this.rendered = 0; $('events').replaceChildren(); this.schedule(); };
    $('message-form').onsubmit = (e) => { e.preventDefault(); this.message(); };
    $('redirect').onclick = () => this.redirect();
    $('pause').onclick = () => this.interrupt('pause');
    $('resume').onclick = () => this.interrupt('resume');
    $('abort').onclick = () => this.interrupt('abort');
    this.resize = () => this.schedule();
    window.addEventListener('resize', this.resize);
    this.refresh();
    this.stream = new EventStream(this.id, (seq, type, record) => this.onEvent(seq, type, record),
      (state) => { $('run-stream').textContent = 'stream: ' + state; });
    this.stream.run();
  }

  close() {
    this.closed = true;
    if (this.stream) this.stream.close();
    if (this.refreshTimer) clearTimeout(this.refreshTimer);
    if (this.frame) cancelAnimationFrame(this.frame);
    window.removeEventListener('resize', this.resize);
    if (window.consoleRun === this) window.consoleRun = null;
  }

  onEvent(seq, type, record) {
    this.records.push({ seq, type, record });
    this.timeline.add(record);
    const e = record.event || {};
    if ((type === 'awaiting_approval' || type === 'awaiting_decision') && e.call) this.parkedCall(e.call, e);
    this.match(seq, type, record.event || {});
    switch (type) {
      case 'awaiting_approval': case 'awaiting_decision': case 'run_stopped':
      case 'input_applied': case 'step_started': case 'step_interrupted':
        this.refreshSoon();
        break;
      default: break;
    }
    this.schedule();
  }

  schedule() {
    if (this.frame || this.closed) return;
    this.frame = requestAnimationFrame(() => { this.frame = 0; this.render(); });
  }

  render() {
    this.renderEvents();
    this.timeline.draw();
  }

  // ---- Facts, approvals, decisions ---------------------------------------

  refreshSoon() {
    if (this.refreshTimer) return;
    this.refreshTimer = setTimeout(() => { this.refreshTimer = null; this.refresh(); }, REFRESH_MS);
  }

  async refresh() {
    if (this.refreshing) { this.refreshSoon(); return; }
    this.refreshing = true;
    try {
      const view = await api.get(this.base);
      if (!this.closed) this.renderView(view);
    } catch (e) {
      if (e.status === 404) setStatus('No run ' + this.id + ' for this tenant.', true);
      else if (e.status !== 401) setStatus('Run: ' + e.message, true);
    } finally {
      this.refreshing = false;
    }
  }

  renderView(view) {
    this.view = view;
    const outcome = view.outcome || null;
    const badge = $('run-status');
    badge.textContent = view.status + (outcome ? ': ' + outcome.stop_reason : '');
    badge.className = 'badge ' + view.status + (outcome && outcome.stop_reason === 'done' ? ' done' : '');
    const facts = [
      ['Agent', view.agent || '—'], ['Model', view.model || '—'],
      ['Steps', view.steps], ['Tool calls', view.tool_calls], ['Inputs', view.inputs],
    ];
    if (view.position !== undefined) facts.push(['Queue position', view.position]);
    if (outcome) {
      facts.push(['Stop reason', outcome.stop_reason]);
      if (outcome.answer) facts.push(['Answer', outcome.answer]);
      if (outcome.detail) facts.push(['Detail', outcome.detail]);
    }
    $('run-facts').replaceChildren(...facts.filter((f) => f[1] !== undefined).map(([name, value]) => {
      const div = el('div');
      div.appendChild(el('dt', null, name));
      div.appendChild(el('dd', null, value));
      return div;
    }));
    // A stopped run takes no more inputs.
    for (const id of ['send-message', 'redirect', 'pause', 'resume', 'abort']) $(id).disabled = view.status === 'stopped';
    this.renderApprovals(view.pending_approvals || []);
    this.renderDecisions(view.pending_decisions || []);
  }

  renderApprovals(approvals) {
    const box = $('approvals');
    const shown = new Set(Array.from(box.querySelectorAll('.approval')).map((n) => n.dataset.callId));
    const wanted = new Set(approvals.map((a) => a.call.id));
    if (shown.size === wanted.size && [...wanted].every((id) => shown.has(id))) return;
    if (approvals.length === 0) { box.replaceChildren(el('p', 'muted', 'None.')); return; }
    box.replaceChildren(...approvals.map((a) => this.approvalCard(a)));
  }

  approvalCard(pending) {
    const call = pending.call;
    const card = el('div', 'approval');
    card.dataset.callId = call.id;
    const head = el('p');
    head.appendChild(el('b', null, call.name));
    head.appendChild(document.createTextNode(' — call ' + call.id + ', step ' + pending.step));
    card.appendChild(head);
    card.appendChild(el('pre', 'arguments', this.argumentsOf(call)));
    const impact = this.impacts.get(call.id) || pending;
    card.appendChild(el('p', 'effect', 'Effect: ' + (impact.effect || 'not known')));
    // A remote A2A agent's question (`input_required = "human"`) parks as an
    // approval whose preview is the question: it is answered, not approved.
    const asked = 'question from the remote agent: ';
    const question = impact.preview && impact.preview.startsWith(asked) ? impact.preview.slice(asked.length) : null;
    if (question !== null) {
      card.appendChild(el('p', 'preview-label', 'The remote agent asks:'));
      card.appendChild(el('pre', 'question', question));
    } else if (impact.preview) {
      card.appendChild(el('p', 'preview-label', 'What it would write:'));
      card.appendChild(diffBlock(impact.preview));
    }
    const form = el('form');
    const label = el('label', null, question !== null ? 'Your answer (or a reason, sent with a deny)' : 'Reason (sent with a deny)');
    const input = el('input');
    input.type = 'text';
    input.id = 'reason-' + call.id;
    label.htmlFor = input.id;
    form.appendChild(label);
    form.appendChild(input);
    const buttons = el('div', 'buttons');
    const approve = el('button', 'approve', 'Approve');
    approve.type = 'submit';
    const deny = el('button', 'deny danger', 'Deny');
    deny.type = 'button';
    if (question !== null) {
      const answer = el('button', 'answer', 'Answer');
      answer.type = 'button';
      answer.onclick = () => this.decide(call.id, 'answer', input.value);
      buttons.appendChild(answer);
    }
    buttons.appendChild(approve);
    buttons.appendChild(deny);
    form.appendChild(buttons);
    form.onsubmit = (e) => { e.preventDefault(); this.decide(call.id, 'approve', input.value); };
    deny.onclick = () => this.decide(call.id, 'deny', input.value);
    card.appendChild(form);
    return card;
  }

  parkedCall(call, event) {
    this.parked.set(call.id, call.arguments);
    if (event.effect || event.preview) this.impacts.set(call.id, { effect: event.effect, preview: event.preview });
    for (const card of document.querySelectorAll('.approval, .decision')) {
      if (card.dataset.callId === call.id) card.querySelector('pre.arguments').textContent = this.argumentsOf(call);
    }
  }

  argumentsOf(call) {
    if (!this.parked.has(call.id)) return '(shown once the event stream brings them, redacted)';
    return JSON.stringify(this.parked.get(call.id), null, 2);
  }

  renderDecisions(decisions) {
    $('decisions-panel').hidden = decisions.length === 0;
    $('decisions').replaceChildren(...decisions.map((d) => {
      const card = el('div', 'decision');
      card.dataset.callId = d.call.id;
      const head = el('p');
      head.appendChild(el('b', null, d.call.name));
      head.appendChild(document.createTextNode(' — call ' + d.call.id + ', step ' + d.step + ': did it take effect?'));
      card.appendChild(head);
      card.appendChild(el('pre', 'arguments', this.argumentsOf(d.call)));
      const buttons = el('div', 'buttons');
      for (const [choice, text] of [['happened', 'It happened'], ['retry', 'Retry it'], ['skip', 'Skip it']]) {
        const b = el('button', 'secondary', text);
        b.type = 'button';
        b.onclick = () => this.settle(d.call.id, choice);
        buttons.appendChild(b);
      }
      card.appendChild(buttons);
      return card;
    }));
  }

  // ---- Actions -----------------------------------------------------------

  async act(what, path, body, expect) {
    const result = $('act-result');
    // Waiting before the answer: the stream may bring the event first.
    const action = { what, expect };
    this.pending.push(action);
    try {
      const reply = await api.post(this.base + path, body);
      if (this.mine.size > 0 && !this.pending.includes(action)) return reply;
      result.textContent = what + ': sent; waiting for its event…';
      setStatus(what + ' sent.');
      this.refreshSoon();
      return reply;
    } catch (e) {
      this.pending = this.pending.filter((p) => p !== action);
      result.textContent = what + ' refused: ' + e.message;
      setStatus(what + ' refused: ' + e.message, true);
      return null;
    }
  }

  decide(callId, decision, reason) {
    const body = { decision };
    if (decision === 'deny' && reason && reason.trim()) body.reason = reason.trim();
    if (decision === 'answer') body.answer = (reason || '').trim();
    const expect = (type, e) => type === 'input_applied' && e.input && e.input.type === 'approval' && e.input.tool_call_id === callId;
    const verb = { approve: 'Approve ', deny: 'Deny ', answer: 'Answer ' }[decision];
    return this.act(verb + callId,
      '/approvals/' + encodeURIComponent(callId), body, expect).then((reply) => {
      // Decided: the card goes before the next view says so.
      if (reply) this.dropCard('.approval', callId);
      return reply;
    });
  }

  dropCard(selector, callId) {
    for (const card of $('approvals').querySelectorAll(selector)) {
      if (card.dataset.callId === callId) card.remove();
    }
    if (!$('approvals').querySelector('.approval')) $('approvals').replaceChildren(el('p', 'muted', 'None.'));
  }

  settle(callId, decision) {
    const expect = (type, e) => type === 'input_applied' && e.input && JSON.stringify(e.input).includes(callId);
    return this.act('Settle ' + callId + ' (' + decision + ')', '/decisions/' + encodeURIComponent(callId), { decision }, expect);
  }

  message() {
    const text = $('message-text').value;
    if (!text.trim()) return;
    const expect = (type, e) => type === 'input_applied' && e.input && e.input.type === 'message' && e.input.text === text;
    this.act('Message', '/messages', { text }, expect).then((r) => { if (r) $('message-text').value = ''; });
  }

  redirect() {
    const text = $('message-text').value;
    if (!text.trim()) { $('act-result').textContent = 'A redirect needs a message: write it above.'; $('message-text').focus(); return; }
    const expect = (type, e) => (type === 'input_applied' && e.input && e.input.type === 'interrupt') || type === 'step_interrupted';
    this.act('Redirect', '/interrupt', { action: 'redirect', message: text }, expect).then((r) => { if (r) $('message-text').value = ''; });
  }

  interrupt(action) {
    const expect = (type, e) => (action === 'abort' ? type === 'run_stopped'
      : type === 'input_applied' && e.input && e.input.type === action);
    const name = action.charAt(0).toUpperCase() + action.slice(1);
    return this.act(name, '/interrupt', { action }, expect);
  }

  /** Marks the event an action of this page produced. */
  match(seq, type, event) {
    const i = this.pending.findIndex((p) => p.expect(type, event));
    if (i < 0) return;
    const [action] = this.pending.splice(i, 1);
    this.mine.set(seq, action.what);
    const text = action.what + ' → event #' + seq + ' (' + type + ')';
    $('act-result').textContent = text;
    setStatus(text);
  }

  // ---- Events and steps --------------------------------------------------

  listed() {
    // Token deltas are folded into their step: a long answer sends many.
    return this.records.filter((r) => r.type !== 'token_delta');
  }

  renderEvents() {
    const list = $('events');
    const items = this.listed();
    $('events-count').textContent = '(' + this.records.length + ')';
    const from = this.showAll ? 0 : Math.max(0, items.length - LIST_WINDOW);
    if (this.rendered < from) {
      list.replaceChildren();
      this.rendered = from;
    }
    const nearBottom = list.scrollTop + list.clientHeight >= list.scrollHeight - 40;
    const fragment = document.createDocumentFragment();
    for (let i = this.rendered; i < items.length; i++) fragment.appendChild(this.eventItem(items[i]));
    list.appendChild(fragment);
    this.rendered = items.length;
    while (!this.showAll && list.children.length > LIST_WINDOW) list.removeChild(list.firstChild);
    $('events-older').hidden = this.showAll || from === 0;
    for (const [seq] of this.mine) {
      const item = list.querySelector('li[data-seq="' + seq + '"]');
      if (item) item.classList.add('mine');
    }
    if (nearBottom) list.scrollTop = list.scrollHeight;
  }

  eventItem(r) {
    const li = el('li');
    li.dataset.seq = String(r.seq);
    li.dataset.type = r.type;
    const button = el('button');
    button.type = 'button';
    button.appendChild(el('span', 'seq', '#' + r.seq));
    const what = el('span', 'what');
    const e = r.record.event || {};
    if (r.type === 'tool_call_finished' && e.result) {
      const cls = outcomeClass(e.result);
      what.appendChild(el('span', 'chip ' + cls, e.result.ok ? 'ok' : (e.result.error && e.result.error.code) || 'error'));
      what.appendChild(document.createTextNode(' '));
    }
    what.appendChild(el('b', null, r.type.replace(/_/g, ' ')));
    const summary = describe(r.type, e);
    if (summary) what.appendChild(document.createTextNode(' ' + summary));
    button.appendChild(what);
    button.onclick = () => {
      const step = e.step !== undefined ? this.timeline.stepOf(r.record.run_id, e.step) : null;
      if (step) this.pick(step); else this.showEvent(r);
    };
    li.appendChild(button);
    return li;
  }

  pick(step) {
    this.timeline.selected = step;
    this.schedule();
    const box = $('step-detail');
    const parts = [el('h3', null, 'Step ' + step.number + (this.timeline.lanes.size > 1 ? ' of ' + step.runId : ''))];
    const d = step.decision;
    parts.push(el('h4', null, 'Decision'));
    parts.push(d ? el('pre', null, JSON.stringify(d, null, 2)) : el('p', 'muted', 'none yet'));
    parts.push(el('h4', null, 'Calls and results'));
    if (step.calls.length === 0) parts.push(el('p', 'muted', 'no calls'));
    for (const call of step.calls) {
      const div = el('div', 'call');
      const head = el('p');
      head.appendChild(el('span', 'chip ' + (call.result ? outcomeClass(call.result) : 'cancelled'), call.result ? (call.result.ok ? 'ok' : (call.result.error || {}).code || 'error') : 'running'));
      head.appendChild(document.createTextNode(' ' + call.tool + ' (' + call.id + ')' + (call.attempts > 1 ? ', attempt ' + call.attempts : '')));
      div.appendChild(head);
      if (call.result) div.appendChild(el('pre', null, JSON.stringify(call.result.ok ? call.result.data : call.result.error, null, 2)));
      parts.push(div);
    }
    if (step.interrupted) {
      parts.push(el('h4', null, 'Interrupted'));
      parts.push(el('pre', null, JSON.stringify(step.interrupted, null, 2)));
    }
    parts.push(el('h4', null, 'State changes'));
    const changes = stepChanges(this.records, step);
    if (changes.length === 0) {
      parts.push(el('p', 'muted', 'none recorded yet'));
    } else {
      const table = el('table', 'changes');
      const head = el('tr');
      for (const h of ['field', 'before', 'after']) head.appendChild(el('th', null, h));
      table.appendChild(head);
      for (const c of changes) {
        const row = el('tr');
        row.appendChild(el('td', null, c.field));
        row.appendChild(el('td', null, c.before));
        row.appendChild(el('td', null, c.after));
        table.appendChild(row);
      }
      parts.push(table);
    }
    box.replaceChildren(...parts);
  }

  showEvent(r) {
    $('step-detail').replaceChildren(el('h3', null, 'Event #' + r.seq + ' (' + r.type + ')'), el('pre', null, JSON.stringify(r.record, null, 2)));
  }
}

/** A short line for an event, after its type. */
function describe(type, e) {
  switch (type) {
    case 'step_started': return 'step ' + e.step;
    case 'decision_made': {
      const d = e.decision || {};
      if (d.calls) return 'step ' + e.step + ': call ' + d.calls.map((c) => c.name).join(', ');
      if (d.answer !== undefined) return 'step ' + e.step + ': final answer';
      return 'step ' + e.step + ': ' + (d.type || '');
    }
    case 'tool_call_started': return e.tool + ' (' + e.tool_call_id + ')' + (e.attempt > 1 ? ' attempt ' + e.attempt : '');
    case 'tool_call_finished': {
      const r = e.result || {};
      return r.tool + ' (' + r.tool_call_id + ')' + (r.ok ? '' : ': ' + ((r.error || {}).message || ''));
    }
    case 'budget_spent': {
      const s = (e.budget || {}).spent || {};
      return s.steps + ' steps, ' + s.tool_calls + ' calls';
    }
    case 'input_applied': {
      const i = e.input || {};
      if (i.type === 'message') return 'message: ' + i.text;
      if (i.type === 'interrupt') return 'interrupt' + (i.text ? ': ' + i.text : '');
      if (i.type === 'approval') return (i.approved ? 'approved ' : 'denied ') + i.tool_call_id + (i.reason ? ' (' + i.reason + ')' : '');
      if (i.type === 'event') return 'event ' + i.name;
      return i.type || '';
    }
    case 'awaiting_approval': case 'awaiting_decision':
      return e.call ? e.call.name + ' (' + e.call.id + ')' : '';
    case 'step_interrupted': return 'step ' + e.step;
    case 'state_updated': return 'version ' + e.version;
    case 'run_stopped': return e.stop_reason;
    default: return '';
  }
}

// A unified diff as a <pre> whose added and removed lines are marked (the
// leading + and - stay in the text for screen readers and copying).
function diffBlock(text) {
  const pre = el('pre', 'preview');
  for (const line of text.split('\n')) {
    const kind = line.startsWith('+++') || line.startsWith('---') ? 'file'
      : line.startsWith('+') ? 'add' : line.startsWith('-') ? 'del' : line.startsWith('@@') ? 'hunk' : 'ctx';
    pre.appendChild(el('span', 'diff-' + kind, line + '\n'));
  }
  return pre;
}

// What a step changed in its run's state, from the events between its
// `step_started` and the next: the state version, each budget figure spent
// (`budget_spent`), the inputs it applied and the answer it gave.
function stepChanges(records, step) {
  const mine = records.filter((r) => r.record.run_id === step.runId);
  const start = mine.findIndex((r) => r.type === 'step_started' && r.record.event.step === step.number);
  if (start < 0) return [];
  let end = mine.findIndex((r, i) => i > start && r.type === 'step_started');
  if (end < 0) end = mine.length;
  const last = (list, type) => {
    for (let i = list.length - 1; i >= 0; i -= 1) if (list[i].type === type) return list[i].record.event;
    return null;
  };
  const before = mine.slice(0, start);
  const inside = mine.slice(start, end);
  const changes = [];
  const shown = (v) => (v === undefined || v === null ? '—' : typeof v === 'object' ? JSON.stringify(v) : String(v));
  const versionBefore = last(before, 'state_updated');
  const versionAfter = last(inside, 'state_updated');
  if (versionAfter) changes.push({ field: 'state version', before: shown(versionBefore && versionBefore.version), after: shown(versionAfter.version) });
  const spentBefore = (last(before, 'budget_spent') || {}).budget;
  const spentAfter = (last(inside, 'budget_spent') || {}).budget;
  if (spentAfter && spentAfter.spent) {
    const was = (spentBefore && spentBefore.spent) || {};
    for (const [key, value] of Object.entries(spentAfter.spent)) {
      // Before the first spend every figure was nothing.
      const prior = was[key] === undefined && typeof value === 'number' ? 0 : was[key];
      if (JSON.stringify(prior) !== JSON.stringify(value)) changes.push({ field: 'spent.' + key, before: shown(prior), after: shown(value) });
    }
  }
  for (const r of inside) {
    if (r.type === 'input_applied') changes.push({ field: 'input #' + r.record.event.seq, before: '—', after: describe(r.type, r.record.event) });
  }
  for (const call of step.calls) {
    if (call.tool === 'task.finish' && call.result && call.result.ok) changes.push({ field: 'answer', before: '—', after: shown((call.result.data || {}).answer) });
  }
  const decision = step.decision || {};
  if (decision.type === 'final') changes.push({ field: 'answer', before: '—', after: shown(decision.answer) });
  return changes;
}
