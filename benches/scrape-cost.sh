#!/usr/bin/env bash
# What the admin endpoint costs the data path: three tcpvs of the same binary beside HAProxy and
# nginx in the same rounds (../shared/tools/peerbench.sh, all pinned to CPU 0, workers = 1,
# access log off): `plain` without [admin], `admin` with an endpoint nobody asks, and `scraped`
# whose /metrics a scraper (curl, pinned to CPU 1 with wrk) fetches every 100 ms for the whole run.
# The scrapes' CPU is charged to `scraped` (its endpoint runs on its worker with workers = 1).
# Usage: benches/scrape-cost.sh [BINARY]     (default target/release/tcpvs)
# Env: ROUNDS (5), DUR (5), CONNS, PATHQ, CLOSE as peerbench.sh takes them; PERIOD (0.1 s).
# Needs: apt-get install haproxy nginx wrk curl
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
binary=${1:-$root/target/release/tcpvs}
peerbench=${PEERBENCH:-$root/../shared/tools/peerbench.sh}
[ -x "$peerbench" ] || { echo "peerbench.sh not found at $peerbench (set PEERBENCH)"; exit 2; }
[ -x "$binary" ] || { echo "no binary at $binary (cargo build --release)"; exit 2; }
work=$(mktemp -d /tmp/tcpvs-scrape.XXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
targets=()
start() { # name port [admin port]
  local admin=""
  [ -n "${3:-}" ] && admin="[admin]
listen = \"127.0.0.1:$3\""
  tcpvs_config "$work/$1.toml" 1 "$2" "${BACKEND_PORT:-18081}"
  [ -n "$admin" ] && printf '%s\n' "$admin" >> "$work/$1.toml"
  taskset -c 0 "$binary" run -c "$work/$1.toml" >"$work/$1.log" 2>&1 &
  pids+=($!)
  targets+=("$1=127.0.0.1:$2=$!")
}
start plain 18096
start admin 18097 18197
start scraped 18098 18198
sleep 0.5
export ROUNDS=${ROUNDS:-5} DUR=${DUR:-5}
# The scraper: bounded by the run's length (5 targets per round, a second of setup each).
period=${PERIOD:-0.1}
scrapes=$(awk -v r="$ROUNDS" -v d="$DUR" -v p="$period" 'BEGIN { printf "%d", r * 5 * (d + 2) / p }')
(
  for _ in $(seq "$scrapes"); do
    taskset -c 1 curl -s -o /dev/null http://127.0.0.1:18198/metrics || true
    sleep "$period"
  done
) &
scraper=$!
pids+=("$scraper")
"$peerbench" "${targets[@]}" | sed -n '/^# medians/,$p'
kill "$scraper" 2>/dev/null || true
size=$(curl -s http://127.0.0.1:18198/metrics | wc -c)
echo "# /metrics of one pool with one server: $size bytes per scrape"
