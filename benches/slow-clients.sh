#!/usr/bin/env bash
# Slow clients in front of a one-worker origin (issue 46): honest requests served beside slow
# uploaders or slow readers, for nginx, HAProxy and tcpvs, each with one worker or thread on
# CPU 0; the origin and the clients (benches/slow_clients.py, asyncio) on CPU 1, every socket on
# 127.0.0.1. The origin has ONE worker: it accepts a connection, serves it, then accepts the next.
# POST /upload reads the whole body and answers "ok", GET /big is 2 MiB by Content-Length,
# GET /small 100 bytes. ORIGIN_KEEPALIVE=0: "Connection: close" after each answer; 1: HTTP/1.1
# keep-alive, the worker stays on a connection until the peer closes it (a single-threaded
# keep-alive application server).
# Scenarios, DUR seconds of honest load each, the slow clients starting 1 s before:
#   uploads: 20 slow uploaders (POST /upload, Content-Length 64 KiB, 512 B every 250 ms) beside
#            20 honest clients in a closed loop of POST /upload with a 1 KiB body;
#   reads:   20 slow readers (GET /big, SO_RCVBUF 4096 and TCP_MAXSEG 1460 before connect, 2 KiB
#            read every 250 ms) beside 20 honest clients in a closed loop of GET /small.
# An honest request has 5 s (a timeout is failed, the client reconnects). Reported per scenario
# and proxy: honest requests served (200, whole body), the honest clients (of 20) that had one
# served at least, failed (timed out among them), p50 and p99
# latency in ms over every honest request (a failed one at the time it took, a timeout at
# 5000 ms), the slow clients' progress, and for tcpvs the ratio to nginx of served and of p99.
# The origin writes an answer in one go: its worker is free once the kernel took the last byte.
# On loopback the send buffer grows up to net.ipv4.tcp_wmem's maximum (4 MiB by default), which
# takes the 2 MiB of /big whole, so with ORIGIN_KEEPALIVE=0 a slow reader holds no worker behind
# any proxy; with ORIGIN_KEEPALIVE=1 the worker then waits on that connection for the next
# request until the proxy closes it (the header line prints tcp_wmem).
# Every (scenario, proxy) run starts a fresh origin and a fresh proxy, which is probed by a TCP
# connect only (an HTTP warm-up would leave a kept server connection behind in some proxies).
# Targets:
#   nginx         proxy_buffering and proxy_request_buffering on (defaults), HTTP/1.0 to the
#                 origin without upstream keepalive (defaults), client_max_body_size 10m,
#                 proxy_read_timeout 30s
#   haproxy       option http-buffer-request, timeouts connect/client/server 30s, tune.bufsize
#                 default (16384)
#   haproxy-512k  the same with tune.bufsize 524288
#   tcpvs         workers = 1, access_log = false, buffer_memory = "256MiB"; the pool with
#                 request_buffer = "1MiB", response_buffer = "4MiB"
#   tcpvs-nobuf   the same without request_buffer and response_buffer (the before)
#   tcpvs-one     tcpvs with one place at the server (max_conns = 1, queue_timeout = "5s"):
#                 what an operator writes for a server of one worker that keeps its
#                 connections (ORIGIN_KEEPALIVE=1), so that requests queue for the one kept
#                 connection instead of opening others the worker never takes
#   tcpvs-noreuse tcpvs with server_idle_max = 0: no server connection kept between requests
#                 (nginx's default), the other way to serve such a server
#
# Usage: benches/slow-clients.sh
# Env: DUR (30 s), SCENARIOS ("uploads reads"), ONLY (targets, default all seven above),
#      ORIGIN_KEEPALIVE (0), TCPVS (binary, default /tmp/tcpvs-base), KEEP=1 (keep the temporary
#      directory with configs, logs and raw rows)
# Needs: apt-get install haproxy nginx (installed when missing); python3; taskset
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$root/benches/lib.sh"
DUR=${DUR:-30}; SCENARIOS=${SCENARIOS:-uploads reads}; ORIGIN_KEEPALIVE=${ORIGIN_KEEPALIVE:-0}
TCPVS=${TCPVS:-/tmp/tcpvs-base}
ALL="nginx haproxy haproxy-512k tcpvs tcpvs-nobuf tcpvs-one tcpvs-noreuse"
ONLY=${ONLY:-$ALL}
case $ORIGIN_KEEPALIVE in 0|1) ;; *) echo "ORIGIN_KEEPALIVE must be 0 or 1" >&2; exit 2 ;; esac
for s in $SCENARIOS; do
  case $s in uploads|reads) ;; *) echo "unknown scenario: $s (uploads, reads)" >&2; exit 2 ;; esac
