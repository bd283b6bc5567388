'use strict';
// The timeline of a run, as `agentry view` draws it: one lane per agent of
// the tree (per run id in the stream), its steps on a time axis, each step's
// calls coloured by outcome; under them the budget, draining. Fed one event
// at a time by run.js; drawn at most once a frame.

const OUTCOMES = ['ok', 'refused', 'cancelled', 'bad_call', 'transient', 'failed'];

class Timeline {
  constructor(lanesBox, budgetBox, legend, onPick) {
    this.lanesBox = lanesBox;
    this.budgetBox = budgetBox;
    this.onPick = onPick;
    this.lanes = new Map();
    this.clock = 0;
    this.budget = null;
    this.selected = null;
    this.colors = {};
    const style = getComputedStyle(document.documentElement);
    for (const name of OUTCOMES.concat(['model', 'input', 'accent', 'line'])) {
      this.colors[name] = style.getPropertyValue('--' + name).trim() || '#888';
    }
    lanesBox.replaceChildren();
    budgetBox.replaceChildren();
    legend.replaceChildren(...OUTCOMES.concat(['model']).map((name) => {
      const item = el('li', null);
      item.appendChild(el('i', name));
      item.appendChild(document.createTextNode(name === 'model' ? 'model step' : name.replace('_', ' ')));
      return item;
    }));
  }

  lane(runId) {
    let lane = this.lanes.get(runId);
    if (lane) return lane;
    const row = el('div', 'lane-row');
    const name = el('div', 'name', runId);
    name.title = runId;
    const canvas = el('canvas');
    canvas.tabIndex = 0;
    canvas.setAttribute('role', 'img');
    canvas.setAttribute('aria-label', 'steps of ' + runId + '; arrow keys pick a step');
    row.appendChild(name);
    row.appendChild(canvas);
    this.lanesBox.appendChild(row);
    lane = { runId, canvas, nameBox: name, label: runId, steps: [], byNumber: new Map() };
    canvas.addEventListener('click', (e) => this.click(lane, e));
    canvas.addEventListener('keydown', (e) => this.key(lane, e));
    this.lanes.set(runId, lane);
    return lane;
  }

  /** The step `number` of lane `runId`, made when first seen. */
  step(runId, number) {
    const lane = this.lane(runId);
    let step = lane.byNumber.get(number);
    if (!step) {
      step = { runId, number, t0: this.clock, t1: null, decision: null, calls: [], callById: new Map(), interrupted: null, index: lane.steps.length };
      const last = lane.steps[lane.steps.length - 1];
      if (last && last.t1 === null) last.t1 = this.clock;
      lane.steps.push(step);
      lane.byNumber.set(number, step);
    }
    return step;
  }

  call(step, id, tool) {
    let call = step.callById.get(id);
    if (!call) {
      call = { id, tool, result: null, attempts: 0 };
      step.calls.push(call);
      step.callById.set(id, call);
    }
    return call;
  }

  /** Takes one event record (`{run_id, seq, event}`) into the model. */
  add(record) {
    const e = record.event || {};
    const runId = record.run_id || '';
    // The service stamps each event as it logs it: the axis is that clock,
    // from the first event shown; the budget's elapsed time is the fallback.
    if (typeof record.at_ms === 'number') {
      if (this.origin === undefined) this.origin = record.at_ms;
      this.stamped = true;
      this.clock = Math.max(this.clock, record.at_ms - this.origin);
    }
    switch (e.type) {
      case 'step_started': this.step(runId, e.step); break;
      case 'decision_made': this.step(runId, e.step).decision = e.decision; break;
      case 'tool_call_started': {
        const call = this.call(this.step(runId, e.step), e.tool_call_id, e.tool);
        call.attempts = Math.max(call.attempts, e.attempt || 1);
        break;
      }
      case 'tool_call_finished': {
        const result = e.result || {};
        this.call(this.step(runId, e.step), result.tool_call_id, result.tool).result = result;
        this.children(runId, e.step, result);
        break;
      }
      case 'step_interrupted': this.step(runId, e.step).interrupted = e.interrupted; break;
      case 'budget_spent':
        this.budget = e.budget;
        if (!this.stamped && e.budget && e.budget.elapsed_ms > this.clock) this.clock = e.budget.elapsed_ms;
        break;
      case 'run_stopped': {
        const lane = this.lane(runId);
        const last = lane.steps[lane.steps.length - 1];
        if (last && last.t1 === null) last.t1 = this.clock;
        lane.stopped = true;
        break;
      }
      default: break;
    }
  }

