#!/usr/bin/env bash
# A/B of two tcpvs binaries beside HAProxy and nginx in the same rounds, through
# ../shared/tools/peerbench.sh: both pinned to CPU 0 with workers = 1 and the access log off,
# as peerbench-tcpvs.sh runs one. Medians of req/s and CPU µs per request for every target.
# Usage: benches/ab.sh OLD_BINARY NEW_BINARY      (build the old one in a worktree with its own
#        CARGO_TARGET_DIR, never into this target directory)
# Env: CLOSE=1, PATHQ, CONNS, ROUNDS (5), DUR (5), as peerbench.sh takes them; OLD_SWITCH,
#      NEW_SWITCH: more `[switch]` lines for the old or new binary's rule file (one binary
#      twice with NEW_SWITCH='trace = "w3c"' is a feature's A/B: BENCHMARKS.md "Tracing").
# Needs: apt-get install haproxy nginx wrk curl
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 OLD_BINARY NEW_BINARY"; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
peerbench=${PEERBENCH:-$root/../shared/tools/peerbench.sh}
[ -x "$peerbench" ] || { echo "peerbench.sh not found at $peerbench (set PEERBENCH)"; exit 2; }
work=$(mktemp -d /tmp/tcpvs-ab.XXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
targets=()
start() { # name binary port [switch lines]
  tcpvs_config "$work/$1.toml" 1 "$3" "${BACKEND_PORT:-18081}" "${4:-}"
  taskset -c 0 "$2" run -c "$work/$1.toml" >"$work/$1.log" 2>&1 &
  pids+=($!)
  targets+=("$1=127.0.0.1:$3=$!")
}
start old "$1" 18094 "${OLD_SWITCH:-}"
start new "$2" 18095 "${NEW_SWITCH:-}"
sleep 0.5
export ROUNDS=${ROUNDS:-5} DUR=${DUR:-5}
"$peerbench" "${targets[@]}" | sed -n '/^# medians/,$p'