done
for t in $ONLY; do
  [[ " $ALL " == *" $t "* ]] || { echo "unknown target: $t ($ALL)" >&2; exit 2; }
done
if ! command -v haproxy >/dev/null || ! command -v nginx >/dev/null; then
  apt-get install -y haproxy nginx >&2
fi
for t in haproxy nginx taskset python3; do command -v $t >/dev/null || { echo "missing: $t" >&2; exit 2; }; done
if [[ " $ONLY " == *" tcpvs"* ]]; then
  [ -x "$TCPVS" ] || { echo "not an executable: $TCPVS (set TCPVS)" >&2; exit 2; }
fi
ulimit -Sn "$(ulimit -Hn)"

ORIGIN=18860; BASE=18861   # the proxies listen on BASE, BASE+1, ... in the order of ALL
D=$(mktemp -d /tmp/slow-clients.XXXX); chmod 755 "$D"; mkdir -p "$D/logs"
ORIGIN_PID=""; PROXY=""; CLIENT=""
cleanup() {
  # shellcheck disable=SC2086
  stop_gracefully $CLIENT $PROXY $ORIGIN_PID
  if [ -n "${KEEP:-}" ]; then echo "kept $D" >&2; else rm -rf "$D"; fi
}
trap cleanup EXIT

port_of() {
  local i=0 t
  for t in $ALL; do
    [ "$t" = "$1" ] && { echo $((BASE + i)); return; }
    i=$((i + 1))
  done
}

