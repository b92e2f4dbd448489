#!/usr/bin/env bash
# Side-by-side benchmark of tcpvs against HAProxy and nginx on this machine, through the team's
# ../shared/tools/peerbench.sh (proxies pinned to CPU 0; wrk and the nginx backend to CPU 1).
#
# Two tcpvs targets run in the same rounds: "tcpvs" (defaults: splice from 64 KiB) and
# "tcpvs-copy" (splice = false), both with workers = 1 and the access log off.
#
# Usage: benches/peerbench-tcpvs.sh [small|close|1m|all]      (default: all)
# Env: ROUNDS, DUR passed through to peerbench (defaults 5 and 5 here); PEERBENCH to override
#      the path of peerbench.sh. Needs: apt-get install haproxy nginx wrk curl
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
peerbench=${PEERBENCH:-$root/../shared/tools/peerbench.sh}
[ -x "$peerbench" ] || { echo "peerbench.sh not found at $peerbench (set PEERBENCH)"; exit 2; }
cargo build --release --manifest-path "$root/Cargo.toml" >&2
bin=$root/target/release/tcpvs
work=$(mktemp -d /tmp/tcpvs-bench.XXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

targets=()
start() { # name port extra-switch-lines
  tcpvs_config "$work/$1.toml" 1 "$2" "${BACKEND_PORT:-18081}" "$3"
  taskset -c 0 "$bin" run -c "$work/$1.toml" >"$work/$1.log" 2>&1 &
  pids+=($!)
  targets+=("$1=127.0.0.1:$2=$!")
}
start tcpvs 18092 ""
start tcpvs-copy 18093 "splice = false"
sleep 0.5

export ROUNDS=${ROUNDS:-5} DUR=${DUR:-5}
scenario=${1:-all}
if [ "$scenario" = small ] || [ "$scenario" = all ]; then
  echo "## small keep-alive: peerbench.sh (100-byte body, 50 connections)"
  "$peerbench" "${targets[@]}" | sed -n '/^# medians/,$p'
fi
if [ "$scenario" = close ] || [ "$scenario" = all ]; then
  echo "## new connection per request: CLOSE=1 peerbench.sh"
  CLOSE=1 "$peerbench" "${targets[@]}" | sed -n '/^# medians/,$p'
fi
if [ "$scenario" = 1m ] || [ "$scenario" = all ]; then
  echo "## 1 MiB bodies: PATHQ=/1m.bin CONNS=10 peerbench.sh"
  PATHQ=/1m.bin CONNS=10 "$peerbench" "${targets[@]}" | sed -n '/^# medians/,$p'
fi
