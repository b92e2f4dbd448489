# Shared by the bench scripts (sourced): the configurations of HAProxy, the nginx backend and
# proxy as ../shared/tools/peerbench.sh writes them, and of tcpvs; CPU ticks of a proxy, rounds of
# wrk over the targets, and medians in peerbench's output format (which benches/report.rs reads).

# nginx_backend_config DIR PORT [SENDFILE]: DIR/backend.conf, one worker serving DIR/www
# (sendfile off unless SENDFILE is "on", as peerbench's backend).
nginx_backend_config() {
  cat > "$1/backend.conf" <<C
worker_processes 1; daemon off; pid $1/b.pid; error_log $1/logs/b.err;
events { worker_connections 4096; }
http { access_log off; sendfile ${3:-off}; keepalive_requests 1000000;
  server { listen 127.0.0.1:$2 backlog=4096; root $1/www; } }
C
}

# nginx_proxy_config DIR WORKERS LISTEN_PORT BACKEND_PORT: DIR/nginxproxy.conf.
nginx_proxy_config() {
  cat > "$1/nginxproxy.conf" <<C
worker_processes $2; daemon off; pid $1/n.pid; error_log $1/logs/n.err;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  upstream be { server 127.0.0.1:$4; keepalive 64; }
  server { listen 127.0.0.1:$3 backlog=4096;
    location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; } } }
C
}

# tcpvs_config FILE WORKERS LISTEN_PORT BACKEND_PORT [EXTRA_SWITCH_LINES] [EXTRA_VIRTUAL_LINES]:
# one pool, access log off.
tcpvs_config() {
  cat > "$1" <<C
[switch]
workers = $2
access_log = false
${5:-}
[virtual.bench]
listen = "127.0.0.1:$3"
default_pool = "backend"
${6:-}
[pool.backend]
servers = [{ addr = "127.0.0.1:$4" }]
C
}

# haproxy_config FILE NBTHREAD LISTEN_PORT BACKEND_PORT
haproxy_config() {
  cat > "$1" <<C
global
  nbthread $2
  maxconn 4000
defaults
  mode http
  timeout connect 3s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
  option splice-auto
frontend fe
  bind 127.0.0.1:$3
  default_backend be
backend be
  http-reuse always
  server s1 127.0.0.1:$4
C
}

# cpu_ticks PID: user + system clock ticks of PID and its children (nginx's workers).
cpu_ticks() {
  local t=0 p
  for p in $1 $(pgrep -P "$1" 2>/dev/null); do
    [ -r "/proc/$p/stat" ] && t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat")))
  done
  echo $t
}

# minflt PID: minor page faults of PID and its children (field 10 of /proc/PID/stat, what
# `perf stat -e minor-faults` counts).
minflt() {
  local f=0 p
  for p in $1 $(pgrep -P "$1" 2>/dev/null); do
    [ -r "/proc/$p/stat" ] && f=$((f + $(awk '{print $10}' "/proc/$p/stat")))
  done
  echo $f
}

# workers_of PID: the processes doing a proxy's work: nginx's workers (the children of its
# master), else PID itself (HAProxy -db, tcpvs, whose threads strace -f and perf -p follow).
workers_of() {
  local c
  c=$(pgrep -P "$1" 2>/dev/null | paste -sd, -) || true
  echo "${c:-$1}"
}

# cpu_times: one line per CPU from /proc/stat, "cpuN BUSY ALL" in clock ticks, BUSY being all
# but idle and iowait (user, nice, system, irq, softirq, steal).
cpu_times() {
  awk '/^cpu[0-9]/ {all = $2+$3+$4+$5+$6+$7+$8+$9; print $1, all-$5-$6, all}' /proc/stat
}

# busy_percent CPU BEFORE AFTER: CPU's busy share between two cpu_times snapshots.
busy_percent() {
  awk -v c="cpu$1" '$1 == c { if (NR == FNR) { b = $2; a = $3 } else { printf "%.1f", ($3 > a) ? ($2-b)*100/($3-a) : 0 } }' \
    <(echo "$2") <(echo "$3")
}

# tcp_segments: "IN OUT", TCP segments received and sent since boot (/proc/net/snmp, what
# `nstat -az TcpInSegs TcpOutSegs` shows).
tcp_segments() {
  awk '$1 == "Tcp:" && $10 ~ /^[0-9]+$/ {print $11, $12}' /proc/net/snmp
}

# wait_http URL: up to 5 s for URL to answer (a server just started).
wait_http() {
  local i
  for i in $(seq 50); do
    curl -s -o /dev/null --max-time 1 "$1" && return 0
    sleep 0.1
  done
  echo "no answer from $1" >&2
  return 1
}

