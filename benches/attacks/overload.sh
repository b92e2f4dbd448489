#!/usr/bin/env bash
# Overload must not cascade into an outage (issue 22, part 2; issue 42, item 6): two slow but
# alive servers (benches/attacks/slow_server.py: one connection at a time, a small listen
# backlog) behind tcpvs and behind HAProxy (retries 3, redispatch, checks), the same load
# through each: wrk with CONNS connections for DURATION. Prints, per proxy, the requests
# answered, how many were not 2xx/3xx, wrk's socket errors (its `timeout` counts requests slower
# than 2 s, answered or not), and (tcpvs) the servers' states and counters afterwards:
# `connections` above `requests` are SYNs sent again after a full accept queue dropped them.
#
# Each proxy gets servers of its own, started afresh and listening before the proxy starts: a
# proxy that ran before would otherwise leave its queued and retried connections in the
# servers' accept queues at the start of the next one's run, and a proxy started before its
# servers listen answers its first requests with instant errors (both skewed earlier rounds).
#
# Usage: benches/attacks/overload.sh TCPVS_BINARY [HEALTH]
#   HEALTH: "passive" (default: [pool.*.health] without check, max_fails 3) or "http" (checks
#   every 2 s on both proxies). Environment: CONNS=20 DURATION=5s BACKLOG=2 DELAY_MS=2
#   CONNECT_TIMEOUT=1s ROUNDS=1; MAXCONN=N gives each server HAProxy's `maxconn N` and tcpvs's
#   `max_conns = N` (both queue the rest: `timeout queue` and `queue_timeout` of 5 s). The
#   operations check of issue 42 ran DELAY_MS=25 (some 420 requests in 5 s). Needs haproxy, wrk,
#   curl, python3.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
bin=$(realpath "$1"); health=${2:-passive}
CONNS=${CONNS:-20} DURATION=${DURATION:-5s} BACKLOG=${BACKLOG:-2} DELAY_MS=${DELAY_MS:-2}
CONNECT_TIMEOUT=${CONNECT_TIMEOUT:-1s} ROUNDS=${ROUNDS:-1} MAXCONN=${MAXCONN:-}
command -v haproxy >/dev/null || PATH=$PATH:/usr/sbin
d=$(mktemp -d /tmp/tcpvs-overload.XXXXXX)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$d"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
hp=$(free_port); tp=$(free_port); ap=$(free_port)
# Each proxy's own pair of servers.
h1=$(free_port); h2=$(free_port); t1=$(free_port); t2=$(free_port)

check_tcpvs=""; check_haproxy=""
if [ "$health" = http ]; then
  check_tcpvs='check = "http"
interval = "2s"'
  check_haproxy="check inter 2s"
fi
limit_tcpvs=""; limit_haproxy=""; queue_tcpvs=""; queue_haproxy=""
if [ -n "$MAXCONN" ]; then
  limit_tcpvs=", max_conns = $MAXCONN"; limit_haproxy="maxconn $MAXCONN"
  queue_tcpvs='queue_timeout = "5s"'; queue_haproxy="timeout queue 5s"
fi
cat > "$d/tcpvs.toml" <<C
[switch]
access_log = false
connect_timeout = "$CONNECT_TIMEOUT"
[admin]
listen = "127.0.0.1:$ap"
[virtual.web]
listen = "127.0.0.1:$tp"
default_pool = "slow"
[pool.slow]
scheduler = "wlc"
servers = [{ addr = "127.0.0.1:$t1"$limit_tcpvs }, { addr = "127.0.0.1:$t2"$limit_tcpvs }]
[pool.slow.health]
$check_tcpvs
$queue_tcpvs
C
cat > "$d/haproxy.cfg" <<C
global
  maxconn 4000
defaults
  mode http
  timeout connect $CONNECT_TIMEOUT
  timeout client 30s
  timeout server 30s
  $queue_haproxy
  retries 3
  option redispatch
frontend fe
  bind 127.0.0.1:$hp
  default_backend be
backend be
  balance leastconn
  server s1 127.0.0.1:$h1 $check_haproxy $limit_haproxy
  server s2 127.0.0.1:$h2 $check_haproxy $limit_haproxy
C

# start_servers PORT PORT: two slow servers, returned when both listen.
start_servers() {
  python3 "$here/slow_server.py" "$1" "$BACKLOG" "$DELAY_MS" & PIDS+=($!)
  python3 "$here/slow_server.py" "$2" "$BACKLOG" "$DELAY_MS" & PIDS+=($!)
  local i
  for i in $(seq 50); do
    python3 -c 'import socket, sys
for port in sys.argv[1:]: socket.create_connection(("127.0.0.1", int(port)), timeout=1).close()' "$1" "$2" \
      2>/dev/null && return 0
    sleep 0.1
  done
  echo "the slow servers on $1 and $2 did not listen" >&2
  return 1
}

# wait_ok URL: up to 5 s for URL to answer 200 through a proxy just started.
wait_ok() {
  local i
  for i in $(seq 50); do
    curl -sf -o /dev/null --max-time 2 "$1" && return 0
    sleep 0.1
  done
  echo "no 200 from $1" >&2
  return 1
}

run() { # NAME PORT
  local out total non2xx errors
  out=$(wrk -t1 -c"$CONNS" -d"$DURATION" "http://127.0.0.1:$2/" 2>&1)
  total=$(awk '/requests in/ {print $1}' <<<"$out")
  non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$out")
  errors=$(grep -o 'Socket errors:.*' <<<"$out" || echo "Socket errors: none")
  echo "$1: $total requests, ${non2xx:-0} not 2xx/3xx; $errors"
}

# stop PID...: the processes of one proxy's run, and nothing else.
stop() {
  kill "$@" 2>/dev/null || true
  local p
  for p in "$@"; do wait "$p" 2>/dev/null || true; done
}

for r in $(seq "$ROUNDS"); do
  echo "round $r: $CONNS connections for $DURATION, backlog $BACKLOG, ${DELAY_MS} ms per request, connect timeout $CONNECT_TIMEOUT, health $health${MAXCONN:+, maxconn $MAXCONN}"
  PIDS=()
  start_servers "$h1" "$h2"
  haproxy -f "$d/haproxy.cfg" -db >"$d/haproxy.log" 2>&1 & PIDS+=($!)
  wait_ok "http://127.0.0.1:$hp/"
  run haproxy "$hp"
  stop "${PIDS[@]}"

  PIDS=()
  start_servers "$t1" "$t2"
  "$bin" run -c "$d/tcpvs.toml" 2>"$d/tcpvs.log" & PIDS+=($!)
  wait_ok "http://127.0.0.1:$tp/"
  run tcpvs "$tp"
  curl -s "http://127.0.0.1:$ap/stats" | python3 -c '
import json, sys
for p in json.load(sys.stdin)["pools"]:
    for s in p["servers"]:
        print("  tcpvs server %s %s: requests=%d connections=%d failures=%d timeouts=%d retries=%d" % (s["addr"], s["state"], s["requests"], s["connections"], s["failures"], s["timeouts"], s["retries"]))
    if p.get("panic"):
        print("  tcpvs pool in panic")'
  echo "  tcpvs log, state changes and panics:"
  grep -E ' -> |panic' "$d/tcpvs.log" | sed -E 's/\x1b\[[0-9;]*m//g; s/^/    /' | head -8 || true
  stop "${PIDS[@]}"
done
