#!/usr/bin/env bash
# Flake check: runs the whole suite (the README's test command) N times in a row while
# `stress --cpu 2` keeps both cores of this machine busy, and stops at the first failure,
# keeping its log. Timing never decides a verdict, so a loaded machine must not fail a test.
#
# Usage: tests/repeat-under-load.sh [N]     (default 20; needs apt-get install stress)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20}
command -v stress >/dev/null || { echo "missing: stress (apt-get install stress)"; exit 2; }
cargo test --workspace --release --no-run 2>/dev/null
stress --cpu 2 >/dev/null 2>&1 & load=$!
trap 'kill $load 2>/dev/null || true' EXIT
log=$(mktemp /tmp/repeat-under-load.XXXX)
for i in $(seq 1 "$n"); do
  start=$(date +%s)
  if ! cargo test --workspace --release >"$log" 2>&1; then
    echo "run $i of $n FAILED; log: $log"
    grep -E "^test .* FAILED|panicked" "$log" | head -20
    exit 1
  fi
  echo "run $i of $n: ok ($(( $(date +%s) - start )) s)"
done
rm -f "$log"
echo "$n passed, 0 failed"
