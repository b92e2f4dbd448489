#!/usr/bin/env bash
# Failed requests per reload, tcpvs against HAProxy, in one run: a new connection per request
# (wrk -H "Connection: close", the highest new-connection rate this machine gives) while the
# proxy is reloaded every PERIOD seconds: tcpvs by SIGHUP, HAProxy by `haproxy -sf` (a new
# process binds beside the old one, which then finishes). Errors are wrk's socket errors
# (connect, read, write, timeout) and non-2xx answers. Proxies pinned to CPU 0 (one thread
# each), wrk and the nginx backend to CPU 1.
# Usage: benches/reload-under-load.sh [TCPVS_BINARY]   (default target/release/tcpvs)
# Env: DUR (s, 20), PERIOD (s between reloads, 0.2), CONNS (50), ROUNDS (3)
# Needs: apt-get install haproxy nginx wrk curl
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
binary=${1:-$root/target/release/tcpvs}
DUR=${DUR:-20}; PERIOD=${PERIOD:-0.2}; CONNS=${CONNS:-50}; ROUNDS=${ROUNDS:-3}
for t in haproxy nginx wrk curl taskset; do command -v $t >/dev/null || { echo "missing: $t"; exit 2; }; done
D=$(mktemp -d /tmp/reload-bench.XXXX); chmod 755 "$D"; mkdir -p "$D/www" "$D/logs"
head -c 100 /dev/zero | tr '\0' a > "$D/www/small.html"; chmod -R a+rX "$D/www"
BE=18181
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$D/h.pid" ] && kill $(cat "$D/h.pid") 2>/dev/null || true
  wait 2>/dev/null || true; rm -rf "$D"
}
trap cleanup EXIT
nginx_backend_config "$D" "$BE"
taskset -c 1 nginx -c "$D/backend.conf" -p "$D" & pids+=($!)
tcpvs_config "$D/tcpvs.toml" 1 18192 "$BE"
taskset -c 0 "$binary" run -c "$D/tcpvs.toml" >"$D/logs/tcpvs.log" 2>&1 & tcpvs_pid=$!; pids+=($tcpvs_pid)
haproxy_config "$D/haproxy.cfg" 1 18190 "$BE"
taskset -c 0 haproxy -f "$D/haproxy.cfg" -D -p "$D/h.pid"
sleep 1
reload_tcpvs() { kill -HUP "$tcpvs_pid"; }
reload_haproxy() { taskset -c 0 haproxy -f "$D/haproxy.cfg" -D -p "$D/h.pid" -sf $(cat "$D/h.pid"); }
run() { # name port reload-function
  local reloads=0 out errs
  taskset -c 1 wrk -t1 -c"$CONNS" -d"${DUR}s" -H "Connection: close" "http://127.0.0.1:$2/small.html" >"$D/wrk.out" 2>&1 &
  local wrk=$!
  sleep 0.5
  # Bounded: at most DUR / PERIOD reloads.
  local most; most=$(awk -v d="$DUR" -v p="$PERIOD" 'BEGIN { printf "%d", (d - 1) / p }')
  for _ in $(seq "$most"); do
    kill -0 "$wrk" 2>/dev/null || break
    "$3"; reloads=$((reloads + 1)); sleep "$PERIOD"
  done
  wait "$wrk" || true
  out=$(cat "$D/wrk.out")
  local n; n=$(awk '/requests in/ {print $1}' <<<"$out")
  errs=$(awk '/Socket errors/ { gsub(",", ""); s = $4 + $6 + $8 + $10 } /Non-2xx/ { s += $5 } END { print s + 0 }' <<<"$out")
  awk -v name="$1" -v n="$n" -v e="$errs" -v r="$reloads" -v d="$DUR" \
    'BEGIN { printf "%-8s requests=%d (%.0f/s) reloads=%d errors=%d errors_per_reload=%.2f\n", name, n, n / d, r, e, (r ? e / r : 0) }'
}
for round in $(seq "$ROUNDS"); do
  echo "# round $round"
  run tcpvs 18192 reload_tcpvs
  run haproxy 18190 reload_haproxy
done
echo "# tcpvs generation after the runs: $(grep -c 'reloaded: generation' "$D/logs/tcpvs.log") reloads logged"