# start_peers DIR BACKEND_PORT PORT_BASE [TCPVS_BINARY...]: peerbench's layout. The nginx backend
# on CPU 1 serving DIR/www (small.html, 100 bytes; 1m.bin, 1 MiB); on CPU 0, each with one
# thread or worker: HAProxy on PORT_BASE, the nginx proxy on PORT_BASE+1, one tcpvs per binary on
# PORT_BASE+2, +3, ... (TCPVS_SWITCH / TCPVS_VIRTUAL: extra lines for its [switch] and virtual
# service, e.g. TCPVS_VIRTUAL="defer_accept = false"). Sets PIDS (the processes to kill) and
# TARGETS (NAME=HOST:PORT=PID: direct, haproxy, nginx, then tcpvs, or tcpvs1, tcpvs2, ... for
# several binaries) and waits until every target answers. DIR must exist.
start_peers() {
  local d=$1 be=$2 base=$3 i=0 name port bin
  shift 3
  for bin in "$@"; do [ -x "$bin" ] || { echo "not an executable: $bin" >&2; return 2; }; done
  mkdir -p "$d/www" "$d/logs"; chmod 755 "$d"
  head -c 100 /dev/zero | tr '\0' 'a' > "$d/www/small.html"
  head -c 1048576 /dev/urandom > "$d/www/1m.bin"
  chmod -R a+rX "$d/www"
  nginx_backend_config "$d" "$be"
  nginx_proxy_config "$d" 1 $((base + 1)) "$be"
  haproxy_config "$d/haproxy.cfg" 1 "$base" "$be"
  PIDS=(); TARGETS=()
  taskset -c 1 nginx -c "$d/backend.conf" -p "$d" & PIDS+=($!); TARGETS+=("direct=127.0.0.1:$be=$!")
  taskset -c 0 haproxy -f "$d/haproxy.cfg" -db >"$d/logs/h.log" 2>&1 & PIDS+=($!)
  TARGETS+=("haproxy=127.0.0.1:$base=$!")
  taskset -c 0 nginx -c "$d/nginxproxy.conf" -p "$d" & PIDS+=($!)
  TARGETS+=("nginx=127.0.0.1:$((base + 1))=$!")
  for bin in "$@"; do
    i=$((i + 1)); port=$((base + 1 + i)); name=tcpvs; [ $# -gt 1 ] && name=tcpvs$i
    tcpvs_config "$d/$name.toml" 1 "$port" "$be" "${TCPVS_SWITCH:-}" "${TCPVS_VIRTUAL:-}"
    taskset -c 0 "$bin" run -c "$d/$name.toml" >"$d/logs/$name.log" 2>&1 & PIDS+=($!)
    TARGETS+=("$name=127.0.0.1:$port=$!")
  done
  for t in "${TARGETS[@]}"; do
    IFS='=' read -r name addr _ <<<"$t"
    wait_http "http://$addr/small.html" || return 1
  done
}

# stop_peers: kills what start_peers started (the EXIT trap of the scripts that use it).
stop_peers() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}

# run_rounds ROUNDS PATH TARGET...: each round runs "${WRK[@]}" once per target in turn
# (A B C A B C ...); a TARGET is NAME=HOST:PORT=PID. Prints one row per run. SCHEME (http, or
# https for benches/tls.sh) is the URL's scheme.
run_rounds() {
  local rounds=$1 path=$2 r t name addr pid t0 t1 out rps n cpu hz
  shift 2
  hz=$(getconf CLK_TCK)
  for r in $(seq "$rounds"); do
    for t in "$@"; do
      IFS='=' read -r name addr pid <<<"$t"
      t0=$(cpu_ticks "$pid")
      out=$("${WRK[@]}" "${SCHEME:-http}://$addr$path" 2>/dev/null)
      t1=$(cpu_ticks "$pid")
      rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out"); n=$(awk '/requests in/ {print $1}' <<<"$out")
      cpu=$(awk -v a="$t0" -v b="$t1" -v n="${n:-0}" -v hz="$hz" 'BEGIN{ if(n>0) printf "%.2f", (b-a)*1e6/hz/n; else print "nan"}')
      echo "round=$r target=$name rps=${rps:-0} cpu_us_per_req=$cpu"
    done
  done
}

# print_medians ROWS_FILE TARGET...: the median req/s and CPU per request of each target.
print_medians() {
  local rows=$1 t name rps cpu
  shift
  med() { sort -g | awk '{v[NR]=$1} END{ if (NR) print v[int((NR+1)/2)]; else print "nan"}'; }
  for t in "$@"; do
    name=${t%%=*}
    rps=$(awk -v n="$name" '$2=="target="n {sub("rps=","",$3); print $3}' "$rows" | med)
    cpu=$(awk -v n="$name" '$2=="target="n {sub("cpu_us_per_req=","",$4); print $4}' "$rows" | med)
    printf "%-13s rps=%s cpu_us_per_req=%s\n" "$name" "$rps" "$cpu"
  done
}

