#!/usr/bin/env bash
# Memory per connection holding a partial request head (slowloris), for HAProxy, the nginx proxy
# and tcpvs, measured the same way. Each proxy runs with one thread or worker on CPU 0 (HAProxy
# nbthread 1, nginx worker_processes 1, tcpvs workers = 1), in front of an nginx backend on CPU 1,
# all on 127.0.0.1, with the same 60 s limit for a request head (HAProxy `timeout http-request`
# and `timeout client`, nginx `client_header_timeout`, tcpvs `header_timeout`; nginx keeps its
# default header buffers, 1k + 4 x 8k). A measurement starts the proxy afresh (freed memory would
# otherwise be reused by the next round), warms it with WARM requests, reads VmRSS
# (/proc/PID/status) and Pss (/proc/PID/smaps_rollup) of the process holding the connections
# (HAProxy's and tcpvs's only process; nginx's worker only, its master holds no connection), then
# benches/slowloris.py on CPU 1 opens N connections, each sending a partial head
# "GET /index.html HTTP/1.1\r\nHost: example\r\n[X-Pad fields]User-Agent: slow" (no blank line)
# and one more byte every TRICKLE s. Once the proxy holds N more descriptors and one trickle has
# passed, VmRSS and Pss are read again; (after - before) / N is the cost per connection in KiB
# (user-space memory only: kernel socket buffers are not in RSS). Variants: "small" (the 57-byte
# head above) and "large" (PAD bytes of X-Pad fields first, ~6 KiB, to show buffer growth).
# Rounds go variant by variant, proxy after proxy; the table shows medians (and min-max).
#
# Usage: benches/slowloris.sh [TCPVS_BINARY...]  (default target/release/tcpvs; several builds
#        for an A/B, targets tcpvs1, tcpvs2, ...)
# Env: N (1500 connections), ROUNDS (5), PAD (6144 bytes of fields in the large variant),
#      VARIANTS ("small large"), ONLY (targets, default "haproxy nginx" and the tcpvs ones),
#      WARM (20 requests), TRICKLE (2 s between the client's extra bytes), KEEP=1 (keep the
#      temporary directory with configs, logs and raw rows)
# Needs: apt-get install haproxy nginx curl; python3; a hard RLIMIT_NOFILE above N + 64
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
N=${N:-1500}; ROUNDS=${ROUNDS:-5}; PAD=${PAD:-6144}; VARIANTS=${VARIANTS:-small large}
WARM=${WARM:-20}; TRICKLE=${TRICKLE:-2}
for t in haproxy nginx curl taskset python3; do command -v $t >/dev/null || { echo "missing: $t"; exit 2; }; done
bins=("$@"); [ $# -gt 0 ] || bins=("$root/target/release/tcpvs")
for b in "${bins[@]}"; do [ -x "$b" ] || { echo "not an executable: $b" >&2; exit 2; }; done
[ "$(ulimit -Hn)" = unlimited ] || [ "$(ulimit -Hn)" -ge $((N + 64)) ] || { echo "ulimit -Hn $(ulimit -Hn) < N + 64" >&2; exit 2; }
ulimit -Sn "$(ulimit -Hn)"   # the client's own limit (slowloris.py raises it too)

BE=18731; BASE=18740
D=$(mktemp -d /tmp/slowloris.XXXX); chmod 755 "$D"; mkdir -p "$D/www" "$D/logs"
echo hello > "$D/www/index.html"; chmod -R a+rX "$D/www"
PIDS=(); PROXY=""; CLIENT=""
cleanup() {
  # shellcheck disable=SC2086
  stop_gracefully $CLIENT $PROXY "${PIDS[@]}"
  [ -n "${KEEP:-}" ] && echo "kept $D" >&2 || rm -rf "$D"
}
trap cleanup EXIT

nginx_backend_config "$D" "$BE"
taskset -c 1 nginx -c "$D/backend.conf" -p "$D" & PIDS+=($!)
wait_http "http://127.0.0.1:$BE/index.html"

cat > "$D/haproxy.cfg" <<C
global
  nbthread 1
  maxconn 4000
defaults
  mode http
  timeout connect 3s
  timeout http-request 60s
  timeout client 60s
  timeout server 30s
  option http-keep-alive
frontend fe
  bind 127.0.0.1:$BASE
  default_backend be
backend be
  http-reuse always
  server s1 127.0.0.1:$BE
C
cat > "$D/nginxproxy.conf" <<C
worker_processes 1; daemon off; pid $D/n.pid; error_log $D/logs/n.err;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000; client_header_timeout 60s;
  upstream be { server 127.0.0.1:$BE; keepalive 64; }
  server { listen 127.0.0.1:$((BASE + 1)) backlog=4096;
    location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
C
targets=(haproxy nginx); i=0
for b in "${bins[@]}"; do
  i=$((i + 1)); name=tcpvs; [ ${#bins[@]} -gt 1 ] && name=tcpvs$i
  tcpvs_config "$D/$name.toml" 1 $((BASE + 1 + i)) "$BE" 'header_timeout = "60s"'
  targets+=("$name")
done
names=()
for t in "${targets[@]}"; do
  [[ " ${ONLY:-haproxy nginx tcpvs tcpvs1 tcpvs2 tcpvs3 tcpvs4} " == *" $t "* ]] && names+=("$t")
done

# start_proxy NAME: starts it on CPU 0, sets PROXY (the pid to signal), WORKER (the pid holding
# connections) and PORT, waits until it answers.
start_proxy() {
  local k
  case $1 in
    haproxy) PORT=$BASE; taskset -c 0 haproxy -f "$D/haproxy.cfg" -db >>"$D/logs/h.log" 2>&1 & PROXY=$! ;;
    nginx) PORT=$((BASE + 1)); taskset -c 0 nginx -c "$D/nginxproxy.conf" -p "$D" & PROXY=$! ;;
    tcpvs*) k=${1#tcpvs}; PORT=$((BASE + 2 + ${k:-1} - 1))
      taskset -c 0 "${bins[${k:-1} - 1]}" run -c "$D/$1.toml" >>"$D/logs/$1.log" 2>&1 & PROXY=$! ;;
  esac
  wait_http "http://127.0.0.1:$PORT/index.html"
  WORKER=$PROXY
  if [ "$1" = nginx ]; then
    for k in $(seq 50); do WORKER=$(pgrep -P "$PROXY" | head -1) && [ -n "$WORKER" ] && break; sleep 0.1; done
  fi
}
stop_proxy() { kill "$PROXY" 2>/dev/null || true; wait "$PROXY" 2>/dev/null || true; PROXY=""; }
kb() { awk -v k="$2" '$1 == k":" {print $2}' "$1"; }   # kb FILE FIELD: a "Field: N kB" value
nfds() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }

# measure NAME VARIANT ROUND: one row (to stdout and $D/rows) "round=R variant=V target=T rss0=
# rss1= pss0= pss1= (kB) held= (connections still open at the last trickle) head= (bytes)
# fds=" (descriptors the proxy gained)
measure() {
  local name=$1 var=$2 r=$3 pad=0 rss0 rss1 pss0 pss1 f0 k held line hb acc
  [ "$var" = large ] && pad=$PAD
  start_proxy "$name"
  for k in $(seq "$WARM"); do curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$PORT/index.html" || true; done
  sleep 0.5
  rss0=$(kb "/proc/$WORKER/status" VmRSS); pss0=$(kb "/proc/$WORKER/smaps_rollup" Pss); f0=$(nfds "$WORKER")
  taskset -c 1 python3 "$root/benches/slowloris.py" 127.0.0.1 "$PORT" "$N" "$pad" 120 "$TRICKLE" \
    >"$D/client.out" 2>"$D/client.err" & CLIENT=$!
  for k in $(seq 600); do grep -q '^connected' "$D/client.out" && break; kill -0 "$CLIENT" 2>/dev/null || break; sleep 0.1; done
  for k in $(seq 300); do [ "$(nfds "$WORKER")" -ge $((f0 + N)) ] && break; sleep 0.1; done
  # one trickle past the accepts, so every connection has been read at least twice
  for k in $(seq $((TRICKLE * 20 + 100))); do grep -q '^alive' "$D/client.out" && break; sleep 0.1; done
  sleep 0.5
  rss1=$(kb "/proc/$WORKER/status" VmRSS); pss1=$(kb "/proc/$WORKER/smaps_rollup" Pss)
  acc=$(( $(nfds "$WORKER") - f0 ))
  line=$(grep '^alive' "$D/client.out" | tail -1 || true)
  held=$(awk '{print $2}' <<<"${line:-alive 0}")
  hb=$(awk '/^connected/ {print $6}' "$D/client.out")
  kill "$CLIENT" 2>/dev/null || true; wait "$CLIENT" 2>/dev/null || true; CLIENT=""
  stop_proxy
  echo "round=$r variant=$var target=$name rss0=$rss0 rss1=$rss1 pss0=$pss0 pss1=$pss1 held=${held:-0} head=${hb:-0} fds=$acc" | tee -a "$D/rows"
}

echo "# slowloris: N=$N connections with a partial head, $ROUNDS rounds, variants: $VARIANTS (large: PAD=$PAD bytes of fields)"
for r in $(seq "$ROUNDS"); do
  for var in $VARIANTS; do
    for name in "${names[@]}"; do measure "$name" "$var" "$r"; done
  done
done

echo
echo "Memory per connection holding a partial head (N=$N, medians of $ROUNDS rounds; RSS of"
echo "HAProxy's process, nginx's worker, tcpvs's process; KiB = 1024 bytes)."
echo
echo "| proxy | variant | head bytes | RSS before (KiB) | RSS KiB/conn | min-max | Pss KiB/conn | held of $N |"
echo "|---|---|---|---|---|---|---|---|"
# col VARIANT TARGET EXPR: one value per round of that row, EXPR over the row's fields f[...]
col() {
  awk -v v="variant=$1" -v t="target=$2" -v n="$N" '$2 == v && $3 == t {
      for (i = 4; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
      print '"$3"' }' "$D/rows" | sort -g
}
med() { awk '{v[NR] = $1} END { if (NR) print v[int((NR + 1) / 2)]; else print "nan" }'; }
for var in $VARIANTS; do
  for name in "${names[@]}"; do
    per=$(col "$var" "$name" '(f["rss1"] - f["rss0"]) / n')
    [ -n "$per" ] || continue
    printf "| %s | %s | %s | %s | %.2f | %.2f-%.2f | %.2f | %s-%s |\n" "$name" "$var" \
      "$(col "$var" "$name" 'f["head"]' | med)" "$(col "$var" "$name" 'f["rss0"]' | med)" \
      "$(med <<<"$per")" "$(head -1 <<<"$per")" "$(tail -1 <<<"$per")" \
      "$(col "$var" "$name" '(f["pss1"] - f["pss0"]) / n' | med)" \
      "$(col "$var" "$name" 'f["held"]' | head -1)" "$(col "$var" "$name" 'f["held"]' | tail -1)"
  done
done
