#!/usr/bin/env bash
# HTTP/2 to servers, side by side (issue 44): the proxy speaks h2c (HTTP/2 over plain TCP, with
# prior knowledge) to an nginx origin on 127.0.0.1 whose only listener is `listen ... http2`
# (nginx 1.22: prior knowledge on a plain listener; HTTP/1.1 is not served there), in two
# scenarios, each with two bodies, 100 bytes (/small.html) and 1 MiB (/1m.bin):
#   A "h2 -> h2"        h2load (prior knowledge, H2_CONNS connections x H2_STREAMS streams)
#                       to the proxy's plain listener: DUR seconds (h2load -D) of 100 bytes, a
#                       count of 1 MiB requests (h2load -n N1M): in a window of seconds the
#                       1 MiB streams still running at its end (up to H2_CONNS x H2_STREAMS)
#                       would cost the proxy CPU without being counted
#   B "http/1.1 -> h2"  wrk (HTTP/1.1, keep-alive, CONNS connections, DUR seconds) to the same
#                       listener
# The proxies, each with one plain listener that takes both (a client that begins with the
# HTTP/2 preface is served HTTP/2, any other HTTP/1.1):
#   haproxy  mode http; bind 127.0.0.1:PORT (HAProxy detects the preface on a plain bind);
#            backend: server s1 127.0.0.1:ORIGIN proto h2; http-reuse always
#   tcpvs    [virtual.web] listen = "127.0.0.1:PORT" (http2 = true, the default: prior knowledge
#            on plain listeners); [pool.be] protocol = "h2"
#   nginx    not measured: nginx 1.22 as a proxy speaks only HTTP/1.x to servers (proxy_pass;
#            grpc_pass speaks HTTP/2 but for gRPC only), so it has no place in this bench.
# One thread or worker each, pinned to CPU 0; the load generator and the origin (one worker) on
# CPU 1, as peerbench.sh pins them. Rounds interleave the proxies (A B A B); per proxy the
# medians of req/s and of its CPU µs per request (utime + stime from /proc/PID/stat around each
# run, divided by the requests h2load counted as succeeded, or wrk completed), then
# tcpvs / HAProxy. Every run must have answered 2xx only (h2load: "status codes: N 2xx" at least
# its succeeded requests and no other status, none failed, errored or timed out; wrk: no Non-2xx,
# no socket errors): a warning lists the runs that did not. A proxy that does not start, does
# not answer 200 with the whole body over both protocols, or does not reach the origin over
# HTTP/2 (the origin's /proto tells what it saw) is skipped with a message (a tcpvs that refuses
# protocol = "h2" is skipped, the other runs).
# Usage: benches/upstream-h2.sh
# Env: DUR (s per run, 5), ROUNDS (3), CONNS (wrk's connections, 50), H2_CONNS (h2load -c, 10),
#      H2_STREAMS (h2load -m, 10), N1M (requests of an h2load run of 1 MiB, 500 x DUR),
#      TCPVS (binary, default target/release/tcpvs; never built here: build it first, or point
#      TCPVS at one)
# Needs: apt-get install -y haproxy nginx wrk nghttp2-client curl
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$root/benches/lib.sh"
for t in haproxy nginx wrk h2load curl taskset timeout; do
  command -v $t >/dev/null || { echo "missing: $t (apt-get install -y haproxy nginx wrk nghttp2-client curl)"; exit 2; }
done
DUR=${DUR:-5}; ROUNDS=${ROUNDS:-3}; CONNS=${CONNS:-50}; H2_CONNS=${H2_CONNS:-10}; H2_STREAMS=${H2_STREAMS:-10}
N1M=${N1M:-$((500 * DUR))}
for v in DUR ROUNDS CONNS H2_CONNS H2_STREAMS N1M; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$v must be a positive integer, not '${!v}'"; exit 2; }
done
bin=${TCPVS:-$root/target/release/tcpvs}
ORIGIN=18890 HAPROXY=18891 TCPVS_PORT=18892
for p in $ORIGIN $HAPROXY $TCPVS_PORT; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
    echo "127.0.0.1:$p is taken (another bench still running?)"; exit 2
  fi