# stop_gracefully PID...: SIGTERM first (an nginx master takes its workers along; SIGKILL would
# orphan them), SIGKILL whatever is left after 5 s.
stop_gracefully() {
  local p
  for p in "$@"; do kill "$p" 2>/dev/null || true; done
  for p in "$@"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
  wait 2>/dev/null || true
}

# start_tls_peers DIR TCPVS_BINARY: the layout of benches/tls.sh. One ECDSA P-256 certificate
# (DIR/site.pem, DIR/site.key) for all; the nginx backend on CPU 1 serving DIR/www over plain
# HTTP on 18281 and over TLS on 18282; on CPU 0, one thread or worker each: HAProxy terminating
# TLS on 18290 (and mode tcp on 18293 to 18282), the nginx proxy on 18291, tcpvs terminating on
# 18292 and passing TLS through on 18294 (its admin endpoint on 18295). Sets PIDS and the pids
# BP (backend), HP, NP, TP, and waits until each answers. DIR must exist.
start_tls_peers() {
  local D=$1 bin=$2 be=18281 be_tls=18282 addr
  mkdir -p "$D/www" "$D/logs"; chmod 755 "$D"
  head -c 100 /dev/zero | tr '\0' 'a' > "$D/www/small.html"
  head -c 1048576 /dev/urandom > "$D/www/1m.bin"
  chmod -R a+rX "$D/www"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
    -keyout "$D/site.key" -out "$D/site.pem" -subj "/CN=bench.test" \
    -addext "subjectAltName=DNS:bench.test" 2>/dev/null
  cat "$D/site.pem" "$D/site.key" > "$D/site.crtkey"
  cat > "$D/backend.conf" <<C
worker_processes 1; daemon off; pid $D/b.pid; error_log $D/logs/b.err;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  server { listen 127.0.0.1:$be backlog=4096; root $D/www; }
  server { listen 127.0.0.1:$be_tls ssl backlog=4096; root $D/www;
    ssl_certificate $D/site.pem; ssl_certificate_key $D/site.key; ssl_protocols TLSv1.3; } }
C
  cat > "$D/nginxproxy.conf" <<C
worker_processes 1; daemon off; pid $D/n.pid; error_log $D/logs/n.err;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  upstream be { server 127.0.0.1:$be; keepalive 64; }
  server { listen 127.0.0.1:18291 ssl backlog=4096;
    ssl_certificate $D/site.pem; ssl_certificate_key $D/site.key; ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:SSL:10m;
    location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; } } }
C
  cat > "$D/haproxy.cfg" <<C
global
  nbthread 1
  maxconn 4000
defaults
  timeout connect 3s
  timeout client 60s
  timeout server 60s
frontend fe
  mode http
  option http-keep-alive
  bind 127.0.0.1:18290 ssl crt $D/site.crtkey alpn http/1.1
  default_backend be
backend be
  mode http
  http-reuse always
  server s1 127.0.0.1:$be
frontend pt
  mode tcp
  bind 127.0.0.1:18293
  default_backend pt_be
backend pt_be
  mode tcp
  option splice-auto
  server s1 127.0.0.1:$be_tls
C
  cat > "$D/tcpvs.toml" <<C
[switch]
workers = 1
access_log = false
keepalive_timeout = "60s"

[virtual.secure]
listen = "127.0.0.1:18292"
default_pool = "backend"
tls = [{ cert = "site.pem", key = "site.key" }]

[virtual.pass]
listen = "127.0.0.1:18294"
mode = "tls-passthrough"
default_pool = "tls_backend"

[pool.backend]
servers = [{ addr = "127.0.0.1:$be" }]

[pool.tls_backend]
servers = [{ addr = "127.0.0.1:$be_tls" }]

[admin]
listen = "127.0.0.1:18295"
C
  PIDS=()
  taskset -c 1 nginx -c "$D/backend.conf" -p "$D" & PIDS+=($!); BP=$!
  taskset -c 0 haproxy -f "$D/haproxy.cfg" -db >"$D/logs/h.log" 2>&1 & PIDS+=($!); HP=$!
  taskset -c 0 nginx -c "$D/nginxproxy.conf" -p "$D" & PIDS+=($!); NP=$!
  taskset -c 0 "$bin" run -c "$D/tcpvs.toml" >"$D/logs/t.log" 2>&1 & PIDS+=($!); TP=$!
  for addr in 18290 18291 18292 18293 18294 18282; do
    for _ in $(seq 50); do
      curl -sk -o /dev/null --max-time 1 "https://127.0.0.1:$addr/small.html" && break
      sleep 0.1
    done
  done
}
