#!/usr/bin/env bash
# A server killed and restarted under load (issue 10): two nginx backends behind the proxy, wrk
# keep-alive GETs for DUR seconds; in the "kills" runs one backend is killed (SIGKILL) every
# PERIOD seconds and started again PERIOD/2 later. Prints, per proxy and run, the requests, the
# non-2xx answers and socket errors wrk saw (goal for tcpvs: 0 and 0) and the p50/p99 latency,
# beside the same run without kills.
#
# tcpvs: passive detection (max_fails 3) plus a tcp check every 500 ms, rise 2.
# HAProxy 2.6: `check inter 500 rise 2 fall 3 observe layer4 error-limit 1 on-error mark-down`,
# `option redispatch`, `retries 3` (its way to move a failed request to another server).
#
# Usage: benches/chaos.sh [TCPVS_BINARY]       Env: DUR (60), PERIOD (5), CONNS (50)
# Needs: apt-get install haproxy nginx wrk curl. Loopback only; every loop is bounded.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
DUR=${DUR:-60}; PERIOD=${PERIOD:-5}; CONNS=${CONNS:-50}
bin=${1:-$root/target/release/tcpvs}
for t in haproxy nginx wrk curl; do command -v "$t" >/dev/null || { echo "missing: $t"; exit 2; }; done
[ -x "$bin" ] || { echo "no tcpvs binary at $bin (cargo build --release)"; exit 2; }
D=$(mktemp -d /tmp/chaos.XXXX)
chmod 755 "$D"   # nginx workers run as nobody
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for f in "$D"/b1/b.pid "$D"/b2/b.pid; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  rm -rf "$D"
}
trap cleanup EXIT
B1=19301; B2=19302; TCPVS=19310; HAPROXY=19311
for b in b1 b2; do
  mkdir -p "$D/$b/www" "$D/$b/logs"
  head -c 100 /dev/zero | tr '\0' x > "$D/$b/www/small.html"
done
nginx_backend_config "$D/b1" $B1
nginx_backend_config "$D/b2" $B2
# One process per backend, so a kill takes the server down whole (a worker outlives its master).
sed -i '1s/^/master_process off; /' "$D/b1/backend.conf" "$D/b2/backend.conf"
# In a subshell, so this shell does not report each killed backend as a job.
start_backend() { (nginx -c "$D/$1/backend.conf" -p "$D/$1" 2>/dev/null </dev/null >/dev/null &); }
start_backend b1; start_backend b2
wait_http "127.0.0.1:$B1/small.html"; wait_http "127.0.0.1:$B2/small.html"

cat > "$D/tcpvs.toml" <<C
[switch]
workers = 1
access_log = false
connect_timeout = "1s"
[virtual.bench]
listen = "127.0.0.1:$TCPVS"
default_pool = "backend"
[pool.backend]
servers = [{ addr = "127.0.0.1:$B1" }, { addr = "127.0.0.1:$B2" }]
[pool.backend.health]
check = "tcp"
interval = "500ms"
timeout = "500ms"
rise = 2
fall = 3
C
cat > "$D/haproxy.cfg" <<C
global
  nbthread 1
defaults
  mode http
  timeout connect 1s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
  option redispatch
  retries 3
frontend f
  bind 127.0.0.1:$HAPROXY
  default_backend b
backend b
  balance leastconn
  server s1 127.0.0.1:$B1 check inter 500 rise 2 fall 3 observe layer4 error-limit 1 on-error mark-down
  server s2 127.0.0.1:$B2 check inter 500 rise 2 fall 3 observe layer4 error-limit 1 on-error mark-down
C
RUST_LOG=info "$bin" run -c "$D/tcpvs.toml" 2> "$D/tcpvs.log" & pids+=($!)
haproxy -f "$D/haproxy.cfg" -db 2> "$D/haproxy.log" & pids+=($!)
wait_http "127.0.0.1:$TCPVS/small.html"; wait_http "127.0.0.1:$HAPROXY/small.html"
for port in $B1 $B2 $TCPVS $HAPROXY; do
  curl -sf -o /dev/null "http://127.0.0.1:$port/small.html" || { echo "no 200 from port $port"; exit 1; }
done

# kill_loop: kills backend b1 every PERIOD s and restarts it PERIOD/2 s later, for DUR s.
kill_loop() {
  local rounds=$(( DUR / PERIOD )) half
  half=$(awk "BEGIN { print $PERIOD / 2 }")
  for _ in $(seq 1 "$rounds"); do
    sleep "$half"
    if [ -f "$D/b1/b.pid" ]; then
      kill -9 "$(cat "$D/b1/b.pid")" 2>/dev/null || true
      rm -f "$D/b1/b.pid"
    fi
    sleep "$half"
    start_backend b1
  done
}

printf '%-8s %-8s %10s %8s %8s %9s %9s\n' proxy run requests non2xx errors p50 p99
for run in calm kills; do
  for target in tcpvs:$TCPVS haproxy:$HAPROXY; do
    name=${target%%:*}; port=${target##*:}
    wait_http "127.0.0.1:$B1/small.html"
    killer=""
    if [ "$run" = kills ]; then kill_loop & killer=$!; fi
    out=$(wrk -t1 -c"$CONNS" -d"${DUR}s" --latency "http://127.0.0.1:$port/small.html" 2>&1 || true)
    [ -n "$killer" ] && wait "$killer"
    requests=$(awk '/requests in/ { print $1 }' <<<"$out")
    non2xx=$(awk '/Non-2xx/ { print $NF }' <<<"$out"); non2xx=${non2xx:-0}
    errors=$(awk -F'[ ,]+' '/Socket errors/ { print $4+$6+$8+$10 }' <<<"$out"); errors=${errors:-0}
    p50=$(awk '$1 == "50%" { print $2 }' <<<"$out")
    p99=$(awk '$1 == "99%" { print $2 }' <<<"$out")
    printf '%-8s %-8s %10s %8s %8s %9s %9s\n' "$name" "$run" "$requests" "$non2xx" "$errors" "$p50" "$p99"
  done
done
echo "tcpvs transitions logged: $(grep -c -- '-> down' "$D/tcpvs.log" || true) down, $(grep -c -- '-> up' "$D/tcpvs.log" || true) up; warning lines: $(grep -c WARN "$D/tcpvs.log" || true)"
