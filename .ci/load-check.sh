#!/usr/bin/env bash
# Issue 15's load check (not part of .ci/run: it takes 40-80 minutes on 2 cores):
# the whole suite 20 times in a row while two other `cargo test --workspace`
# runs load the machine. Run it in a clean clone after .ci/run has installed the
# test peers. Results in target/load-check/{summary,loads}.log and run*.log.
set -uo pipefail
cd "$(dirname "$0")/.."
export AIMOCK_DIR="$PWD/.ci/peers"
out=target/load-check
mkdir -p "$out"
rm -f "$out"/*
load() {
  while [ ! -f "$out/done" ]; do
    cargo test --workspace > "$out/load$1.last" 2>&1
    echo "$(date +%T) load$1 exit $?" >> "$out/loads.log"
  done
}
load 1 &
load 2 &
failed=0
for i in $(seq 1 "${RUNS:-20}"); do
  start=$(date +%s)
  cargo test --workspace > "$out/run$i.log" 2>&1
  code=$?
  [ "$code" = 0 ] || failed=$((failed + 1))
  echo "$(date +%T) run $i exit $code in $(($(date +%s) - start))s" >> "$out/summary.log"
done
touch "$out/done"
wait
echo "runs failed: $failed" | tee -a "$out/summary.log"
[ "$failed" = 0 ]
