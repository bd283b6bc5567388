#!/usr/bin/env bash
# examples/a2a-delegate: an agentry run delegates to a remote A2A agent (agent.py,
# on the official Python a2a-sdk) and reports its answer. One command:
#   examples/a2a-delegate/run.sh
# Uses .ci/a2a-venv if it is there (.ci/run makes it), else makes it (a2a-sdk
# and uvicorn, pinned as in .ci/run). $AGENTRY names the agentry command;
# default: the repository's, through cargo.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$root/.ci/a2a-venv"
if ! "$venv/bin/python" -c 'import a2a.server.routes, uvicorn' 2>/dev/null; then
  echo "making $venv (a2a-sdk 1.3.0, uvicorn 0.55.0)" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check \
    'a2a-sdk[http-server]==1.3.0' uvicorn==0.55.0
fi
read -r -a agentry <<<"${AGENTRY:-cargo run -q --manifest-path $root/Cargo.toml -p agentry-cli --}"

work="$(mktemp -d)"
agent_pid=""
cleanup() {
  if [ -n "$agent_pid" ]; then kill "$agent_pid" 2>/dev/null || true; wait "$agent_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# The agent, on 127.0.0.1 and a free port (it prints "PORT <n>" once it listens).
export PRICING_AGENT_TOKEN="$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
"$venv/bin/python" "$here/agent.py" "$PRICING_AGENT_TOKEN" >"$work/port" 2>"$work/agent.log" &
agent_pid=$!
port=""
for _ in $(seq 300); do
  port="$(sed -n 's/^PORT //p' "$work/port")"
  if [ -n "$port" ] || ! kill -0 "$agent_pid" 2>/dev/null; then break; fi
  sleep 0.1
done
[ -n "$port" ] || { echo "the agent did not start:" >&2; cat "$work/agent.log" >&2; exit 1; }
echo "pricing agent (a2a-sdk) on http://127.0.0.1:$port"

# The task, with the agent's URL.
mkdir "$work/task"
cp "$here/script.json" "$work/task/"
sed "s|http://127.0.0.1:8790|http://127.0.0.1:$port|" "$here/task.toml" >"$work/task/task.toml"

# The call is irreversible_external by default: approved up front here.
"${agentry[@]}" run "$work/task" --no-store --approve pricing.ask \
  --trace "$work/run.jsonl" --json >"$work/outcome.json"

# The report: what the run answered, and what the remote agent said.
python3 - "$work/outcome.json" "$work/run.jsonl" <<'PY'
import json, sys
outcome = json.load(open(sys.argv[1]))
said = []
def walk(v):
    if isinstance(v, dict):
        if v.get("agent") == "pricing" and "text" in v and "task_id" in v:
            said.append(v)
        for x in v.values(): walk(x)
    elif isinstance(v, list):
        for x in v: walk(x)
for line in open(sys.argv[2]):
    walk(json.loads(line))
if not said:
    sys.exit("the trace holds no answer of the pricing agent")
remote = said[-1]
print(f"remote task   {remote['task_id']} ({remote['state']})")
print(f"remote answer {remote['text']}")
print(f"stop_reason   {outcome['stop_reason']}")
print(f"answer        {outcome.get('answer')}")
if outcome["stop_reason"] != "done" or outcome.get("answer") != remote["text"]:
    sys.exit("the run's answer is not the remote agent's")
PY
