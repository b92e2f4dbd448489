#!/usr/bin/env bash
# HTTP/1.1 to servers over TLS, side by side (issue 44): wrk (HTTP/1.1, keep-alive, plain HTTP)
# -> proxy -> an nginx origin that speaks only TLS 1.3 on 127.0.0.1, with an ECDSA P-256
# certificate for "localhost" signed by a CA the script makes. Every proxy verifies the origin
# against that CA and keeps its server connections alive:
#   haproxy  server s1 ... ssl verify required ca-file CA sni str(localhost); http-reuse always
#   nginx    proxy_pass https://be; proxy_ssl_trusted_certificate CA; proxy_ssl_verify on;
#            proxy_ssl_name localhost; proxy_ssl_server_name on; proxy_ssl_session_reuse on;
#            keepalive 64; proxy_http_version 1.1 (proxy_ssl_protocols TLSv1.3: nginx 1.22
#            does not offer 1.3 to servers by default)
#   tcpvs    [pool.be] servers = [{ addr = "localhost:PORT" }] with [pool.be.tls] ca = CA
# One thread or worker each, pinned to CPU 0; wrk and the origin on CPU 1, as peerbench.sh pins
# them. Two bodies: 100 bytes (/small.html) and 1 MiB (/1m.bin). Rounds interleave the proxies
# (A B C A B C); per proxy the medians of req/s and of its CPU µs per request (utime + stime from
# /proc/PID/stat around each run, divided by the requests wrk completed), then tcpvs / HAProxy.
# A proxy that does not start, or does not answer 200 with the whole body, is skipped with a
# message (a tcpvs without [pool.NAME.tls] refuses the rule file: it is skipped, the others run).
# Usage: benches/upstream-tls.sh
# Env: DUR (s per run, 5), CONNS (50), ROUNDS (3), TCPVS (binary, default target/release/tcpvs;
#      never built here: build it first, or point TCPVS at one)
# Needs: apt-get install haproxy nginx wrk curl openssl
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$root/benches/lib.sh"
for t in haproxy nginx wrk curl openssl taskset; do
  command -v $t >/dev/null || { echo "missing: $t (apt-get install haproxy nginx wrk curl openssl)"; exit 2; }
done
DUR=${DUR:-5}; CONNS=${CONNS:-50}; ROUNDS=${ROUNDS:-3}
for v in DUR CONNS ROUNDS; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$v must be a positive integer, not '${!v}'"; exit 2; }
done
bin=${TCPVS:-$root/target/release/tcpvs}
ORIGIN=18880 HAPROXY=18881 NGINX=18882 TCPVS_PORT=18883
for p in $ORIGIN $HAPROXY $NGINX $TCPVS_PORT; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
    echo "127.0.0.1:$p is taken (another bench still running?)"; exit 2
  fi
done

D=$(mktemp -d /tmp/tcpvs-upstream-tls.XXXX)
PIDS=()
trap 'stop_gracefully "${PIDS[@]}"; rm -rf "$D"' EXIT
trap 'exit 130' INT TERM
chmod 755 "$D"; mkdir -p "$D/www" "$D/logs"
head -c 100 /dev/zero | tr '\0' 'a' > "$D/www/small.html"
head -c 1048576 /dev/urandom > "$D/www/1m.bin"
chmod -R a+rX "$D/www"

# The CA, and the origin's certificate for localhost (and 127.0.0.1) signed by it.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
  -keyout "$D/ca.key" -out "$D/ca.pem" -subj "/CN=tcpvs upstream-tls bench CA" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$D/site.key" -out "$D/site.csr" -subj "/CN=localhost" 2>/dev/null
cat > "$D/site.ext" <<C
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
C
openssl x509 -req -in "$D/site.csr" -CA "$D/ca.pem" -CAkey "$D/ca.key" -set_serial "0x$(openssl rand -hex 8)" \
  -days 30 -extfile "$D/site.ext" -out "$D/site.pem" 2>/dev/null