  /**
   * A child's lane, as `agentry view` draws it from its parent: the stream
   * carries the root's events only, so a child is known by its
   * `agent.spawn` result (when it started) and the first result holding its
   * outcome (`child_id` and `stop_reason`, as `agent.wait` gives it).
   */
  children(parentId, stepNumber, result) {
    if (!result.ok || !result.data) return;
    if (result.tool === 'agent.spawn' && typeof result.data.child_id === 'string') {
      const lane = this.lane(result.data.child_id);
      lane.child = lane.child || { parent: parentId, start: this.clock, end: null, outcome: null, step: stepNumber };
      // The name the model gave it, from the spawning call's arguments.
      const step = this.stepOf(parentId, stepNumber);
      const calls = step && step.decision && step.decision.calls ? step.decision.calls : [];
      const spawn = calls.find((c) => c.id === result.tool_call_id);
      if (spawn && spawn.arguments && typeof spawn.arguments.name === 'string') {
        lane.label = spawn.arguments.name;
        lane.nameBox.textContent = '└ ' + spawn.arguments.name;
      }
      return;
    }
    for (const outcome of childOutcomes(result.data, [])) {
      const lane = this.lanes.get(outcome.child_id);
      if (lane && lane.child && lane.child.end === null) {
        lane.child.end = this.clock;
        lane.child.outcome = outcome;
      }
    }
  }

  stepOf(runId, number) {
    const lane = this.lanes.get(runId);
    return lane ? lane.byNumber.get(number) || null : null;
  }

  /** The axis: time when the budget told it, else step numbers. */
  scale() {
    let end = this.clock;
    let steps = 0;
    for (const lane of this.lanes.values()) steps = Math.max(steps, lane.steps.length);
    return end > 0 ? { byTime: true, end } : { byTime: false, end: Math.max(steps, 1) };
  }

  span(step, scale) {
    if (!scale.byTime) return [step.index, step.index + 1];
    const t1 = step.t1 === null ? this.clock : step.t1;
    return [step.t0, Math.max(t1, step.t0)];
  }

  draw() {
    const scale = this.scale();
    for (const lane of this.lanes.values()) this.drawLane(lane, scale);
    this.drawBudget();
  }

