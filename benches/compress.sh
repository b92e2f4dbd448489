#!/usr/bin/env bash
# Compression CPU beside nginx `gzip` and HAProxy `compression` (issue 47's "Must show":
# compression CPU per 100 KiB HTML response <= nginx's at the same level and ratio; uncompressed
# responses unchanged in CPU). peerbench's layout (../shared/tools/peerbench.sh): one origin nginx
# (gzip off, sendfile off) pinned with wrk to CPU 1, serving page.html, real HTML of 102400 bytes
# (benches/compress_page.sh: the monitor page, then the README as paragraphs); on CPU 0, each with one
# worker or thread and the access log off:
#   haproxy    compression algo gzip / type text/html (libslz or zlib, whichever the build has:
#              `haproxy -vv | grep -i -E 'zlib|slz'`; tune.comp.maxlevel = LEVEL, which libslz,
#              having no levels, ignores)
#   nginx      gzip on; gzip_comp_level LEVEL; gzip_min_length 1024; gzip_proxied any; gzip_vary
#              on (gzip_types always holds text/html)
#   tcpvs      [virtual.bench.compress] types = ["text/html"], gzip_level = TCPVS_LEVEL, br
#              and zstd at BR_LEVEL and ZSTD_LEVEL
#   tcpvs-off  the same switch without the compress table
# Targets (rounds go target by target, A B C ... A B C ...), by the client's Accept-Encoding:
#   haproxy-gzip nginx-gzip tcpvs-gzip tcpvs-br tcpvs-zstd    (compressed)
#   direct haproxy-plain nginx-plain tcpvs-plain tcpvs-off     (no Accept-Encoding: unchanged)
# Before the rounds, one curl per target: its status, Content-Encoding, body bytes (ratio = bytes /
# 102400) and a check that the body decodes to the page byte for byte (gzip -d, python3's brotli
# module, zstd -d). Each run's row also gives wrk's bytes read per response (headers included),
# which shows the responses stayed compressed under load.
# Output: one row per round and target, then "# medians ..." and `NAME rps=N cpu_us_per_req=N
# bytes=N ratio=N` (peerbench's summary format plus the body's size; benches/report.rs reads it).
# Usage: benches/compress.sh [TCPVS_BINARY]   (default: a copy of target/release/tcpvs taken at
#        the start, /tmp/tcpvs-compress, so a rebuild does not change it under the run)
# Env: ROUNDS (3), DUR (s per run, 5), CONNS (10: compression is CPU-bound, 10 connections
#      saturate a core), LEVEL (nginx's and HAProxy's gzip level: 1, nginx's default),
#      TCPVS_LEVEL (2, tcpvs's default: zlib-rs's level 2 is about zlib's level 1 in ratio; its
#      level 1 is deflate's quick strategy, 30% larger), BR_LEVEL (2), ZSTD_LEVEL (3) (tcpvs's
#      defaults), NGINX_BUFFERING (on, nginx's default: it gzips whole buffers; "off", as
#      peerbench's proxy, sync-flushes each read from the origin and costs it about 1.5x),
#      PORT_BASE (18480: the origin there, the proxies on +10 .. +13), KEEP=1 (keep the work
#      directory), PAGE_SRC (an HTML file to use as the page instead).
# Needs: apt-get install nginx haproxy wrk curl zstd; pip install brotli (the br decoding check)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
for t in nginx haproxy wrk curl zstd gzip python3 taskset cmp; do
  command -v $t >/dev/null || { echo "missing: $t (apt-get install nginx haproxy wrk curl zstd)"; exit 2; }