openssl verify -CAfile "$D/ca.pem" -verify_hostname localhost "$D/site.pem" >/dev/null

cat > "$D/origin.conf" <<C
worker_processes 1; daemon off; pid $D/o.pid; error_log $D/logs/o.err;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  server { listen 127.0.0.1:$ORIGIN ssl backlog=4096; root $D/www;
    ssl_certificate $D/site.pem; ssl_certificate_key $D/site.key; ssl_protocols TLSv1.3;
    location = /tls { default_type text/plain; return 200 "\$ssl_protocol \$ssl_cipher \$ssl_curve\n"; } } }
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
  server s1 127.0.0.1:$ORIGIN ssl verify required ca-file $D/ca.pem sni str(localhost)
C
cat > "$D/nginxproxy.conf" <<C
worker_processes 1; daemon off; pid $D/n.pid; error_log $D/logs/n.err;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  upstream be { server 127.0.0.1:$ORIGIN; keepalive 64; }
  server { listen 127.0.0.1:$NGINX backlog=4096;
    location / { proxy_pass https://be; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off;
      proxy_ssl_trusted_certificate $D/ca.pem; proxy_ssl_verify on; proxy_ssl_name localhost;
      proxy_ssl_server_name on; proxy_ssl_session_reuse on; proxy_ssl_protocols TLSv1.3; } } }
C
cat > "$D/tcpvs.toml" <<C
[switch]
workers = 1
access_log = false

[virtual.web]
listen = "127.0.0.1:$TCPVS_PORT"
default_pool = "be"

[pool.be]
servers = [{ addr = "localhost:$ORIGIN" }]

[pool.be.tls]
ca = "$D/ca.pem"
C

# The origin: it must answer over TLS with a certificate that verifies, or nothing can be measured.
taskset -c 1 nginx -c "$D/origin.conf" -p "$D" & PIDS+=($!)
ok=
for _ in $(seq 50); do
  curl -s -o /dev/null --max-time 1 --cacert "$D/ca.pem" "https://localhost:$ORIGIN/small.html" && { ok=1; break; }
  sleep 0.1
done
[ -n "$ok" ] || { echo "the origin did not answer over TLS:"; tail -5 "$D/logs/o.err"; exit 1; }
line=$(echo | openssl s_client -connect "127.0.0.1:$ORIGIN" -servername localhost -CAfile "$D/ca.pem" \
  -verify_hostname localhost 2>/dev/null \
  | awk '/^New, / {v=$2; c=$NF} /Server Temp Key/ {sub(/.*Key: /, ""); k=$0}
         /Verify return code/ {sub(/.*code: /, ""); r=$0} END {print v, c, k, "verify:", r}')
echo "# origin 127.0.0.1:$ORIGIN: $line"

# check_proxy NAME PORT PID: the proxy still runs and answers 200 with the whole body for both
# paths within 5 s (then prints what TLS the origin saw from it: its /tls); else sets why.
check_proxy() {
  local name=$1 port=$2 pid=$3 got="" path size
  for _ in $(seq 50); do
    kill -0 "$pid" 2>/dev/null || { why="exited"; return 1; }
    got=$(curl -s -o /dev/null --max-time 2 -w '%{http_code} %{size_download}' "http://127.0.0.1:$port/small.html") || true
    [ "$got" = "200 100" ] && break
    sleep 0.1
  done
  for path in /small.html /1m.bin; do
    size=100; [ $path = /1m.bin ] && size=1048576
    got=$(curl -s -o /dev/null --max-time 5 -w '%{http_code} %{size_download}' "http://127.0.0.1:$port$path") || true
    [ "$got" = "200 $size" ] || { why="$path answered '${got:-nothing}', not '200 $size'"; return 1; }
  done
  got=$(curl -s --max-time 2 "http://127.0.0.1:$port/tls") || true
  echo "# $name 127.0.0.1:$port: 200 with the whole body; the origin saw ${got:-nothing}"
}

# stop_one PID: SIGTERM, SIGKILL after 5 s, then reaped (lib.sh's stop_gracefully waits for every
# child, the origin and the other proxies too).
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
  local name=$1 port=$2 log=$3 pid why="" logs
  shift 3
  logs=("$log"); [ "$name" = nginx ] && logs+=("$D/logs/n.err")
  taskset -c 0 "$@" >"$log" 2>&1 & pid=$!
  PIDS+=("$pid")
  if check_proxy "$name" "$port" "$pid"; then
    targets+=("$name=127.0.0.1:$port=$pid")
  else
    echo "# skipping $name: $why; the last lines of its logs:"
    tail -q -n 5 "${logs[@]}" 2>/dev/null | grep -v '^$' | sed 's/^/#   /' || echo "#   (nothing)"
    stop_one "$pid"
    skipped+=("$name")
  fi
}
start_proxy haproxy $HAPROXY "$D/logs/h.log" haproxy -f "$D/haproxy.cfg" -db
start_proxy nginx $NGINX "$D/logs/n.log" nginx -c "$D/nginxproxy.conf" -p "$D"
if [ -x "$bin" ]; then
  start_proxy tcpvs $TCPVS_PORT "$D/logs/t.log" "$bin" run -c "$D/tcpvs.toml"