  drawLane(lane, scale) {
    const canvas = lane.canvas;
    const ratio = window.devicePixelRatio || 1;
    const width = Math.max(1, canvas.clientWidth);
    const height = Math.max(1, canvas.clientHeight);
    if (canvas.width !== Math.round(width * ratio)) canvas.width = Math.round(width * ratio);
    if (canvas.height !== Math.round(height * ratio)) canvas.height = Math.round(height * ratio);
    const g = canvas.getContext('2d');
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, width, height);
    const x = (v) => (v / scale.end) * width;
    lane.hits = [];
    if (lane.steps.length === 0 && lane.child) {
      this.drawChild(lane, g, x, height, scale);
      return;
    }
    for (const step of lane.steps) {
      const [a, b] = this.span(step, scale);
      const x0 = x(a);
      const w = Math.max(2, x(b) - x0 - 1);
      lane.hits.push([x0, x0 + w, step]);
      g.fillStyle = this.colors.model;
      g.fillRect(x0, 3, w, height / 2 - 3);
      const n = step.calls.length;
      step.calls.forEach((call, i) => {
        g.fillStyle = call.result ? this.colors[outcomeClass(call.result)] : this.colors.line;
        g.fillRect(x0 + (w * i) / n, height / 2 + 1, Math.max(1, w / n - (n > 1 ? 1 : 0)), height / 2 - 4);
      });
      if (this.selected === step) {
        g.strokeStyle = this.colors.accent;
        g.lineWidth = 2;
        g.strokeRect(x0 - 1, 1, w + 2, height - 2);
      }
    }
  }

  /** A child known only from its parent: one bar, from spawn to outcome. */
  drawChild(lane, g, x, height, scale) {
    const child = lane.child;
    let a, b;
    if (scale.byTime) {
      a = child.start;
      b = child.end === null ? this.clock : child.end;
    } else {
      const parent = this.lanes.get(child.parent);
      const spawned = parent ? parent.byNumber.get(child.step) : null;
      a = spawned ? spawned.index : 0;
      b = child.end === null ? scale.end : a + 1;
    }
    const x0 = x(a);
    const w = Math.max(2, x(b) - x0);
    const reason = child.outcome ? child.outcome.stop_reason : null;
    g.fillStyle = reason === null ? this.colors.model : reason === 'done' ? this.colors.ok : this.colors.failed;
    g.fillRect(x0, 3, w, height - 6);
    const label = reason === null ? 'running' : reason + (child.outcome.steps !== undefined ? ', ' + child.outcome.steps + ' steps' : '');
    lane.canvas.setAttribute('aria-label', 'child agent ' + lane.label + ': ' + label);
    lane.canvas.title = label;
  }

  drawBudget() {
    const b = this.budget;
    if (!b) return;
    const limits = b.limits || {}, spent = b.spent || {};
    const rows = [
      ['steps', spent.steps, limits.max_steps],
      ['tool calls', spent.tool_calls, limits.max_tool_calls],
      ['tokens', (spent.tokens_in || 0) + (spent.tokens_out || 0), limits.max_tokens],
      ['cost (µ$)', spent.cost_micros, limits.max_cost_micros],
      ['time (ms)', b.elapsed_ms, limits.deadline_ms],
    ].filter((r) => r[2] !== undefined && r[2] !== null);
    const meters = rows.map(([name, used, limit]) => {
      const left = Math.max(0, 1 - (used || 0) / limit);
      const row = el('div', 'meter');
      row.appendChild(el('span', null, name + ' left'));
      const track = el('div', 'track');
      track.setAttribute('role', 'meter');
      track.setAttribute('aria-label', name + ' left');
      track.setAttribute('aria-valuemin', '0');
      track.setAttribute('aria-valuemax', String(limit));
      track.setAttribute('aria-valuenow', String(Math.max(0, limit - (used || 0))));
      const fill = el('div', 'fill' + (left === 0 ? ' out' : left < 0.2 ? ' low' : ''));
      fill.style.width = (left * 100).toFixed(1) + '%';
      track.appendChild(fill);
      row.appendChild(track);
      row.appendChild(el('span', 'val mono', (used || 0) + ' / ' + limit));
      return row;
    });
    this.budgetBox.replaceChildren(...meters);
  }

  click(lane, event) {
    const rect = lane.canvas.getBoundingClientRect();
    const px = event.clientX - rect.left;
    const hits = lane.hits || [];
    let best = null, distance = Infinity;
    for (const [x0, x1, step] of hits) {
      const d = px < x0 ? x0 - px : px > x1 ? px - x1 : 0;
      if (d < distance) { distance = d; best = step; }
    }
    if (best && distance <= 6) this.onPick(best);
  }

  key(lane, event) {
    if (event.key !== 'ArrowLeft' && event.key !== 'ArrowRight') return;
    event.preventDefault();
    const at = this.selected && this.selected.runId === lane.runId ? this.selected.index : -1;
    const next = event.key === 'ArrowRight' ? at + 1 : at - 1;
    const step = lane.steps[Math.max(0, Math.min(lane.steps.length - 1, next))];
    if (step) this.onPick(step);
  }

  /** Every step, of every lane, for tests and the benchmark. */
  stepCount() {
    let n = 0;
    for (const lane of this.lanes.values()) n += lane.steps.length;
    return n;
  }
}

/** Every child outcome (`child_id` with `stop_reason`) in a result's data. */
function childOutcomes(data, out) {
  if (Array.isArray(data)) {
    for (const item of data) childOutcomes(item, out);
  } else if (data !== null && typeof data === 'object') {
    if (typeof data.child_id === 'string' && data.stop_reason !== undefined) {
      out.push(data);
    } else {
      for (const value of Object.values(data)) childOutcomes(value, out);
    }
  }
  return out;
}
