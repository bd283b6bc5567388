// AG-UI's official client against `agentry serve` (crates/agentry-cli/tests/cli/serve_agui.rs).
// Every event is checked by @ag-ui/core's schemas (EventSchemas.parse) and by the
// client's ordering rules (verifyEvents); prints one JSON object for the test.
//
//   node agui.cjs get  BASE TOKEN RUN_ID     GET /runs/RUN_ID/events?format=ag-ui, read by the client's SSE parser
//   node agui.cjs post BASE TOKEN AGENT PLAN [THREAD_ID]
//                                            HttpAgent on /agents/AGENT/ag-ui; PLAN is a JSON list of
//                                            {"runId", "message"?, "resume"?}, run in order on one agent (one
//                                            thread: THREAD_ID, else a new one)
const { EventSchemas } = require("@ag-ui/core/schemas");
const { HttpAgent, verifyEvents, runHttpRequest, transformHttpEventStream } = require("@ag-ui/client");
const { from, lastValueFrom, toArray } = require("rxjs");

async function validate(events) {
  events.forEach((e) => EventSchemas.parse(e));
  await lastValueFrom(from(events).pipe(verifyEvents(), toArray()));
}

function failure(e) {
  return e && e.issues ? JSON.stringify(e.issues.map((i) => ({ path: i.path, msg: i.message }))) : String(e && e.message ? e.message : e);
}

async function get(base, token, runId) {
  const url = `${base}/runs/${runId}/events?format=ag-ui`;
  const request = () => fetch(url, { headers: { authorization: `Bearer ${token}`, accept: "text/event-stream" } });
  const events = await lastValueFrom(transformHttpEventStream(runHttpRequest(request)).pipe(toArray()));
  await validate(events);
  return { ok: true, events };
}

async function post(base, token, agentName, plan, threadId) {
  const agent = new HttpAgent({
    url: `${base}/agents/${agentName}/ag-ui`,
    headers: { authorization: `Bearer ${token}` },
    threadId: threadId || `thread-${process.pid}`,
  });
  const calls = [];
  for (const [i, step] of plan.entries()) {
    if (step.message) agent.addMessage({ id: `u${i}`, role: "user", content: step.message });
    const events = [];
    try {
      const params = { runId: step.runId };
      if (step.resume) params.resume = step.resume;
      const result = await agent.runAgent(params, { onEvent: ({ event }) => { events.push(event); } });
      await validate(events);
      calls.push({ ok: true, events, result: result.result === undefined ? null : result.result,
        newMessages: result.newMessages, pendingInterrupts: agent.pendingInterrupts || [] });
    } catch (e) {
      calls.push({ ok: false, error: failure(e), events });
    }
  }
  return { calls, threadId: agent.threadId, state: agent.state, messages: agent.messages };
}

(async () => {
  const [mode, base, token, arg, plan, threadId] = process.argv.slice(2);
  let out;
  try {
    out = mode === "get" ? await get(base, token, arg) : await post(base, token, arg, JSON.parse(plan), threadId);
  } catch (e) {
    out = { ok: false, error: failure(e) };
  }
  process.stdout.write(JSON.stringify(out) + "\n");
})();
