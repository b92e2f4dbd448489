# Shared by benches/h2load.sh and benches/h2_idle_memory.sh (sourced, after benches/lib.sh):
# HTTP/2 from clients to HAProxy, nginx and tcpvs, each relaying to the same nginx backend over
# HTTP/1.1 keep-alive connections (peerbench's backend: one worker on CPU 1 serving 100 bytes and
# 1 MiB, sendfile off, access log off).
#
# start_h2_peers DIR TCPVS_BINARY: one ECDSA P-256 self-signed certificate made here (DIR/site.pem,
# DIR/site.key); on CPU 0, each with ONE thread or worker:
#   HAProxy  TLS (ALPN h2,http/1.1) on H2_BASE,     h2c (`proto h2`, prior knowledge) on H2_BASE+1
#   nginx    TLS (`ssl http2`)      on H2_BASE+2,   h2c (`http2` on a plain listen)   on H2_BASE+3
#   tcpvs    TLS (ALPN h2 first)    on H2_BASE+4,   h2c (preface on a plain service)  on H2_BASE+5
# and the backend on H2_BASE+9 (CPU 1). H2_BASE defaults to 18700.
# Each proxy may keep BACKEND_IDLE (1024) idle backend connections: nginx `keepalive`, tcpvs
# `server_idle_max` (HAProxy keeps every idle connection by default: pool-max-conn -1), so that
# 10 connections x 100 streams (1000 requests in flight) do not open and close backend
# connections in a loop in one proxy and not in another. H2_IDLE_TIMEOUT (120 s) is every
# proxy's idle limit for a client connection (benches/h2_idle_memory.sh holds them idle).
# TCPVS_SWITCH: extra lines for tcpvs's [switch] table.
# Sets PIDS (what stop_gracefully stops), BP HP NP TP (the pids of backend, HAProxy, nginx's
# master, tcpvs), H2_TLS and H2_C ("NAME=127.0.0.1:PORT=PID" of each proxy, in that order:
# haproxy nginx tcpvs), and waits until every listener answers over HTTP/2.
start_h2_peers() {
  local D=$1 bin=$2 base=${H2_BASE:-18700} idle=${BACKEND_IDLE:-1024} to=${H2_IDLE_TIMEOUT:-120}
  local be=$((base + 9)) addr t
  [ -x "$bin" ] || { echo "not an executable: $bin" >&2; return 2; }
  mkdir -p "$D/www" "$D/logs"; chmod 755 "$D"
  head -c 100 /dev/zero | tr '\0' 'a' > "$D/www/small.html"
  head -c 1048576 /dev/urandom > "$D/www/1m.bin"
  chmod -R a+rX "$D/www"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
    -keyout "$D/site.key" -out "$D/site.pem" -subj "/CN=bench.test" \
    -addext "subjectAltName=DNS:bench.test" 2>/dev/null
  cat "$D/site.pem" "$D/site.key" > "$D/site.crtkey"
  nginx_backend_config "$D" "$be"
  cat > "$D/haproxy.cfg" <<C
global
  nbthread 1
  maxconn 8000
defaults
  mode http
  timeout connect 3s
  timeout client ${to}s
  timeout server ${to}s
  timeout http-keep-alive ${to}s
  option http-keep-alive
frontend tls
  bind 127.0.0.1:$base ssl crt $D/site.crtkey alpn h2,http/1.1
  default_backend be
frontend h2c
  bind 127.0.0.1:$((base + 1)) proto h2
  default_backend be
backend be
  http-reuse always
  server s1 127.0.0.1:$be
C
  cat > "$D/nginxproxy.conf" <<C
worker_processes 1; daemon off; pid $D/n.pid; error_log $D/logs/n.err;
worker_rlimit_nofile 20000;
events { worker_connections 8000; }
http { access_log off; keepalive_requests 1000000; keepalive_timeout ${to}s;
  upstream be { server 127.0.0.1:$be; keepalive $idle; }
  server { listen 127.0.0.1:$((base + 2)) ssl http2 backlog=4096;
    ssl_certificate $D/site.pem; ssl_certificate_key $D/site.key; ssl_protocols TLSv1.2 TLSv1.3;
    location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; } }
  server { listen 127.0.0.1:$((base + 3)) http2 backlog=4096;
    location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; } } }
C
  cat > "$D/tcpvs.toml" <<C
[switch]
workers = 1
access_log = false
keepalive_timeout = "${to}s"
server_idle_max = $idle
${TCPVS_SWITCH:-}

[virtual.tls]
listen = "127.0.0.1:$((base + 4))"
default_pool = "backend"
tls = [{ cert = "site.pem", key = "site.key" }]

[virtual.h2c]
listen = "127.0.0.1:$((base + 5))"
default_pool = "backend"

[pool.backend]
servers = [{ addr = "127.0.0.1:$be" }]
C
  "$bin" check "$D/tcpvs.toml" >/dev/null || return 2
  PIDS=()
  taskset -c 1 nginx -c "$D/backend.conf" -p "$D" & PIDS+=($!); BP=$!
  taskset -c 0 haproxy -f "$D/haproxy.cfg" -db >"$D/logs/h.log" 2>&1 & PIDS+=($!); HP=$!
  taskset -c 0 nginx -c "$D/nginxproxy.conf" -p "$D" & PIDS+=($!); NP=$!
  taskset -c 0 "$bin" run -c "$D/tcpvs.toml" >"$D/logs/t.log" 2>&1 & PIDS+=($!); TP=$!
  H2_TLS=("haproxy=127.0.0.1:$base=$HP" "nginx=127.0.0.1:$((base + 2))=$NP" "tcpvs=127.0.0.1:$((base + 4))=$TP")
  H2_C=("haproxy=127.0.0.1:$((base + 1))=$HP" "nginx=127.0.0.1:$((base + 3))=$NP" "tcpvs=127.0.0.1:$((base + 5))=$TP")
  wait_http "http://127.0.0.1:$be/small.html" || return 1
  for t in "${H2_TLS[@]}"; do IFS='=' read -r _ addr _ <<<"$t"; wait_h2 "https://$addr" || return 1; done
  for t in "${H2_C[@]}"; do IFS='=' read -r _ addr _ <<<"$t"; wait_h2 "http://$addr" || return 1; done
}

# wait_h2 URL: up to 5 s for URL (https://HOST:PORT: ALPN h2; http://: prior knowledge) to
# answer one HTTP/2 request.
wait_h2() {
  local i
  for i in $(seq 50); do
    timeout 2 h2load -n1 -c1 "$1/small.html" 2>/dev/null | grep -q ' 1 succeeded' && return 0
    sleep 0.1
  done
  echo "no HTTP/2 answer from $1" >&2
  return 1
}

# rss_kib PID: resident KiB of PID and its children (nginx's worker; its master keeps no
# connection).
rss_kib() {
  local t=0 p
  for p in $1 $(pgrep -P "$1" 2>/dev/null); do
    [ -r "/proc/$p/status" ] && t=$((t + $(awk '/^VmRSS/ {print $2}' "/proc/$p/status")))
  done
  echo $t
}
