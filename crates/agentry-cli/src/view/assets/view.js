// agentry view: draws the trace embedded in #trace-data. Every value from the
// trace reaches the page as text (textContent), never as markup.
(function () {
  "use strict";
  var started = performance.now();
  var DATA = JSON.parse(document.getElementById("trace-data").textContent);
  var LANES = DATA.lanes;
  var ROW_H = 30;
  var COLORS = {};
  var SEVERITY = { ok: 1, model: 2, cancelled: 3, transient: 4, bad_call: 5, refused: 6, failed: 7 };
  var state = { lane: 0, row: -1 };

  // ---- helpers -------------------------------------------------------------
  function el(tag, attrs) {
    var node = document.createElement(tag);
    if (attrs) {
      for (var k in attrs) {
        if (k === "text") node.textContent = attrs[k];
        else if (k === "cls") node.className = attrs[k];
        else node.setAttribute(k, attrs[k]);
      }
    }
    for (var i = 2; i < arguments.length; i++) {
      var c = arguments[i];
      if (c === null || c === undefined) continue;
      node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    }
    return node;
  }
  function ms(v) {
    if (v === null || v === undefined) return "–";
    if (v < 1000) return Math.round(v) + " ms";
    if (v < 60000) return (v / 1000).toFixed(v < 10000 ? 2 : 1) + " s";
    var m = Math.floor(v / 60000), s = Math.round((v % 60000) / 1000);
    return m + "m " + (s < 10 ? "0" : "") + s + "s";
  }
  function num(v) { return v === null || v === undefined ? "–" : Number(v).toLocaleString("en-US"); }
  function money(micros) { return micros === null || micros === undefined ? "–" : (micros / 1e6).toFixed(4); }
  function json(v) {
    var s = JSON.stringify(v, null, 2);
    if (s === undefined) s = String(v);
    return s.length > 200000 ? s.slice(0, 200000) + "\n… (" + num(s.length - 200000) + " more characters)" : s;
  }
  // Raw arguments (text a model sent) are shown parsed when they parse.
  function args(a) {
    if (typeof a !== "string") return json(a);
    try { return json(JSON.parse(a)); } catch (e) { return a; }
  }
  function short(v, n) {
    var s = typeof v === "string" ? v : JSON.stringify(v);
    if (s === undefined) s = "null";
    return s.length > n ? s.slice(0, n - 1) + "…" : s;
  }
  function cssColor(name) {
    if (!COLORS[name]) COLORS[name] = getComputedStyle(document.documentElement).getPropertyValue("--" + name).trim() || "#888";
    return COLORS[name];
  }

  // ---- the model, as drawn -------------------------------------------------
  // Each step: its worst call outcome ("model" for a step with no call).
  function worst(step) {
    var w = "model", sev = 0;
    for (var i = 0; i < step.calls.length; i++) {
      var o = step.calls[i].outcome;
      if (SEVERITY[o] > sev) { sev = SEVERITY[o]; w = o; }
    }
    return w;
  }
  var tMin = Infinity, tMax = -Infinity, totalSteps = 0;
  LANES.forEach(function (lane) {
    lane.stepRows = [];
    lane.rows.forEach(function (row, i) {
      row.i = i;
      if (row.k === "step") { row.worst = worst(row); lane.stepRows.push(row); }
    });
    totalSteps += lane.stepRows.length;
    var s = lane.start, e = s;
    if (lane.stepRows.length) e = s + lane.stepRows[lane.stepRows.length - 1].t1;
    lane.rows.forEach(function (r) { if (r.k === "input") e = Math.max(e, r.at); });
    if (lane.stop) e = Math.max(e, lane.stop.at);
    if (!lane.traced && lane.outcome) e = Math.max(e, lane.outcome.at);
    if (s === undefined || s === null) s = e;
    lane.t0 = s; lane.t1 = e;
    if (s !== undefined && s !== null) { tMin = Math.min(tMin, s); tMax = Math.max(tMax, e); }
  });
  // A child seen only through its parent and not waited for ends with the parent.
  LANES.forEach(function (lane) {
    if (!lane.traced && !lane.outcome && lane.t1 === lane.t0) lane.t1 = tMax;
  });
  if (!isFinite(tMin)) { tMin = 0; tMax = 1; }
  if (tMax <= tMin) tMax = tMin + 1;
  function xOf(t, width) { return ((t - tMin) / (tMax - tMin)) * width; }

  // ---- header --------------------------------------------------------------
  function header() {
    var root = LANES[0] || { task: "", id: "" };
    var stop = root.stop;
    var last = root.stepRows.length ? root.stepRows[root.stepRows.length - 1].spent : null;
    var tokens = stop ? stop.budget.spent.tokens_in + stop.budget.spent.tokens_out : last ? last.tokens : null;
    var cost = stop ? stop.budget.spent.cost_micros : last ? last.cost_micros : null;
    var calls = 0, errors = 0, retries = 0;
    LANES.forEach(function (l) {
      l.stepRows.forEach(function (s) {
        s.calls.forEach(function (c) { calls++; if (c.outcome !== "ok") errors++; if (c.tries > 1) retries += c.tries - 1; });
      });
    });
    var stats = el("div", { cls: "stats" });
    function stat(label, value) { stats.appendChild(el("div", { cls: "stat" }, el("b", { text: value }), el("span", { text: label }))); }
    stat("steps", num(stop ? stop.steps : root.stepRows.length));
    stat("tool calls", num(calls));
    stat("failed calls", num(errors));
    stat("retries", num(retries));
    stat("tokens", num(tokens));
    stat("cost", money(cost));
    stat("wall time", ms(stop ? stop.budget.elapsed_ms : (root.t1 - root.t0)));
    stat("agents", num(LANES.length));
    var who = el("div", { cls: "who" },
      el("div", { cls: "kicker", text: "agentry trace · " + DATA.files.join(", ") }),
      el("h1", { text: root.task || root.id }),
      root.goal ? el("div", { cls: "goal", text: root.goal }) : null,
      el("div", { cls: "run mono", text: "run " + root.id + (root.model ? " · model " + root.model : "") }),
      stats);
    var reason = el("span", { id: "stop-reason", cls: stop ? (stop.reason === "done" ? "done" : "") : "none", text: stop ? stop.reason : "no stop line (still running?)" });
    var side = el("div", { cls: "stop" }, reason,
      stop ? el("div", { cls: "detail", id: "stop-detail", text: stop.detail }) : null,
      stop && stop.answer ? el("div", { cls: "answer", text: "answer: " + short(stop.answer, 160) }) : null);
    var head = document.getElementById("head");
    head.appendChild(who);
    head.appendChild(side);
  }

  // ---- timeline ------------------------------------------------------------
  var canvases = [];
  function laneLabel(lane) {
    var used = lane.stop ? lane.stop.budget.spent : null;
    var steps = lane.stop ? lane.stop.steps : lane.stepRows.length;
    if (!lane.traced && lane.outcome) { steps = lane.outcome.data.steps; used = { tool_calls: lane.outcome.data.tool_calls }; }
    var max = lane.limits && lane.limits.max_steps;
    var sub = "steps " + num(steps) + (max ? "/" + num(max) : "");
    if (lane.limits && lane.limits.max_tool_calls) sub += " · calls " + num(used ? used.tool_calls : null) + "/" + num(lane.limits.max_tool_calls);
    var reason = lane.stop ? lane.stop.reason : lane.outcome ? lane.outcome.data.stop_reason : "running";
    var prefix = lane.depth ? new Array(lane.depth).join("   ") + "└ " : "";
    return el("div", { cls: "name", title: lane.id },
      el("span", { cls: "tree", text: prefix }), el("b", { text: lane.task || lane.id }),
      el("span", { cls: "sub", text: reason + " · " + sub }));
  }
  function timeline() {
    var box = document.getElementById("lanes");
    var axis = el("div", { cls: "trow axis" }, el("div", { cls: "name muted", text: "agents (" + LANES.length + ")" }), el("canvas", { id: "axis" }));
    box.appendChild(axis);
    LANES.forEach(function (lane, i) {
      var c = el("canvas");
      var row = el("div", { cls: "trow lane" + (i === state.lane ? " selected" : ""), "data-lane": String(i), "data-id": lane.id }, laneLabel(lane), c);
      row.addEventListener("click", function (ev) { pickFromCanvas(i, ev, c); });
      c.addEventListener("mousemove", function (ev) { hover(i, ev, c); });
      c.addEventListener("mouseleave", function () { tip.style.display = "none"; });
      box.appendChild(row);
      canvases.push({ lane: lane, canvas: c });
    });
  }
  function sized(canvas) {
    var ratio = window.devicePixelRatio || 1;
    var w = Math.max(1, canvas.clientWidth), h = Math.max(1, canvas.clientHeight);
    if (canvas.width !== Math.round(w * ratio)) canvas.width = Math.round(w * ratio);
    if (canvas.height !== Math.round(h * ratio)) canvas.height = Math.round(h * ratio);
    var ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, w, h);
    return { ctx: ctx, w: w, h: h };
  }
  function drawAxis() {
    var c = document.getElementById("axis"), g = sized(c), span = tMax - tMin;
    var step = Math.pow(10, Math.floor(Math.log10(span / 6 || 1)));
    [1, 2, 5, 10].some(function (m) { if (span / (step * m) <= 8) { step *= m; return true; } return false; });
    g.ctx.fillStyle = "#6b7280"; g.ctx.strokeStyle = "#d0d4db"; g.ctx.font = "11px " + getComputedStyle(document.body).fontFamily;
    for (var t = 0; t <= span + 1e-9; t += step) {
      var x = Math.round(xOf(tMin + t, g.w)) + 0.5;
      g.ctx.beginPath(); g.ctx.moveTo(x, g.h - 5); g.ctx.lineTo(x, g.h); g.ctx.stroke();
      var label = "+" + ms(t);
      var tw = g.ctx.measureText(label).width;
      g.ctx.fillText(label, Math.min(Math.max(0, x - tw / 2), g.w - tw), 11);
    }
  }
  // Steps drawn as bars when wide enough, else aggregated: each pixel column
  // takes the worst outcome of the steps that fall in it.
  function drawLane(item) {
    var lane = item.lane, g = sized(item.canvas), ctx = g.ctx, h = g.h;
    ctx.fillStyle = "#eef0f4";
    var lx0 = xOf(lane.t0, g.w), lx1 = Math.max(lx0 + 2, xOf(lane.t1, g.w));
    ctx.fillRect(lx0, 6, lx1 - lx0, h - 12);
    var steps = lane.stepRows;
    if (!lane.traced) {
      var o = lane.outcome ? lane.outcome.data.stop_reason : null;
      ctx.fillStyle = o === "done" ? cssColor("ok") : o ? cssColor("failed") : cssColor("cancelled");
      ctx.globalAlpha = 0.55; ctx.fillRect(lx0, 8, lx1 - lx0, h - 16); ctx.globalAlpha = 1;
    }
    var wide = steps.length && (lx1 - lx0) / steps.length >= 6;
    if (wide) {
      steps.forEach(function (s) {
        var x0 = xOf(lane.start + s.t0, g.w), x1 = Math.max(x0 + 3, xOf(lane.start + s.t1, g.w));
        ctx.fillStyle = cssColor("model"); ctx.globalAlpha = 0.25; ctx.fillRect(x0, 4, x1 - x0 - 1, h - 8); ctx.globalAlpha = 1;
        var total = 0; s.calls.forEach(function (c) { total += Math.max(1, c.ms); });
        var x = x0;
        if (!s.calls.length) { ctx.fillStyle = cssColor("model"); ctx.fillRect(x0, 8, x1 - x0 - 1, h - 16); }
        s.calls.forEach(function (c) {
          var w = Math.max(2, ((x1 - x0 - 1) * Math.max(1, c.ms)) / total);
          ctx.fillStyle = cssColor(c.outcome); ctx.fillRect(x, 8, Math.max(1, w - 1), h - 16);
          for (var r = 1; r < c.tries; r++) { ctx.fillStyle = "#fff"; ctx.fillRect(x + 2 + (r - 1) * 4, h / 2 - 1, 2, 2); }
          x += w;
        });
        if (x1 - x0 > 26) {
          ctx.fillStyle = "#fff"; ctx.font = "600 10px " + getComputedStyle(document.body).fontFamily;
          ctx.fillText(String(s.n), x0 + 4, h / 2 + 3.5);
        }
        if (state.lane === LANES.indexOf(lane) && lane.rows[state.row] === s) {
          ctx.strokeStyle = "#1d2430"; ctx.lineWidth = 1.5; ctx.strokeRect(x0 - 1, 3, x1 - x0 + 1, h - 6);
        }
      });
    } else if (steps.length) {
      var cols = new Array(Math.ceil(g.w) + 1);
      for (var i = 0; i < steps.length; i++) {
        var s = steps[i], sev = SEVERITY[s.worst];
        var a = Math.floor(xOf(lane.start + s.t0, g.w)), b = Math.max(a, Math.floor(xOf(lane.start + s.t1, g.w)));
        for (var px = a; px <= b && px < cols.length; px++) if (!cols[px] || SEVERITY[cols[px]] < sev) cols[px] = s.worst;
      }
      for (var p = 0; p < cols.length; p++) {
        if (!cols[p]) continue;
        ctx.fillStyle = cssColor(cols[p]); ctx.fillRect(p, 8, 1, h - 16);
      }
    }
    var marks = 0;
    lane.rows.forEach(function (r) {
      if (r.k !== "input") return;
      marks++;
      var x = Math.round(xOf(r.at, g.w)) + 0.5;
      ctx.strokeStyle = cssColor("input"); ctx.lineWidth = 2;
      ctx.beginPath(); ctx.moveTo(x, 1); ctx.lineTo(x, h - 1); ctx.stroke();
      ctx.fillStyle = cssColor("input");
      ctx.beginPath(); ctx.moveTo(x - 4, 0); ctx.lineTo(x + 4, 0); ctx.lineTo(x, 6); ctx.fill();
    });
    item.canvas.setAttribute("data-inputs", String(marks));
    if (lane.stop) {
      var sx = Math.min(g.w - 3, xOf(lane.stop.at, g.w));
      ctx.fillStyle = lane.stop.reason === "done" ? cssColor("ok") : cssColor("failed");
      ctx.fillRect(sx, 2, 3, h - 4);
    }
  }
  function laneAt(i, ev, canvas) {
    var lane = LANES[i], rect = canvas.getBoundingClientRect();
    var t = tMin + ((ev.clientX - rect.left) / rect.width) * (tMax - tMin);
    var best = -1, dist = Infinity;
    lane.rows.forEach(function (r, j) {
      var a = r.k === "step" ? lane.start + r.t0 : r.at, b = r.k === "step" ? lane.start + r.t1 : r.at;
      var d = t < a ? a - t : t > b ? t - b : 0;
      if (r.k === "input") d -= (tMax - tMin) * 0.004;
      if (d < dist) { dist = d; best = j; }
    });
    return best;
  }
  function pickFromCanvas(i, ev, canvas) {
    var j = ev.target === canvas ? laneAt(i, ev, canvas) : -1;
    select(i, j, true);
  }
  var tip;
  function hover(i, ev, canvas) {
    var j = laneAt(i, ev, canvas), r = LANES[i].rows[j];
    if (!r) { tip.style.display = "none"; return; }
    tip.textContent = r.k === "step" ? "step " + r.n + " · " + ms(r.t1 - r.t0) + "\n" + summary(r) : "input #" + r.seq + " · " + inputText(r.input);
    tip.style.left = ev.clientX + 12 + "px"; tip.style.top = ev.clientY + 14 + "px"; tip.style.display = "block";
  }

  // ---- budget --------------------------------------------------------------
  var DIMS = [
    ["steps", "max_steps", "steps_left", num],
    ["tool calls", "max_tool_calls", "tool_calls_left", num],
    ["tokens", "max_tokens", "tokens_left", num],
    ["cost", "max_cost_micros", "cost_micros_left", money],
    ["wall time", "deadline_ms", "wall_ms_left", ms]
  ];
  function budget() {
    var box = document.getElementById("budget");
    box.textContent = "";
    var lane = LANES[state.lane];
    if (!lane || !lane.limits) return;
    box.appendChild(el("div", { cls: "section-title", text: "budget left · " + (lane.task || lane.id) }));
    DIMS.forEach(function (d) {
      var limit = lane.limits[d[1]];
      if (limit === null || limit === undefined) return;
      var last = lane.stop ? lane.stop.budget.remaining[d[2]] : lane.stepRows.length ? lane.stepRows[lane.stepRows.length - 1].left[d[2]] : limit;
      var c = el("canvas");
      box.appendChild(el("div", { cls: "trow budget", "data-dim": d[1] },
        el("div", { cls: "name" }, d[0], el("span", { cls: "val", text: d[3](last) + " / " + d[3](limit) + " left" })), c));
      drawBudget(c, lane, d[2], limit);
    });
  }
  function drawBudget(canvas, lane, key, limit) {
    var g = sized(canvas), ctx = g.ctx, h = g.h - 2;
    var x = xOf(lane.t0, g.w), y = 1;
    ctx.beginPath(); ctx.moveTo(x, h + 1); ctx.lineTo(x, y);
    var steps = lane.stepRows, every = Math.max(1, Math.floor(steps.length / (g.w * 2)));
    for (var i = 0; i < steps.length; i += every) {
      var s = steps[i], v = s.left[key];
      if (v === null || v === undefined) continue;
      x = xOf(lane.start + s.t1, g.w); ctx.lineTo(x, 1 + h * (1 - v / limit));
    }
    if (lane.stop && lane.stop.budget.remaining[key] != null) { x = xOf(lane.stop.at, g.w); ctx.lineTo(x, 1 + h * (1 - lane.stop.budget.remaining[key] / limit)); }
    ctx.lineTo(x, h + 1); ctx.closePath();
    ctx.fillStyle = "rgba(59,91,219,0.14)"; ctx.fill();
    ctx.strokeStyle = "#3b5bdb"; ctx.lineWidth = 1.5; ctx.stroke();
  }

  // ---- the step list (virtualised: only visible rows exist) ---------------
  var list, spacer, pool = {}, listRows = [];
  function rowsOf(lane) {
    var rows = lane.rows.slice();
    if (lane.stop) rows.push({ k: "stop", i: rows.length });
    if (!lane.traced) rows.push({ k: "child", i: rows.length });
    return rows;
  }
  function summary(step) {
    var d = step.decision;
    if (d.type === "final") return "final: " + short(d.answer, 80);
    if (d.type === "failed") return (d.fatal ? "failed (fatal): " : "failed: ") + short(d.message, 80);
    return step.calls.map(function (c) { return c.tool + (c.outcome === "ok" ? "" : " " + (c.code || c.outcome)); }).join(", ");
  }
  function inputText(input) {
    switch (input.type) {
      case "message": return "message: " + short(input.text, 90);
      case "interrupt": return "interrupt" + (input.text ? ": " + short(input.text, 80) : "");
      case "event": return "event " + input.name + " " + short(input.payload, 60);
      case "tick": return "tick " + input.n + (input.skipped ? " (" + input.skipped + " skipped)" : "");
      case "pause": return "paused";
      case "resume": return "resumed";
      case "approval": return (input.approved ? "approved " : "denied ") + input.tool_call_id + (input.reason ? ": " + short(input.reason, 60) : "");
      case "settlement": return "settled " + input.tool_call_id + ": " + short(input.settlement, 40);
      default: return input.type;
    }
  }
  function chips(step) {
    var box = el("span");
    if (!step.calls.length) box.appendChild(el("span", { cls: "chip model", text: step.decision.type }));
    step.calls.slice(0, 6).forEach(function (c) {
      box.appendChild(el("span", { cls: "chip " + c.outcome, title: c.outcome + (c.code ? " " + c.code : "") },
        c.tool, el("span", { cls: "x", text: ms(c.ms) + (c.tries > 1 ? " ×" + c.tries : "") + (c.code ? " " + c.code : "") })));
    });
    if (step.calls.length > 6) box.appendChild(document.createTextNode("+" + (step.calls.length - 6)));
    return box;
  }
  function buildRow(lane, r) {
    var node;
    if (r.k === "step") {
      var left = r.left.steps_left != null ? num(r.left.steps_left) + " steps left" : "";
      node = el("div", { cls: "row step", "data-step": String(r.n) },
        el("span", { cls: "n", text: "#" + r.n }), el("span", { cls: "t", text: "+" + ms(r.t0) }),
        el("span", { cls: "what" }, chips(r)), el("span", { cls: "left", text: left }));
    } else if (r.k === "input") {
      node = el("div", { cls: "row input", "data-input": String(r.seq) },
        el("span", { cls: "n", text: "in " + r.seq }), el("span", { cls: "t", text: "+" + ms(r.at - lane.start) }),
        el("span", { cls: "what" }, el("span", { cls: "chip input", text: r.input.type }), inputText(r.input)), el("span"));
    } else if (r.k === "stop") {
      node = el("div", { cls: "row stop" }, el("span", { cls: "n", text: "stop" }), el("span", { cls: "t", text: "+" + ms(lane.stop.budget.elapsed_ms) }),
        el("span", { cls: "what", text: lane.stop.reason + " — " + lane.stop.detail }), el("span"));
    } else {
      node = el("div", { cls: "row stop" }, el("span", { cls: "n", text: "child" }), el("span", { cls: "t" }),
        el("span", { cls: "what", text: "no trace of its own: what its parent's agent.* calls reported" }), el("span"));
    }
    node.style.top = r.i * ROW_H + "px";
    node.addEventListener("click", function () { select(state.lane, r.i, false); });
    return node;
  }
  function renderList() {
    var lane = LANES[state.lane];
    var first = Math.max(0, Math.floor(list.scrollTop / ROW_H) - 8);
    var last = Math.min(listRows.length, Math.ceil((list.scrollTop + list.clientHeight) / ROW_H) + 8);
    var keep = {};
    for (var i = first; i < last; i++) {
      keep[i] = true;
      if (!pool[i]) { pool[i] = buildRow(lane, listRows[i]); list.appendChild(pool[i]); }
      pool[i].classList.toggle("selected", i === state.row);
    }
    for (var k in pool) if (!keep[k]) { list.removeChild(pool[k]); delete pool[k]; }
  }
  function showLane() {
    var lane = LANES[state.lane];
    for (var k in pool) list.removeChild(pool[k]);
    pool = {};
    listRows = rowsOf(lane);
    spacer.style.height = listRows.length * ROW_H + "px";
    list.setAttribute("data-rows", String(listRows.length));
    list.setAttribute("data-steps", String(lane.stepRows.length));
    document.getElementById("list-head").textContent = (lane.task || lane.id) + " · " + num(lane.stepRows.length) + " steps, " +
      num(lane.rows.length - lane.stepRows.length) + " inputs · click a row or a bar; ↑/↓ to move";
    document.querySelectorAll(".lane").forEach(function (n) { n.classList.toggle("selected", Number(n.getAttribute("data-lane")) === state.lane); });
    budget();
  }
  function select(laneIndex, row, scroll) {
    var changed = laneIndex !== state.lane;
    state.lane = laneIndex;
    if (changed) { showLane(); list.scrollTop = 0; }
    if (row < 0) row = listRows.length ? 0 : -1;
    state.row = row;
    if (scroll && row >= 0) {
      var top = row * ROW_H;
      if (top < list.scrollTop || top > list.scrollTop + list.clientHeight - ROW_H) list.scrollTop = Math.max(0, top - list.clientHeight / 2);
    }
    renderList();
    detail();
    canvases.forEach(drawLane);
  }

  // ---- the detail panel ----------------------------------------------------
  function table(head, rows) {
    var t = el("table", null, el("tr", null));
    head.forEach(function (h) { t.firstChild.appendChild(el("th", { text: h })); });
    rows.forEach(function (cells) {
      var tr = el("tr");
      cells.forEach(function (c) { tr.appendChild(c instanceof Node ? el("td", null, c) : el("td", { cls: "mono", text: c })); });
      t.appendChild(tr);
    });
    return t;
  }
  function stepDetail(box, lane, s) {
    box.setAttribute("data-step", String(s.n));
    box.appendChild(el("h2", { text: "Step " + s.n + (s.attempt > 1 ? " · attempt " + s.attempt : "") }));
    box.appendChild(el("div", { cls: "meta", text: "+" + ms(s.t0) + " → +" + ms(s.t1) + " (" + ms(s.t1 - s.t0) + ") · state v" + s.version +
      " · model " + (s.model || lane.model || "?") + (s.usage ? " · tokens " + num(s.usage.tokens_in) + " in / " + num(s.usage.tokens_out) + " out" : "") }));
    box.appendChild(el("h3", { text: "Decision" }));
    var dec = el("div", { cls: "decision" });
    var d = s.decision;
    if (d.type === "tool_calls") {
      d.calls.forEach(function (c) { dec.appendChild(el("div", { cls: "call" }, el("div", { cls: "head" }, el("b", { cls: "mono", text: c.name }), el("span", { cls: "muted mono", text: c.id })), el("pre", { text: args(c.arguments) }))); });
    } else if (d.type === "final") dec.appendChild(el("div", null, el("b", { text: "final answer: " }), el("pre", { text: d.answer })));
    else dec.appendChild(el("div", null, el("b", { text: d.fatal ? "failed (fatal): " : "failed: " }), el("pre", { text: d.message })));
    box.appendChild(dec);
    if (s.calls.length) {
      box.appendChild(el("h3", { text: "Calls" }));
      box.appendChild(table(["tool", "call", "outcome", "latency", "tries", "backoff"], s.calls.map(function (c) {
        return [c.tool, c.id, el("span", { cls: "chip " + c.outcome, text: c.outcome + (c.code ? " " + c.code : "") }), ms(c.ms), String(c.tries), c.backoff_ms ? ms(c.backoff_ms) : "–"];
      })));
      box.appendChild(el("h3", { text: "Results" }));
      var results = el("div", { cls: "results" });
      s.results.forEach(function (r, k) {
        var c = s.calls[k] || { tool: "?", id: "?" };
        var body = r.cut ? r.cut.head + "\n… (cut: " + num(r.cut.bytes) + " bytes" + (r.saved ? ", whole in " + r.saved.path : "") + ")" : json(r.ok ? r.data : r.error);
        results.appendChild(el("details", body.length < 1500 ? { open: "" } : null, el("summary", { cls: "mono", text: c.tool + " " + c.id + (r.ok ? " ok" : " error") + (r.replayed ? " (replayed)" : "") }), el("pre", { text: body })));
      });
      box.appendChild(results);
    }
    box.appendChild(el("h3", { text: "State changes" }));
    if (s.changes.length) box.appendChild(table(["field", "before", "after"], s.changes.map(function (c) { return [c.path, el("span", { cls: "from mono", text: short(c.from, 300) }), el("span", { cls: "to mono", text: short(c.to, 300) })]; })));
    else box.appendChild(el("div", { cls: "muted", text: "none" }));
    var refs = Object.keys(s.refs || {});
    if (refs.length) {
      box.appendChild(el("h3", { text: "World refs changed" }));
      box.appendChild(table(["path", "bytes", "sha256"], refs.map(function (p) { var r = s.refs[p]; return [p, num(r.bytes), r.sha256.slice(0, 16) + "…"]; })));
    }
    box.appendChild(el("h3", { text: "Budget after the step" }));
    box.appendChild(table(["", "spent", "left"], DIMS.map(function (dim) {
      var spent = { steps_left: s.spent.steps, tool_calls_left: s.spent.tool_calls, tokens_left: s.spent.tokens, cost_micros_left: s.spent.cost_micros, wall_ms_left: s.t1 }[dim[2]];
      return [dim[0], dim[3](spent),  s.left[dim[2]] == null ? "unlimited" : dim[3](s.left[dim[2]])];
    })));
    if (s.interrupted) { box.appendChild(el("h3", { text: "Interrupted" })); box.appendChild(el("pre", { text: json(s.interrupted) })); }
    if (s.compaction) { box.appendChild(el("h3", { text: "Compaction" })); box.appendChild(el("pre", { text: json(s.compaction) })); }
  }
  function detail() {
    var box = document.getElementById("detail"), lane = LANES[state.lane], r = listRows[state.row];
    box.textContent = "";
    box.removeAttribute("data-step");
    if (!r) { box.appendChild(el("div", { cls: "empty", text: "Nothing to show." })); return; }
    if (r.k === "step") return stepDetail(box, lane, r);
    if (r.k === "input") {
      box.appendChild(el("h2", { text: "Input " + r.seq + ": " + r.input.type }));
      box.appendChild(el("div", { cls: "meta", text: "applied at +" + ms(r.at - lane.start) + " · state v" + r.version }));
      box.appendChild(el("h3", { text: "Input" }));
      box.appendChild(el("pre", { text: json(r.input) }));
      return;
    }
    if (r.k === "stop") {
      box.appendChild(el("h2", { text: "Stopped: " + lane.stop.reason }));
      box.appendChild(el("div", { cls: "meta", text: lane.stop.detail }));
      box.appendChild(el("h3", { text: "Stop record" }));
      box.appendChild(el("pre", { text: json(lane.stop) }));
      return;
    }
    box.appendChild(el("h2", { text: "Child " + (lane.task || lane.id) }));
    if (lane.goal) box.appendChild(el("div", { text: "goal: " + lane.goal }));
    box.appendChild(el("div", { cls: "meta", text: "run " + lane.id + " · its steps are not in this trace (a child writes none of its own)" }));
    if (lane.spawn) { box.appendChild(el("h3", { text: "Spawned by its parent's step " + lane.spawn.step })); box.appendChild(el("pre", { text: json(lane.spawn.data) })); }
    if (lane.outcome) { box.appendChild(el("h3", { text: "Outcome, as its parent's step " + lane.outcome.step + " got it" })); box.appendChild(el("pre", { text: json(lane.outcome.data) })); }
  }

  // ---- start ---------------------------------------------------------------
  function legend() {
    var box = document.getElementById("legend");
    [["ok", "ok", ""], ["model", "no call", "a final answer or a failed turn"], ["refused", "refused", "EPERM, EBUDGET, ENOTOOL"],
      ["bad_call", "bad call", "EINVAL, EPRECOND"], ["transient", "timeout / unavailable", "ETIMEDOUT, EUNAVAIL"], ["failed", "failed", "EINTERNAL"],
      ["cancelled", "cancelled", "ECANCELED"], ["input", "input / approval", "applied at the mark"]]
      .forEach(function (p) { var i = el("i"); i.style.background = cssColor(p[0]); box.appendChild(el("span", { title: p[2] }, i, p[1])); });
  }
  function start() {
    tip = el("div", { id: "tip" });
    document.body.appendChild(tip);
    list = document.getElementById("list");
    spacer = document.getElementById("list-spacer");
    header();
    timeline();
    legend();
    drawAxis();
    var root = LANES.findIndex(function (l) { return l.traced; });
    state.lane = root < 0 ? 0 : root;
    showLane();
    // A link may name a step: run.html#step=12.
    var linked = /^#step=(\d+)$/.exec(location.hash);
    var first = linked ? LANES[state.lane].rows.findIndex(function (r) { return r.k === "step" && r.n === Number(linked[1]); }) : 0;
    select(state.lane, Math.max(0, first), true);
    list.addEventListener("scroll", renderList, { passive: true });
    list.addEventListener("keydown", function (ev) {
      if (ev.key === "ArrowDown" || ev.key === "ArrowUp") {
        ev.preventDefault();
        select(state.lane, Math.max(0, Math.min(listRows.length - 1, state.row + (ev.key === "ArrowDown" ? 1 : -1))), true);
      }
    });
    window.addEventListener("resize", function () { drawAxis(); canvases.forEach(drawLane); budget(); renderList(); });
    var took = performance.now() - started;
    document.body.setAttribute("data-lanes", String(LANES.length));
    document.body.setAttribute("data-steps", String(totalSteps));
    document.body.setAttribute("data-render-ms", took.toFixed(1));
    document.body.setAttribute("data-ready", "1");
    console.log("agentry view: " + totalSteps + " steps in " + LANES.length + " lanes rendered in " + took.toFixed(1) + " ms");
  }
  start();
})();
