#!/usr/bin/env bash
# Runs every benchmark configuration of BENCHMARKS.md REPS times (default 5),
# each in its own fresh process, and appends the JSON lines to OUT
# (default target/bench/results.jsonl). Build first:
#   cargo build --release -p agentry-bench
# Usage: crates/agentry-bench/run-all.sh [REPS] [OUT]
set -euo pipefail
cd "$(dirname "$0")/../.."
reps=${1:-5}
out=${2:-target/bench/results.jsonl}
bin=target/release/agentry-bench
mkdir -p "$(dirname "$out")"
trace=$(mktemp -d)/w1.jsonl
configs=(
  "floor"
  "w1"
  "w1 --trace $trace"
  "w1 --m 500"
  "w1 --events-off"
  "w1 --threads 1"
  "floor --threads 1"
  "actor-floor"
  "actor-floor --threads 1"
  "actor-floor-w2"
  "w2"
  "w2 --events-off"
  "w3"
  "w4"
  "w4 --watch-cancel"
  "w4 --grandchildren"
  "parallel"
  "durable"
  "durable-w2"
  "sandbox"
)
for ((r = 1; r <= reps; r++)); do
  for c in "${configs[@]}"; do
    # shellcheck disable=SC2086
    "$bin" $c | tee -a "$out" || true
  done
done
# Once each: long or large.
"$bin" cancel | tee -a "$out" || true
"$bin" w2 --n 10000 | tee -a "$out" || true
"$bin" actor-floor-w2 --n 10000 | tee -a "$out" || true
"$bin" w2 --n 10000 --events-off | tee -a "$out" || true
"$bin" w2 --n 100000 --events-off | tee -a "$out" || true
# With the default event backlog: ~5.3 GiB at 100,000 agents (54 KiB each).
"$bin" w2 --n 100000 | tee -a "$out" || true
