#!/usr/bin/env bash
# Instructions per step of a W1-shaped mode, counted by valgrind's callgrind:
# (I(M = 6,000) - I(M = 2,000)) / 4,000 with 1 tokio worker, so start-up,
# warm-up and the run's fixed costs cancel. Unlike wall time, the figure does
# not move with the machine's load (it varies by a few hundred instructions
# with how often the worker parks), so it is the one to compare changes by.
# Build first: cargo build --release -p agentry-bench (the binary is looked for
# in $CARGO_TARGET_DIR/release when that is set, as cargo puts it there).
# Usage: crates/agentry-bench/instructions.sh [MODE] [EXTRA ARGS...]
#   MODE: w1 (default; its process also runs both floors), floor, actor-floor
#   e.g.  crates/agentry-bench/instructions.sh w1 --trace /tmp/t.jsonl
set -euo pipefail
# A relative CARGO_TARGET_DIR is relative to where cargo ran: resolve it first.
target=${CARGO_TARGET_DIR:-}
[ -z "$target" ] || [ "${target#/}" != "$target" ] || target=$PWD/$target
cd "$(dirname "$0")/../.."
bin=${target:-$PWD/target}/release/agentry-bench
mode=${1:-w1}
shift || true
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 2; }
[ -x "$bin" ] || { echo "no binary at $bin; build first: cargo build --release -p agentry-bench" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
count() {
  local m=$1
  shift
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.$m" \
    "$bin" "$mode" --threads 1 --m "$m" "$@" >/dev/null 2>&1 || true
  grep -h '^summary:' "$out/cg.$m" 2>/dev/null | awk '{print $2}'
}
a=$(count 2000 "$@")
b=$(count 6000 "$@")
[ -n "$a" ] && [ -n "$b" ] || { echo "callgrind produced no count" >&2; exit 1; }
echo "$mode: $(((b - a) / 4000)) instructions per step (M=2000: $a, M=6000: $b)"
