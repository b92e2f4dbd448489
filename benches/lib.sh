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

# tcpvs_config FILE WORKERS LISTEN_PORT BACKEND_PORT [EXTRA_SWITCH_LINES]: one pool, access log
# off.
tcpvs_config() {
  cat > "$1" <<C
[switch]
workers = $2
access_log = false
${5:-}
[virtual.bench]
listen = "127.0.0.1:$3"
default_pool = "backend"
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

# run_rounds ROUNDS PATH TARGET...: each round runs "${WRK[@]}" once per target in turn
# (A B C A B C ...); a TARGET is NAME=HOST:PORT=PID. Prints one row per run.
run_rounds() {
  local rounds=$1 path=$2 r t name addr pid t0 t1 out rps n cpu hz
  shift 2
  hz=$(getconf CLK_TCK)
  for r in $(seq "$rounds"); do
    for t in "$@"; do
      IFS='=' read -r name addr pid <<<"$t"
      t0=$(cpu_ticks "$pid")
      out=$("${WRK[@]}" "http://$addr$path" 2>/dev/null)
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