else
  echo "# skipping tcpvs: not an executable: $bin (set TCPVS; this script does not build)"
  skipped+=(tcpvs)
fi
[ ${#targets[@]} -gt 0 ] || { echo "no proxy to measure"; exit 1; }

# rounds PATH: ROUNDS rounds, each running wrk once per target in turn (A B C A B C), one row
# per run on stderr and in $D/rows: round, target, rps, cpu_us_per_req, then wrk's errors if any.
rounds() {
  local path=$1 r t name addr pid t0 t1 out rps n cpu errs hz
  hz=$(getconf CLK_TCK)
  : > "$D/rows"
  for r in $(seq "$ROUNDS"); do
    for t in "${targets[@]}"; do
      IFS='=' read -r name addr pid <<<"$t"
      t0=$(cpu_ticks "$pid")
      out=$(taskset -c 1 wrk -t1 -c"$CONNS" -d"${DUR}s" "http://$addr$path" 2>/dev/null) || true
      t1=$(cpu_ticks "$pid")
      rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out"); n=$(awk '/requests in/ {print $1}' <<<"$out")
      errs=$(awk '/Non-2xx|Socket errors/' <<<"$out" | tr -s ' \n' ' ' | sed 's/ *$//')
      cpu=$(awk -v a="$t0" -v b="$t1" -v n="${n:-0}" -v hz="$hz" \
        'BEGIN { if (n > 0) printf "%.2f", (b-a)*1e6/hz/n; else print "nan" }')
      echo "round=$r target=$name rps=${rps:-0} cpu_us_per_req=$cpu${errs:+ $errs}" | tee -a "$D/rows" >&2
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

for path in /small.html /1m.bin; do
  size="100 B"; [ $path = /1m.bin ] && size="1 MiB"
  rounds "$path"
  echo "## HTTP/1.1 to a TLS 1.3 origin, $size: upstream-tls.sh ($path, $CONNS connections, keep-alive; medians of $ROUNDS rounds)"
  print_medians "$D/rows" "${targets[@]}" | tee "$D/medians"
  for s in "${skipped[@]}"; do printf "%-13s skipped (see above)\n" "$s"; done
  ratio
  if grep -q 'Non-2xx\|Socket errors' "$D/rows"; then
    echo "# warning: runs with errors (their req/s count failed answers too):"
    grep 'Non-2xx\|Socket errors' "$D/rows" | sed 's/^/#   /'
  fi
done
