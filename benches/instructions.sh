#!/usr/bin/env bash
# User-space instructions per small keep-alive request of tcpvs binaries, counted by valgrind's
# callgrind: deterministic where CPU time on this shared 2-core VM is not (ab.sh runs of the same
# two builds differ by several percent from run to run, and the VM exposes no hardware counters
# to `perf stat -e instructions`). Each binary runs with one worker under callgrind beside an
# nginx backend; a warm-up of 400 requests, then N requests over 4 keep-alive connections are
# counted (instrumentation switched on and off around them with callgrind_control). The kernel's
# share (four fifths of a request's CPU here: BENCHMARKS.md) is not counted.
# Usage: benches/instructions.sh BINARY...      Env: N (4000 requests), H2=1 (the requests come as
# HTTP/2 streams with prior knowledge: h2load, 4 connections of 10 streams at once), CLOSE=1 (each
# HTTP/1.1 request on a connection of its own, `Connection: close`: what a connection costs),
# H2_SERVER=1 (the pool speaks HTTP/2 to nginx, h2c with prior knowledge: `protocol = "h2"`),
# KEEP=DIR (the callgrind dumps are kept there, for callgrind_annotate), TCPVS_SWITCH (more
# `[switch]` lines for every binary's rule file, e.g. 'trace = "w3c"')
# Needs: apt-get install valgrind nginx curl (and nghttp2-client with H2=1)
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 BINARY..." >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
n=${N:-4000}
work=$(mktemp -d /tmp/tcpvs-instr.XXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/www" "$work/logs"; chmod 755 "$work"
head -c 100 /dev/zero | tr '\0' a > "$work/www/small.html"; chmod -R a+rX "$work/www"
nginx_backend_config "$work" 18381
if [ "${H2_SERVER:-0}" = 1 ]; then sed -i 's/backlog=4096;/backlog=4096 http2;/' "$work/backend.conf"; fi
nginx -c "$work/backend.conf" -p "$work" & pids+=($!)
cat > "$work/client.py" <<'PY'
import socket, sys
port, n, close = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
request = b"GET /small.html HTTP/1.1\r\nHost: bench\r\nUser-Agent: instructions.sh\r\n\r\n"
if close:
    request = request[:-2] + b"Connection: close\r\n\r\n"
    for _ in range(n):
        c = socket.create_connection(("127.0.0.1", port))
        c.sendall(request)
        data = b""
        while True:
            piece = c.recv(65536)
            if not piece:
                break
            data += piece
        assert data.startswith(b"HTTP/1.1 200"), data[:100]
        c.close()
    sys.exit(0)
connections = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
done = 0
while done < n:
    for c in connections:
        c.sendall(request)
    for c in connections:
        data = b""
        while b"\r\n\r\n" not in data:
            data += c.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length"))
        while len(body) < length:
            body += c.recv(65536)
    done += len(connections)
PY
# One batch of $2 requests to port $1, in HTTP/1.1 or (H2=1) HTTP/2.
load() {
  if [ "${H2:-0}" = 1 ]; then
    h2load -n "$2" -c 4 -m 10 "http://127.0.0.1:$1/small.html" >"$work/logs/h2load.log" 2>&1
    grep -q "$2 succeeded" "$work/logs/h2load.log" || { cat "$work/logs/h2load.log" >&2; exit 1; }
  else
    python3 "$work/client.py" "$1" "$2" "${CLOSE:-0}"
  fi
}
for bin in "$@"; do
  tcpvs_config "$work/t.toml" 1 18390 18381 "${TCPVS_SWITCH:-}"
  if [ "${H2_SERVER:-0}" = 1 ]; then echo 'protocol = "h2"' >> "$work/t.toml"; fi
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$work/cg.out" \
    "$bin" run -c "$work/t.toml" >"$work/logs/valgrind.log" 2>&1 &
  vg=$!
  wait_http "http://127.0.0.1:18390/small.html" >/dev/null
  load 18390 400
  callgrind_control -i on "$vg" >/dev/null 2>&1
  load 18390 "$n"
  callgrind_control -i off "$vg" >/dev/null 2>&1
  callgrind_control -d "$vg" >/dev/null 2>&1
  sleep 1
  kill "$vg"; wait "$vg" 2>/dev/null || true
  dump=$(ls -S "$work"/cg.out* | head -1)
  total=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ && !seen {gsub(",", "", $1); print $1; seen = 1}')
  echo "$bin: $((total / n)) instructions per request (user space, $n requests${H2:+, HTTP/2}${H2_SERVER:+, HTTP/2 to the server}${CLOSE:+, a connection each})"
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP"; cp "$dump" "$KEEP/$(basename "$bin").cg"; fi
  rm -f "$work"/cg.out*
done