cat > "$D/nginx.conf" <<C
worker_processes 1; daemon off; pid $D/n.pid; error_log $D/logs/nginx.err;
events { worker_connections 4096; }
http { access_log off; client_max_body_size 10m;
  server { listen 127.0.0.1:$(port_of nginx) backlog=4096;
    location / { proxy_pass http://127.0.0.1:$ORIGIN; proxy_read_timeout 30s; } } }
C
# haproxy_cfg NAME BUFSIZE_LINE
haproxy_cfg() {
  cat > "$D/$1.cfg" <<C
global
  nbthread 1
  maxconn 4000
  $2
defaults
  mode http
  option http-buffer-request
  timeout connect 30s
  timeout client 30s
  timeout server 30s
frontend fe
  bind 127.0.0.1:$(port_of "$1")
  default_backend be
backend be
  server s1 127.0.0.1:$ORIGIN
C
}
haproxy_cfg haproxy ""
haproxy_cfg haproxy-512k "tune.bufsize 524288"
# tcpvs_cfg NAME POOL_LINES [SERVER_KEYS] [SWITCH_LINES]
tcpvs_cfg() {
  cat > "$D/$1.toml" <<C
[switch]
workers = 1
access_log = false
buffer_memory = "256MiB"
${4:-}

[virtual.bench]
listen = "127.0.0.1:$(port_of "$1")"
default_pool = "be"

[pool.be]
$2
servers = [{ addr = "127.0.0.1:$ORIGIN"${3:-} }]
C
}
tcpvs_cfg tcpvs $'request_buffer = "1MiB"\nresponse_buffer = "4MiB"'
tcpvs_cfg tcpvs-nobuf ""
tcpvs_cfg tcpvs-one $'request_buffer = "1MiB"\nresponse_buffer = "4MiB"\nqueue_timeout = "5s"' ", max_conns = 1"
tcpvs_cfg tcpvs-noreuse $'request_buffer = "1MiB"\nresponse_buffer = "4MiB"' "" "server_idle_max = 0"

# wait_port PORT: up to 5 s for something to accept on 127.0.0.1:PORT (a TCP connect, no request).
wait_port() {
  local i
  for i in $(seq 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on 127.0.0.1:$1" >&2
  return 1
}

# start_proxy NAME: on CPU 0, sets PROXY (its pid) and waits until it accepts.
start_proxy() {
  case $1 in
    nginx) taskset -c 0 nginx -c "$D/nginx.conf" -p "$D" & PROXY=$! ;;
    haproxy*) taskset -c 0 haproxy -f "$D/$1.cfg" -db >>"$D/logs/$1.log" 2>&1 & PROXY=$! ;;
    tcpvs*) taskset -c 0 "$TCPVS" run -c "$D/$1.toml" >>"$D/logs/$1.log" 2>&1 & PROXY=$! ;;
  esac
  wait_port "$(port_of "$1")"
}

# measure SCENARIO NAME: a fresh origin and proxy, the clients; one row to stdout and $D/rows.
measure() {
  local scenario=$1 name=$2 out
  taskset -c 1 python3 "$root/benches/slow_clients.py" origin "$ORIGIN" "$ORIGIN_KEEPALIVE" \
    >>"$D/logs/origin.log" 2>&1 & ORIGIN_PID=$!
  wait_port "$ORIGIN"
  start_proxy "$name"
  taskset -c 1 python3 "$root/benches/slow_clients.py" run "$scenario" "$(port_of "$name")" "$DUR" \
    >"$D/client.out" 2>>"$D/logs/client.err" & CLIENT=$!
  wait "$CLIENT" || echo "client of $scenario/$name exited with $?" >&2
  CLIENT=""
  out=$(tail -1 "$D/client.out")
  stop_gracefully "$PROXY" "$ORIGIN_PID"; PROXY=""; ORIGIN_PID=""   # (it waits for every child)
  echo "scenario=$scenario target=$name keepalive=$ORIGIN_KEEPALIVE ${out:-served=0 clients=0 failed=0 timeouts=0 p50_ms=nan p99_ms=nan slow_done=0 slow_failed=0 slow_kib=0}" \
    | tee -a "$D/rows"
}

echo "# slow clients: DUR=$DUR s, scenarios: $SCENARIOS, ORIGIN_KEEPALIVE=$ORIGIN_KEEPALIVE, targets: $ONLY, tcpvs: $TCPVS, tcp_wmem: $(tr -s '\t ' ' ' </proc/sys/net/ipv4/tcp_wmem)"
for scenario in $SCENARIOS; do
  for name in $ONLY; do measure "$scenario" "$name"; done
done

echo
echo "Honest requests beside 20 slow clients, one-worker origin (ORIGIN_KEEPALIVE=$ORIGIN_KEEPALIVE),"
echo "DUR=$DUR s; latency over every honest request, a failed one at the time it took (5 s timeout)."
echo
echo "| scenario | proxy | served | clients served | failed (timed out) | p50 ms | p99 ms | served / nginx | p99 / nginx | slow: done / failed / KiB moved |"
echo "|---|---|---|---|---|---|---|---|---|---|"
# field ROW KEY: the value of KEY=... in ROW
field() { tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k {print $2}'; }
for scenario in $SCENARIOS; do
  ref=$(grep "^scenario=$scenario target=nginx " "$D/rows" || true)
  for name in $ONLY; do
    row=$(grep "^scenario=$scenario target=$name " "$D/rows" || true)
    [ -n "$row" ] || continue
    ratio_s=-; ratio_p=-
    if [[ $name == tcpvs* && -n $ref ]]; then
      ratio_s=$(awk -v a="$(field "$row" served)" -v b="$(field "$ref" served)" \
        'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
      ratio_p=$(awk -v a="$(field "$row" p99_ms)" -v b="$(field "$ref" p99_ms)" \
        'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
    fi
    printf "| %s | %s | %s | %s of 20 | %s (%s) | %s | %s | %s | %s | %s / %s / %s |\n" "$scenario" "$name" \
      "$(field "$row" served)" "$(field "$row" clients)" "$(field "$row" failed)" "$(field "$row" timeouts)" \
      "$(field "$row" p50_ms)" "$(field "$row" p99_ms)" "$ratio_s" "$ratio_p" \
      "$(field "$row" slow_done)" "$(field "$row" slow_failed)" "$(field "$row" slow_kib)"
  done
done