done

D=$(mktemp -d /tmp/tcpvs-upstream-h2.XXXX)
PIDS=()
trap 'stop_gracefully "${PIDS[@]}"; rm -rf "$D"' EXIT
trap 'exit 130' INT TERM
chmod 755 "$D"; mkdir -p "$D/www" "$D/logs"
head -c 100 /dev/zero | tr '\0' 'a' > "$D/www/small.html"
head -c 1048576 /dev/urandom > "$D/www/1m.bin"
chmod -R a+rX "$D/www"

# keepalive_requests bounds the requests of an HTTP/2 connection too (nginx >= 1.19.7).
cat > "$D/origin.conf" <<C
worker_processes 1; daemon off; pid $D/o.pid; error_log $D/logs/o.err;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  server { listen 127.0.0.1:$ORIGIN http2 backlog=4096; root $D/www;
    location = /proto { default_type text/plain; return 200 "\$server_protocol\n"; } } }
C
cat > "$D/haproxy.cfg" <<C
global
  nbthread 1
  maxconn 4000
defaults
  mode http
  timeout connect 3s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
frontend fe
  bind 127.0.0.1:$HAPROXY
  default_backend be
backend be
  http-reuse always
  server s1 127.0.0.1:$ORIGIN proto h2
C
cat > "$D/tcpvs.toml" <<C
[switch]
workers = 1
access_log = false

[virtual.web]
listen = "127.0.0.1:$TCPVS_PORT"
default_pool = "be"

[pool.be]
protocol = "h2"
servers = [{ addr = "127.0.0.1:$ORIGIN" }]
C

# The origin: it must answer HTTP/2 with prior knowledge, or nothing can be measured.
taskset -c 1 nginx -c "$D/origin.conf" -p "$D" & PIDS+=($!)
ok=
for _ in $(seq 50); do
  curl -s -o /dev/null --max-time 1 --http2-prior-knowledge "http://127.0.0.1:$ORIGIN/small.html" && { ok=1; break; }
  sleep 0.1
done
[ -n "$ok" ] || { echo "the origin did not answer HTTP/2 with prior knowledge:"; tail -5 "$D/logs/o.err"; exit 1; }
got=$(curl -s -o /dev/null --max-time 5 --http2-prior-knowledge -w 'HTTP/%{http_version} %{http_code} %{size_download}' \
  "http://127.0.0.1:$ORIGIN/1m.bin") || true
echo "# origin 127.0.0.1:$ORIGIN (h2c, prior knowledge): /1m.bin answered $got"
[ "$got" = "HTTP/2 200 1048576" ] || { echo "the origin did not serve /1m.bin whole over HTTP/2"; exit 1; }
echo "# nginx as a proxy: not measured (it speaks only HTTP/1.x to servers)"

# check_proxy NAME PORT PID: the proxy still runs and answers 200 with the whole body for both
# paths within 5 s, over HTTP/1.1 and over HTTP/2 with prior knowledge, and the origin saw
# HTTP/2 from it (its /proto); else sets why.
check_proxy() {
  local name=$1 port=$2 pid=$3 got="" path size v seen
  for _ in $(seq 50); do
    kill -0 "$pid" 2>/dev/null || { why="exited"; return 1; }
    got=$(curl -s -o /dev/null --max-time 2 -w '%{http_code} %{size_download}' "http://127.0.0.1:$port/small.html") || true
    [ "$got" = "200 100" ] && break
    sleep 0.1
  done
  for v in --http1.1 --http2-prior-knowledge; do
    for path in /small.html /1m.bin; do
      size=100; [ $path = /1m.bin ] && size=1048576
      got=$(curl -s -o /dev/null --max-time 5 $v -w '%{http_code} %{size_download}' "http://127.0.0.1:$port$path") || true
      [ "$got" = "200 $size" ] || { why="$path ($v) answered '${got:-nothing}', not '200 $size'"; return 1; }
    done
  done
  seen=()
  for v in --http1.1 --http2-prior-knowledge; do
    got=$(curl -s --max-time 2 $v "http://127.0.0.1:$port/proto") || true
    [ "$got" = "HTTP/2.0" ] || { why="the origin saw '${got:-nothing}' from it ($v), not HTTP/2.0"; return 1; }
    seen+=("${v#--}: $got")
  done
  echo "# $name 127.0.0.1:$port: 200 with the whole body; the origin saw ${seen[0]}, ${seen[1]}"
}