done
if [ $# -ge 1 ]; then bin=$1; else
  cp "$root/target/release/tcpvs" /tmp/tcpvs-compress; bin=/tmp/tcpvs-compress
fi
[ -x "$bin" ] || { echo "not an executable: $bin"; exit 2; }
ROUNDS=${ROUNDS:-3}; DUR=${DUR:-5}; CONNS=${CONNS:-10}
LEVEL=${LEVEL:-1}; TCPVS_LEVEL=${TCPVS_LEVEL:-2}; BR_LEVEL=${BR_LEVEL:-2}; ZSTD_LEVEL=${ZSTD_LEVEL:-3}; NGINX_BUFFERING=${NGINX_BUFFERING:-on}
base=${PORT_BASE:-18480}; be=$base
hp=$((base + 10)) np=$((base + 11)) tp=$((base + 12)) op=$((base + 13))
page_bytes=102400

D=$(mktemp -d /tmp/tcpvs-compress.XXXX); chmod 755 "$D"; mkdir -p "$D/www" "$D/logs" "$D/check"
PIDS=()
cleanup() {
  stop_gracefully "${PIDS[@]}"
  if [ -n "${KEEP:-}" ]; then echo "# kept $D" >&2; else rm -rf "$D"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The page, and the origin serving it (gzip is off in nginx unless turned on).
"$root/benches/compress_page.sh" "$D/www/page.html" "$page_bytes"
chmod -R a+rX "$D/www"
nginx_backend_config "$D" "$be"

# nginx proxy: peerbench's, with gzip as the brief's peer configuration.
cat > "$D/nginxproxy.conf" <<C
worker_processes 1; daemon off; pid $D/n.pid; error_log $D/logs/n.err;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  gzip on; gzip_comp_level $LEVEL; gzip_min_length 1024;   # gzip_types: text/html always (naming it draws a warning)
  gzip_proxied any; gzip_vary on;
  upstream be { server 127.0.0.1:$be; keepalive 64; }
  server { listen 127.0.0.1:$np backlog=4096;
    location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering $NGINX_BUFFERING; } } }
C
# HAProxy: peerbench's, with compression in the backend (the backend is the file's last section).
haproxy_config "$D/haproxy.cfg" 1 "$hp" "$be"
sed -i "s/^  maxconn 4000$/&\n  tune.comp.maxlevel $LEVEL/" "$D/haproxy.cfg"
printf '  compression algo gzip\n  compression type text/html\n' >> "$D/haproxy.cfg"
# tcpvs with the compress table, and without it.
tcpvs_config "$D/tcpvs.toml" 1 "$tp" "$be" "" "[virtual.bench.compress]
types = [\"text/html\"]
min_size = \"1KiB\"
gzip_level = $TCPVS_LEVEL
br_level = $BR_LEVEL
zstd_level = $ZSTD_LEVEL"
tcpvs_config "$D/tcpvs-off.toml" 1 "$op" "$be"
"$bin" check "$D/tcpvs.toml" >"$D/logs/check.log" 2>&1 || { cat "$D/logs/check.log"; exit 1; }

taskset -c 1 nginx -c "$D/backend.conf" -p "$D" & PIDS+=($!); BP=$!
taskset -c 0 haproxy -f "$D/haproxy.cfg" -db >"$D/logs/h.log" 2>&1 & PIDS+=($!); HP=$!
taskset -c 0 nginx -c "$D/nginxproxy.conf" -p "$D" & PIDS+=($!); NP=$!
taskset -c 0 "$bin" run -c "$D/tcpvs.toml" >"$D/logs/t.log" 2>&1 & PIDS+=($!); TP=$!
taskset -c 0 "$bin" run -c "$D/tcpvs-off.toml" >"$D/logs/o.log" 2>&1 & PIDS+=($!); OP=$!
for port in "$be" "$hp" "$np" "$tp" "$op"; do wait_http "http://127.0.0.1:$port/page.html"; done

# NAME=HOST:PORT=PID=ENCODING ("-": no Accept-Encoding).
targets=(
  "haproxy-gzip=127.0.0.1:$hp=$HP=gzip"
  "nginx-gzip=127.0.0.1:$np=$NP=gzip"
  "tcpvs-gzip=127.0.0.1:$tp=$TP=gzip"
  "tcpvs-br=127.0.0.1:$tp=$TP=br"
  "tcpvs-zstd=127.0.0.1:$tp=$TP=zstd"
  "direct=127.0.0.1:$be=$BP=-"
  "haproxy-plain=127.0.0.1:$hp=$HP=-"
  "nginx-plain=127.0.0.1:$np=$NP=-"
  "tcpvs-plain=127.0.0.1:$tp=$TP=-"
  "tcpvs-off=127.0.0.1:$op=$OP=-"
)

# decode ENCODING FILE: the decoded body on stdout.
decode() {
  case $1 in
    gzip) gzip -dc < "$2" ;;
    zstd) zstd -dcq < "$2" ;;
    br) python3 -c 'import sys, brotli; sys.stdout.buffer.write(brotli.decompress(open(sys.argv[1], "rb").read()))' "$2" ;;
    *) cat "$2" ;;
  esac
}

echo "# haproxy: $(haproxy -vv 2>/dev/null | grep -i -o -E 'built with (libslz|zlib)[^.]*' | head -1 || echo '?');" \
  "nginx $(nginx -v 2>&1 | sed 's/.*\///'); tcpvs $bin; gzip level $LEVEL (tcpvs $TCPVS_LEVEL), br $BR_LEVEL, zstd $ZSTD_LEVEL; nginx proxy_buffering $NGINX_BUFFERING"
