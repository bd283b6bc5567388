#!/usr/bin/env python3
"""The performance regression guard: figures that do not move with the
machine's load, measured on the release `agentry-bench` built with
`--features count-alloc`, compared with the baseline checked in beside this
script (.ci/perf-baseline.json). Fails when a figure is more than 5 % above its
baseline, printing both; prints both on success too.

The figures (valgrind's callgrind, 1 tokio worker, a fixed environment):
- w1_instructions_per_step: the W1 process at M = 6,000 minus at M = 2,000,
  divided by 4,000 (start-up, warm-up and the run's fixed costs cancel; the
  process runs both floors too), as crates/agentry-bench/instructions.sh counts;
- w2_instructions_per_start: instructions inside `Runtime::start` (callgrind
  collects only within `start_boxed`) in W2 at N = 200 minus at N = 100,
  divided by 100;
- w2_alloc_bytes_per_agent: bytes allocated over W2's timed region (the
  counting allocator), N = 200 minus N = 100, per agent. Under valgrind the
  threads run one at a time, so the count is steady (natively it moves with
  how the actors' mailboxes fill).

Usage:
  python3 .ci/perf_guard.py            # measure and compare
  python3 .ci/perf_guard.py --update   # measure and write the baseline (commit
                                       # it with a message that says why)
The binary: $AGENTRY_BENCH, else $CARGO_TARGET_DIR/release/agentry-bench, else
target/release/agentry-bench.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / ".ci" / "perf-baseline.json"
TOLERANCE = 0.05
W1_STEPS = (2000, 6000)
W2_AGENTS = (100, 200)
# The function whose instructions are a run's start (Runtime::start calls it).
START_FUNCTION = "*Runtime*start_boxed*"
FIGURES = {
    "w1_instructions_per_step": "W1 instructions per step",
    "w2_instructions_per_start": "W2 instructions per Runtime::start",
    "w2_alloc_bytes_per_agent": "W2 bytes allocated per agent",
}


class GuardError(Exception):
    """The guard could not measure (not a regression)."""


def per_unit(small, large, count_small, count_large):
    """The cost of one more unit: (large - small) / (count_large - count_small)."""
    if count_large <= count_small:
        raise GuardError(f"counts must grow: {count_small} -> {count_large}")
    return (large - small) / (count_large - count_small)


def compare(baseline, measured, tolerance=TOLERANCE):
    """Lines to print and whether every baselined figure is within tolerance.

    A figure above baseline * (1 + tolerance), or missing from `measured`,
    fails; one below baseline * (1 - tolerance) passes with a note to update
    the baseline, so a gain is kept."""
    lines = [f"{'figure':<36} {'baseline':>12} {'measured':>12} {'change':>8}"]
    ok = True
    for name, base in baseline.items():
        label = FIGURES.get(name, name)
        if name not in measured:
            lines.append(f"{label:<36} {base:>12,.0f} {'missing':>12}   FAIL")
            ok = False
            continue
        value = measured[name]
        change = value / base - 1 if base else float("inf")
        verdict = "ok"
        if value > base * (1 + tolerance):
            verdict = f"FAIL (over +{tolerance:.0%})"
            ok = False
        elif value < base * (1 - tolerance):
            verdict = "ok, below: update the baseline (--update) to keep the gain"
        lines.append(f"{label:<36} {base:>12,.0f} {value:>12,.0f} {change:>+8.1%}   {verdict}")
    for name in measured.keys() - baseline.keys():
        lines.append(f"{FIGURES.get(name, name):<36} {'(none)':>12} {measured[name]:>12,.0f}   new, not compared")
    return lines, ok


def summary(callgrind_out):
    """The instruction count callgrind wrote in its `summary:` line."""
    match = re.search(r"^summary:\s+(\d+)", callgrind_out.read_text(), re.M)
    if not match:
        raise GuardError(f"no summary line in {callgrind_out}")
    return int(match.group(1))


def bench_line(stdout):
    """The bench's one JSON line, which must say ok."""
    lines = [l for l in stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise GuardError(f"the bench printed no JSON line:\n{stdout}")
    line = json.loads(lines[-1])
    if not line.get("ok"):
        raise GuardError(f"the bench run failed: {line.get('notes')}")
    return line


def callgrind(binary, args, workdir, toggle=None):
    """Runs the bench under callgrind in a fixed environment: (instructions, JSON line)."""
    out = Path(workdir) / f"cg.{'-'.join(args)}"
    command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    if toggle:
        command.append(f"--toggle-collect={toggle}")
    command += [str(binary), *args, "--threads", "1"]
    # A fixed environment: the redactor reads it, the temporary paths come from it.
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LC_ALL": "C"}
    run = subprocess.run(command, env=env, cwd=workdir, capture_output=True, text=True)
    if run.returncode != 0:
        raise GuardError(f"{' '.join(command)} exited {run.returncode}:\n{run.stdout}\n{run.stderr[-2000:]}")
    return summary(out), bench_line(run.stdout)


def measure(binary):
    with tempfile.TemporaryDirectory(prefix="perf-guard") as workdir:
        w1 = [callgrind(binary, ["w1", "--m", str(m)], workdir)[0] for m in W1_STEPS]
        starts, allocated = [], []
        for n in W2_AGENTS:
            count, line = callgrind(binary, ["w2", "--n", str(n)], workdir, toggle=START_FUNCTION)
            per_agent = line["metrics"].get("alloc_bytes_per_agent")
            if per_agent is None:
                raise GuardError("W2 reported no alloc_bytes_per_agent: build the bench with --features count-alloc")
            if count == 0:
                raise GuardError(f"callgrind counted nothing inside {START_FUNCTION}: was it renamed or inlined?")
            starts.append(count)
            allocated.append(per_agent * n)
    return {
        "w1_instructions_per_step": round(per_unit(*w1, *W1_STEPS)),
        "w2_instructions_per_start": round(per_unit(*starts, *W2_AGENTS)),
        "w2_alloc_bytes_per_agent": round(per_unit(*allocated, *W2_AGENTS)),
    }


def bench_binary():
    if os.environ.get("AGENTRY_BENCH"):
        return Path(os.environ["AGENTRY_BENCH"]).resolve()
    target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
    return (target if target.is_absolute() else Path.cwd() / target).resolve() / "release" / "agentry-bench"


def main(argv):
    update = "--update" in argv[1:]
    binary = bench_binary()
    if not shutil.which("valgrind"):
        print("perf guard: valgrind is not installed", file=sys.stderr)
        return 2
    if not binary.is_file():
        print(f"perf guard: no bench at {binary}; build it: "
              "cargo build --release -p agentry-bench --features count-alloc", file=sys.stderr)
        return 2
    try:
        measured = measure(binary)
    except GuardError as e:
        print(f"perf guard: {e}", file=sys.stderr)
        return 2
    if update:
        BASELINE.write_text(json.dumps(measured, indent=2) + "\n")
        print(f"perf guard: baseline written to {BASELINE.relative_to(ROOT)}:")
        for name, value in measured.items():
            print(f"  {FIGURES[name]:<36} {value:>12,}")
        return 0
    baseline = json.loads(BASELINE.read_text())
    lines, ok = compare(baseline, measured)
    print("\n".join(lines))
    if not ok:
        print(f"perf guard: a figure is more than {TOLERANCE:.0%} above its baseline "
              f"({BASELINE.relative_to(ROOT)}). Find the cause (BENCHMARKS.md, "
              "'Comparing a change'); update the baseline only in a commit that says why.")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