# stop_one PID: SIGTERM, SIGKILL after 5 s, then reaped (lib.sh's stop_gracefully waits for every
# child, the origin and the other proxy too).
stop_one() {
  kill "$1" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# Each proxy on CPU 0; one that fails is stopped and left out.
targets=()
skipped=()
start_proxy() { # NAME PORT LOG COMMAND...
  local name=$1 port=$2 log=$3 pid why=""
  shift 3
  taskset -c 0 "$@" >"$log" 2>&1 & pid=$!
  PIDS+=("$pid")
  if check_proxy "$name" "$port" "$pid"; then
    targets+=("$name=127.0.0.1:$port=$pid")
  else
    echo "# skipping $name: $why; the last lines of its log:"
    tail -n 5 "$log" 2>/dev/null | grep -v '^$' | sed 's/^/#   /' || echo "#   (nothing)"
    stop_one "$pid"
    skipped+=("$name")
  fi
}
start_proxy haproxy $HAPROXY "$D/logs/h.log" haproxy -f "$D/haproxy.cfg" -db
if [ -x "$bin" ]; then
  start_proxy tcpvs $TCPVS_PORT "$D/logs/t.log" "$bin" run -c "$D/tcpvs.toml"
else
  echo "# skipping tcpvs: not an executable: $bin (set TCPVS; this script does not build)"
  skipped+=(tcpvs)
fi
[ ${#targets[@]} -gt 0 ] || { echo "no proxy to measure"; exit 1; }

# load SCENARIO URL: one run of the load generator on CPU 1; prints "REQUESTS RPS [PROBLEMS]".
# h2 (scenario A): h2load (-D DUR, or -n N1M for /1m.bin); REQUESTS its succeeded ones, PROBLEMS
# unless none failed and every answer was 2xx ("status codes" counts the answers whose head came,
# so with -D it may exceed the succeeded requests by those still running at the end).
# h1 (scenario B): wrk; REQUESTS those it completed, PROBLEMS its Non-2xx and socket errors.
load() {
  local out amount=(-D "$DUR")
  if [ "$1" = h2 ]; then
    [[ $2 = */1m.bin ]] && amount=(-n "$N1M")
    out=$(taskset -c 1 timeout $((10 * DUR + 60)) h2load -t1 -c"$H2_CONNS" -m"$H2_STREAMS" "${amount[@]}" "$2" 2>&1) || true
    awk '/^finished in/ { rps = $4 + 0 }
         /^requests:/ { total = $2; ok = $8 + 0; failed = $10 + 0; errored = $12 + 0; tmo = $14 + 0 }
         /^status codes:/ { s2 = $3 + 0; other = $5 + $7 + $9 }
         END { p = ""
               if (ok == 0) p = p " no_requests_succeeded"
               if (failed + errored + tmo > 0) p = p sprintf(" failed=%d errored=%d timeout=%d", failed, errored, tmo)
               if (s2 < ok || other > 0) p = p sprintf(" 2xx=%d of %d succeeded, %d not 2xx", s2, ok, other)
               printf "%d %.2f%s\n", ok, rps, p }' <<<"$out"
  else
    out=$(taskset -c 1 timeout $((DUR + 60)) wrk -t1 -c"$CONNS" -d"${DUR}s" "$2" 2>/dev/null) || true
    awk '/Requests\/sec/ { rps = $2 } /requests in/ { n = $1 }
         /Non-2xx|Socket errors/ { gsub(/^ +| +$/, ""); p = p " " $0 }
         END { if (n + 0 == 0) p = p " no_requests"; printf "%d %s%s\n", n, (rps == "") ? 0 : rps, p }' <<<"$out"
  fi
}

# rounds SCENARIO PATH: ROUNDS rounds, each running the load once per target in turn (A B A B),
# one row per run on stderr and in $D/rows: round, target, rps, cpu_us_per_req, requests, then
# what went wrong if anything did.
rounds() {
  local sc=$1 path=$2 r t name addr pid t0 t1 n rps problems cpu hz
  hz=$(getconf CLK_TCK)
  : > "$D/rows"
  for r in $(seq "$ROUNDS"); do
    for t in "${targets[@]}"; do
      IFS='=' read -r name addr pid <<<"$t"
      t0=$(cpu_ticks "$pid")
      read -r n rps problems < <(load "$sc" "http://$addr$path")
      t1=$(cpu_ticks "$pid")
      cpu=$(awk -v a="$t0" -v b="$t1" -v n="${n:-0}" -v hz="$hz" \
        'BEGIN { if (n > 0) printf "%.2f", (b-a)*1e6/hz/n; else print "nan" }')
      echo "round=$r target=$name rps=${rps:-0} cpu_us_per_req=$cpu requests=${n:-0}${problems:+ warn: $problems}" \
        | tee -a "$D/rows" >&2
    done
  done
}

# ratio: tcpvs / HAProxy of the medians just printed (in $D/medians).
ratio() {
  local s
  for s in haproxy tcpvs; do
    grep -q "^$s .*rps=" "$D/medians" || { echo "ratio tcpvs/haproxy: n/a ($s not measured)"; return; }
  done
  awk '{ sub("rps=", "", $2); sub("cpu_us_per_req=", "", $3); rps[$1] = $2; cpu[$1] = $3 }
       END { r = (rps["haproxy"] > 0) ? sprintf("%.2f", rps["tcpvs"] / rps["haproxy"]) : "nan"
             c = (cpu["haproxy"] > 0 && cpu["tcpvs"] != "nan") ? sprintf("%.2f", cpu["tcpvs"] / cpu["haproxy"]) : "nan"
             print "ratio tcpvs/haproxy: rps=" r " cpu_us_per_req=" c }' "$D/medians"
}

for sc in h2 h1; do
  if [ $sc = h2 ]; then
    what="A, h2 -> h2: h2load, prior knowledge, $H2_CONNS connections x $H2_STREAMS streams"
  else
    what="B, http/1.1 -> h2: wrk, $CONNS connections, keep-alive"
  fi
  for path in /small.html /1m.bin; do
    size="100 B"; [ $path = /1m.bin ] && size="1 MiB"
    rounds "$sc" "$path"
    runs="${DUR} s runs"; [ $sc = h2 ] && [ $path = /1m.bin ] && runs="runs of $N1M requests"
    echo "## HTTP/2 (h2c) to the origin, scenario $what, $size: upstream-h2.sh ($path, $runs; medians of $ROUNDS rounds)"
    print_medians "$D/rows" "${targets[@]}" | tee "$D/medians"
    for s in "${skipped[@]}"; do printf "%-13s skipped (see above)\n" "$s"; done
    ratio
    if grep -q ' warn: ' "$D/rows"; then
      echo "# warning: runs not answered 2xx throughout (their req/s may count failed answers):"
      grep ' warn: ' "$D/rows" | sed 's/^/#   /'
    fi
  done
done
