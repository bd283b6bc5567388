#!/usr/bin/env python3
"""Cross-checks the service's GET /metrics with a second, independent parser.

Starts the real service binary (examples/service) on 127.0.0.1, runs tasks that
reach several stop reasons and tool outcomes (one agent left sleeping, so its
gauges are non-zero), scrapes /metrics twice and parses each scrape with
Python's prometheus_client OpenMetrics parser, which refuses anything the
OpenMetrics 1.0 text format does not allow. Any parse error, a wrong content
type or a missing family fails the check. Bounded: the whole check gives up
after DEADLINE seconds.

Usage: metrics-check.py [SERVICE_BINARY]   (default target/debug/examples/service)
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from prometheus_client.openmetrics.parser import text_string_to_metric_families

DEADLINE = 60.0
CONTENT_TYPE = "application/openmetrics-text"
# Families the runs below must produce (names as the parser reports them).
WANTED = ["agentry_runs", "agentry_tool_calls", "agentry_runs_live", "agentry_runs_sleeping"]

TASKS = [
    {  # done, after a read that fails EINVAL
        "goal": "read, then finish",
        "budget": {"max_steps": 4, "deadline": "30s"},
        "tools": {"grant": ["fs.read"]},
        "script": {"turns": [
            {"tool_calls": [{"id": "r", "name": "fs.read", "arguments": {"path": "missing.txt"}}]},
            {"tool_calls": [{"id": "f", "name": "task.finish", "arguments": {"answer": "ok"}}]},
        ]},
    },
    {  # max_steps
        "goal": "never finish",
        "budget": {"max_steps": 1, "deadline": "30s"},
        "tools": {"grant": ["fs.read"]},
        "script": {"turns": [
            {"tool_calls": [{"id": "a", "name": "fs.read", "arguments": {"path": "a.txt"}}]},
            {"tool_calls": [{"id": "b", "name": "fs.read", "arguments": {"path": "b.txt"}}]},
        ]},
    },
]
SLEEPER = {  # an event-driven agent: sleeps until aborted
    "goal": "wait for messages",
    "budget": {"max_steps": 4, "deadline": "60s"},
    "driver": {"mode": "events"},
    "script": {"turns": [{"final": "never reached"}]},
}


def fail(message):
    print(f"metrics-check: {message}", file=sys.stderr)
    sys.exit(1)


def left():
    return max(0.1, DEADLINE - (time.monotonic() - STARTED))


def request(base, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        req.add_header("content-type", "application/json")
    with urllib.request.urlopen(req, timeout=min(10.0, left())) as reply:
        return reply.status, reply.headers.get("content-type", ""), reply.read().decode()


def start(binary, tmp):
    env = dict(os.environ, TMPDIR=tmp, RUST_LOG="info", NO_COLOR="1")
    proc = subprocess.Popen(
        [binary, "--addr", "127.0.0.1:0"],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )
    found = []
    ready = threading.Event()

    def read_log():
        # Reads the log to its end (a full pipe would block the service).
        for line in proc.stderr:
            if not found and "listening" in line and "addr=" in line:
                found.append(line.split("addr=", 1)[1].strip())
                ready.set()

    threading.Thread(target=read_log, daemon=True).start()
    if not ready.wait(left()):
        proc.kill()
        fail("the service did not report its address")
    return proc, "http://" + found[0]


def wait_for(base, run_id, statuses):
    while True:
        _, _, body = request(base, "GET", f"/runs/{run_id}")
        status = json.loads(body).get("status")
        if status in statuses:
            return
        if left() <= 0.1:
            fail(f"run {run_id} never reached {statuses} (last: {status})")
        time.sleep(0.02)


def create(base, task):
    status, _, body = request(base, "POST", "/runs", task)
    if status != 201:
        fail(f"POST /runs answered {status}: {body}")
    return json.loads(body)["run_id"]


def scrape(base, label):
    status, content_type, text = request(base, "GET", "/metrics")
    if status != 200 or not content_type.startswith(CONTENT_TYPE):
        fail(f"{label}: GET /metrics answered {status} {content_type!r}")
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as e:  # the parser's errors are plain ValueErrors and more
        fail(f"{label}: the OpenMetrics parser refused /metrics: {e}\n{text}")
    names = {f.name for f in families}
    missing = [w for w in WANTED if w not in names]
    if missing:
        fail(f"{label}: no family {missing} in /metrics (families: {sorted(names)})\n{text}")
    samples = sum(len(f.samples) for f in families)
    print(f"metrics-check: {label}: {len(families)} families, {samples} samples, parsed strictly")
    return families


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "target/debug/examples/service"
    if not os.access(binary, os.X_OK):
        fail(f"{binary}: not built (cargo build --example service)")
    with tempfile.TemporaryDirectory() as tmp:
        proc, base = start(binary, tmp)
        try:
            ids = [create(base, task) for task in TASKS]
            sleeper = create(base, SLEEPER)
            for run_id in ids:
                wait_for(base, run_id, {"stopped"})
            wait_for(base, sleeper, {"sleeping"})
            scrape(base, "with an agent sleeping")
            request(base, "POST", f"/runs/{sleeper}/interrupt", {"action": "abort"})
            wait_for(base, sleeper, {"stopped"})
            scrape(base, "after every run stopped")
        finally:
            proc.kill()
            proc.wait()


STARTED = time.monotonic()
if __name__ == "__main__":
    main()
