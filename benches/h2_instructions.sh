#!/usr/bin/env bash
# User-space instructions per HTTP/2 request of HAProxy, nginx and tcpvs, counted by valgrind's
# callgrind: deterministic where CPU time on this shared 2-core VM is not (other work on the
# machine moves benches/h2load.sh's CPU figures by tens of percent; the VM exposes no hardware
# counters to `perf stat`). As benches/instructions.sh does for tcpvs alone: each proxy, one
# thread or process (nginx `master_process off`), runs under callgrind beside an nginx backend
# (HTTP/1.1 keep-alive); a warm-up of 400 requests, then N 100-byte requests with h2load over h2c
# (prior knowledge), CONNS connections x STREAMS streams, counted with instrumentation switched on
# and off around them (callgrind_control). The kernel's share is not counted.
# Usage: benches/h2_instructions.sh [TCPVS_BINARY]   (default target/release/tcpvs)
# Env: N (4000), CONNS (4), STREAMS (10), KEEP=DIR (the dumps, NAME.cg, for callgrind_annotate)
# Needs: apt-get install valgrind haproxy nginx nghttp2-client curl
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
for t in valgrind callgrind_control callgrind_annotate haproxy nginx h2load curl; do
  command -v $t >/dev/null || { echo "missing: $t"; exit 2; }
done
[ $# -le 1 ] || { echo "usage: $0 [TCPVS_BINARY]"; exit 2; }
bin=${1:-$root/target/release/tcpvs}
[ -x "$bin" ] || { echo "not an executable: $bin"; exit 2; }
n=${N:-4000}; conns=${CONNS:-4}; streams=${STREAMS:-10}
w=$(mktemp -d /tmp/tcpvs-h2-instr.XXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$w"; }
trap cleanup EXIT
mkdir -p "$w/www" "$w/logs"; chmod 755 "$w"
head -c 100 /dev/zero | tr '\0' a > "$w/www/small.html"; chmod -R a+rX "$w/www"
be=18481
nginx_backend_config "$w" "$be"
nginx -c "$w/backend.conf" -p "$w" & pids+=($!)
wait_http "http://127.0.0.1:$be/small.html" >/dev/null
cat > "$w/haproxy.cfg" <<C
global
  nbthread 1
defaults
  mode http
  timeout connect 3s
  timeout client 60s
  timeout server 60s
frontend h2c
  bind 127.0.0.1:18490 proto h2
  default_backend be
backend be
  http-reuse always
  server s1 127.0.0.1:$be
C
cat > "$w/nginx.conf" <<C
worker_processes 1; master_process off; daemon off; pid $w/n.pid; error_log $w/logs/n.err;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  upstream be { server 127.0.0.1:$be; keepalive 64; }
  server { listen 127.0.0.1:18491 http2;
    location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; } } }
C
tcpvs_config "$w/tcpvs.toml" 1 18492 "$be"
# load PORT COUNT: COUNT requests over h2c, every one answered.
load() {
  h2load -n "$2" -c "$conns" -m "$streams" "http://127.0.0.1:$1/small.html" >"$w/logs/h2load.log" 2>&1
  grep -q " $2 succeeded" "$w/logs/h2load.log" || { cat "$w/logs/h2load.log" >&2; exit 1; }
}
echo "# user-space instructions per request: $n h2c requests of 100 bytes, $conns connections x $streams streams"
for who in haproxy nginx tcpvs; do
  case $who in
    haproxy) port=18490; cmd=(haproxy -f "$w/haproxy.cfg" -db) ;;
    nginx) port=18491; cmd=(nginx -c "$w/nginx.conf" -p "$w") ;;
    tcpvs) port=18492; cmd=("$bin" run -c "$w/tcpvs.toml") ;;
  esac
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$w/cg.$who" "${cmd[@]}" \
    >"$w/logs/valgrind.$who" 2>&1 &
  vg=$!
  for _ in $(seq 100); do
    h2load -n1 -c1 "http://127.0.0.1:$port/small.html" 2>/dev/null | grep -q ' 1 succeeded' && break
    sleep 0.3
  done
  load "$port" 400
  callgrind_control -i on "$vg" >/dev/null 2>&1
  load "$port" "$n"
  callgrind_control -i off "$vg" >/dev/null 2>&1
  callgrind_control -d "$vg" >/dev/null 2>&1
  sleep 1
  kill "$vg"; wait "$vg" 2>/dev/null || true
  dump=$(ls -S "$w"/cg."$who"* | head -1)
  total=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ && !seen {gsub(",", "", $1); print $1; seen = 1}')
  echo "$who: $((total / n)) instructions per request"
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP"; cp "$dump" "$KEEP/$who.cg"; fi
done