declare -A BYTES
for t in "${targets[@]}"; do
  IFS='=' read -r name addr _ enc <<<"$t"
  hdr=(); [ "$enc" != - ] && hdr=(-H "Accept-Encoding: $enc")
  code=$(curl -s --max-time 10 "${hdr[@]}" -D "$D/check/$name.h" -o "$D/check/$name.b" \
    -w '%{http_code}' "http://$addr/page.html") || code=000
  got=$(awk -F': *' 'tolower($1) == "content-encoding" {sub("\r", "", $2); print $2}' "$D/check/$name.h")
  bytes=$(wc -c < "$D/check/$name.b"); BYTES[$name]=$bytes
  want=$enc; [ "$enc" = - ] && want=""
  note=ok
  if [ "$code" != 200 ]; then note="FAILED: status $code"
  elif [ "$got" != "$want" ]; then note="FAILED: Content-Encoding '${got}', expected '${want}'"
  elif ! decode "${got:--}" "$D/check/$name.b" 2>/dev/null | cmp -s - "$D/www/page.html"; then
    note="FAILED: the body does not decode to the page"
  fi
  vary=$(awk -F': *' 'tolower($1) == "vary" {sub("\r", "", $2); print $2}' "$D/check/$name.h")
  printf "# check %-13s status=%s content-encoding=%s bytes=%s ratio=%s vary=%s %s\n" "$name" "$code" \
    "${got:--}" "$bytes" "$(awk -v b="$bytes" -v p="$page_bytes" 'BEGIN{printf "%.3f", b/p}')" "${vary:--}" "$note"
done

# wrk_bytes "N requests in Xs, Y read" line: Y in bytes (wrk's units are powers of 1024).
wrk_bytes() {
  awk '/requests in/ { s = $(NF-1); u = s; sub(/^[0-9.]+/, "", u); n = s + 0;
    m = (u == "KB") ? 1024 : (u == "MB") ? 1048576 : (u == "GB") ? 1073741824 : (u == "TB") ? 1099511627776 : 1;
    printf "%.0f", n * m }'
}

hz=$(getconf CLK_TCK)
for r in $(seq "$ROUNDS"); do
  for t in "${targets[@]}"; do
    IFS='=' read -r name addr pid enc <<<"$t"
    hdr=(); [ "$enc" != - ] && hdr=(-H "Accept-Encoding: $enc")
    t0=$(cpu_ticks "$pid")
    out=$(taskset -c 1 wrk -t1 -c"$CONNS" -d"${DUR}s" "${hdr[@]}" "http://$addr/page.html" 2>/dev/null) || true
    t1=$(cpu_ticks "$pid")
    rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out"); n=$(awk '/requests in/ {print $1}' <<<"$out")
    read_b=$(wrk_bytes <<<"$out")
    errs=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out" | tr '\n' ' ')
    cpu=$(awk -v a="$t0" -v b="$t1" -v n="${n:-0}" -v hz="$hz" 'BEGIN{ if(n>0) printf "%.2f", (b-a)*1e6/hz/n; else print "nan"}')
    per=$(awk -v b="${read_b:-0}" -v n="${n:-0}" 'BEGIN{ if(n>0) printf "%.0f", b/n; else print "nan"}')
    echo "round=$r target=$name rps=${rps:-0} cpu_us_per_req=$cpu read_per_resp=$per ${errs}"
  done
done | tee "$D/rows"

echo "# medians over $ROUNDS rounds (/page.html, $page_bytes B of HTML, $CONNS connections, ${DUR}s runs; gzip level $LEVEL (tcpvs $TCPVS_LEVEL), br $BR_LEVEL, zstd $ZSTD_LEVEL; bytes = body of one response)"
med() { sort -g | awk '{v[NR]=$1} END{ if (NR) print v[int((NR+1)/2)]; else print "nan"}'; }
for t in "${targets[@]}"; do
  name=${t%%=*}
  rps=$(awk -v n="$name" '$2=="target="n {sub("rps=","",$3); print $3}' "$D/rows" | med)
  cpu=$(awk -v n="$name" '$2=="target="n {sub("cpu_us_per_req=","",$4); print $4}' "$D/rows" | med)
  printf "%-13s rps=%s cpu_us_per_req=%s bytes=%s ratio=%s\n" "$name" "$rps" "$cpu" "${BYTES[$name]}" \
    "$(awk -v b="${BYTES[$name]}" -v p="$page_bytes" 'BEGIN{printf "%.3f", b/p}')"
done
