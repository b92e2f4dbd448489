#!/usr/bin/env bash
# Overload must not cascade into an outage (issue 22, part 2): two slow but alive servers
# (benches/attacks/slow_server.py: one connection at a time, a small listen backlog) behind tcpvs
# and behind HAProxy (retries 3, redispatch, checks), the same load through each: wrk with CONNS
# connections for DURATION. Prints, per proxy, the requests answered, how many were not 2xx/3xx,
# wrk's socket errors, and (tcpvs) the servers' states and failures afterwards.
#
# Usage: benches/attacks/overload.sh TCPVS_BINARY [HEALTH]
#   HEALTH: "passive" (default: [pool.*.health] without check, max_fails 3) or "http" (checks
#   every 2 s on both proxies). Environment: CONNS=20 DURATION=5s BACKLOG=2 DELAY_MS=2
#   CONNECT_TIMEOUT=1s ROUNDS=1. Needs haproxy, wrk, curl, python3.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
bin=$(realpath "$1"); health=${2:-passive}
CONNS=${CONNS:-20} DURATION=${DURATION:-5s} BACKLOG=${BACKLOG:-2} DELAY_MS=${DELAY_MS:-2}
CONNECT_TIMEOUT=${CONNECT_TIMEOUT:-1s} ROUNDS=${ROUNDS:-1}
command -v haproxy >/dev/null || PATH=$PATH:/usr/sbin
d=$(mktemp -d /tmp/tcpvs-overload.XXXXXX)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$d"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
s1=$(free_port); s2=$(free_port); hp=$(free_port); tp=$(free_port); ap=$(free_port)

check_tcpvs=""; check_haproxy=""
if [ "$health" = http ]; then
  check_tcpvs='check = "http"
interval = "2s"'
  check_haproxy="check inter 2s"
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
servers = [{ addr = "127.0.0.1:$s1" }, { addr = "127.0.0.1:$s2" }]
[pool.slow.health]
$check_tcpvs
C
cat > "$d/haproxy.cfg" <<C
global
  maxconn 4000
defaults
  mode http
  timeout connect $CONNECT_TIMEOUT
  timeout client 30s
  timeout server 30s
  retries 3
  option redispatch
frontend fe
  bind 127.0.0.1:$hp
  default_backend be
backend be
  balance leastconn
  server s1 127.0.0.1:$s1 $check_haproxy
  server s2 127.0.0.1:$s2 $check_haproxy
C

run() { # NAME PORT
  local out total non2xx errors
  out=$(wrk -t1 -c"$CONNS" -d"$DURATION" "http://127.0.0.1:$2/" 2>&1)
  total=$(awk '/requests in/ {print $1}' <<<"$out")
  non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$out")
  errors=$(grep -o 'Socket errors:.*' <<<"$out" || echo "Socket errors: none")
  echo "$1: $total requests, ${non2xx:-0} not 2xx/3xx; $errors"
}

for r in $(seq "$ROUNDS"); do
  python3 "$here/slow_server.py" "$s1" "$BACKLOG" "$DELAY_MS" & PIDS+=($!)
  python3 "$here/slow_server.py" "$s2" "$BACKLOG" "$DELAY_MS" & PIDS+=($!)
  haproxy -f "$d/haproxy.cfg" -db >"$d/haproxy.log" 2>&1 & hpid=$!; PIDS+=($hpid)
  "$bin" run -c "$d/tcpvs.toml" 2>"$d/tcpvs.log" & tpid=$!; PIDS+=($tpid)
  wait_http "http://127.0.0.1:$hp/" && wait_http "http://127.0.0.1:$tp/"
  echo "round $r: $CONNS connections for $DURATION, backlog $BACKLOG, ${DELAY_MS} ms per request, connect timeout $CONNECT_TIMEOUT, health $health"
  run haproxy "$hp"
  run tcpvs "$tp"
  curl -s "http://127.0.0.1:$ap/stats" | python3 -c '
import json, sys
for p in json.load(sys.stdin)["pools"]:
    servers = ", ".join("%s %s failures=%d timeouts=%d retries=%d" % (s["addr"], s["state"], s["failures"], s["timeouts"], s["retries"]) for s in p["servers"])
    print("  tcpvs servers:", servers, "(panic)" if p.get("panic") else "")'
  echo "  tcpvs log, state changes and panics:"
  grep -E ' -> |panic' "$d/tcpvs.log" | sed -E 's/\x1b\[[0-9;]*m//g; s/^/    /' | head -8 || true
  kill "$tpid" "$hpid" "${PIDS[0]}" "${PIDS[1]}" 2>/dev/null || true
  wait 2>/dev/null || true
  PIDS=()
done
