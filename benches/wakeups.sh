#!/usr/bin/env bash
# What a proxy costs the other CPU, per request (BENCHMARKS.md, "where the small-request runs
# are decided"): inter-processor interrupts each CPU received (/proc/interrupts: CAL on CPU 0 =
# CPU 1 waking the proxy, RES on CPU 1 = the proxy waking wrk or the backend), the backend's
# context switches and CPU; and how busy each CPU was during the window (/proc/stat: all but idle
# and iowait), the "CPU 1 at 96-100%, CPU 0 at 94-96% for HAProxy and 86-89% for tcpvs" of
# BENCHMARKS.md. peerbench's layout: proxies on CPU 0, wrk and the backend on CPU 1.
# Then, per request: the proxy's CPU (proxy_us), CPU 1's busy time (cpu1_us: with CPU 1
# saturated, what sets req/s), TCP segments received (segs, /proc/net/snmp), and with perf
# installed wrk's own CPU and context switches (wrk_us, wrk_cs: its wake-ups; `perf stat`
# software counters, which this VM has) else "nan".
# SCHEME=https: benches/tls.sh's layout instead (lib.sh start_tls_peers: the same ECDSA
# certificate, TLS 1.3, HAProxy and the nginx proxy on OpenSSL, tcpvs on rustls; its ports
# 18281-18295, so not beside a running tls.sh), the wake-ups and CPU 1's work a TLS keep-alive
# request causes (issue 28).
# Usage: benches/wakeups.sh [tcpvs-binary]     Env: ROUNDS (2), DUR (5), CONNS (50), CLOSE=1, SYSCALLS=1,
#        PATHQ (/small.html; /1m.bin for 1 MiB bodies), SCHEME (http, or https)
# Needs: apt-get install haproxy nginx wrk (SCHEME=https: and curl openssl); linux-perf optional
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
bin=${1:-$root/target/release/tcpvs}
SCHEME=${SCHEME:-http}
for t in haproxy nginx wrk; do command -v $t >/dev/null || { echo "missing: $t"; exit 2; }; done
D=$(mktemp -d /tmp/wakeups.XXXX); chmod 755 "$D"; mkdir -p "$D/www" "$D/logs"
DUR=${DUR:-5}; CONNS=${CONNS:-50}; ROUNDS=${ROUNDS:-2}; PATHQ=${PATHQ:-/small.html}; BE=18581
PIDS=()
trap 'stop_gracefully "${PIDS[@]}"; rm -rf "$D"' EXIT
if [ "$SCHEME" = https ]; then
  for t in curl openssl; do command -v $t >/dev/null || { echo "missing: $t"; exit 2; }; done
  start_tls_peers "$D" "$bin"
  targets=(haproxy=18290=$HP nginx=18291=$NP tcpvs=18292=$TP)
else
  head -c 100 /dev/zero | tr '\0' 'a' > "$D/www/small.html"
  head -c 1048576 /dev/urandom > "$D/www/1m.bin"; chmod -R a+rX "$D/www"
  nginx_backend_config "$D" "$BE"
  nginx_proxy_config "$D" 1 18591 "$BE"
  haproxy_config "$D/haproxy.cfg" 1 18590 "$BE"
  tcpvs_config "$D/tcpvs.toml" 1 18592 "$BE"
  taskset -c 1 nginx -c "$D/backend.conf" -p "$D" & BP=$!
  taskset -c 0 nginx -c "$D/nginxproxy.conf" -p "$D" & NP=$!
  taskset -c 0 haproxy -f "$D/haproxy.cfg" -db >"$D/logs/h.log" 2>&1 & HP=$!
  taskset -c 0 "$bin" run -c "$D/tcpvs.toml" >"$D/logs/t.log" 2>&1 & TP=$!
  PIDS=("$BP" "$NP" "$HP" "$TP")
  targets=(haproxy=18590=$HP nginx=18591=$NP tcpvs=18592=$TP)
fi
# The backend's worker process (bounded wait: nginx forks it after it binds).
backend=
for _ in $(seq 50); do
  backend=$(pgrep -P "$BP" | head -1) && [ -n "$backend" ] && break
  sleep 0.1
done
[ -n "$backend" ] || { echo "the nginx backend has no worker process"; exit 1; }
sleep 0.5
irq() { awk -v k="$1:" '$1 == k {print $2, $3}' /proc/interrupts; }
switches() { awk '/ctxt_switches/ {s += $2} END {print s}' "/proc/$1/status"; }
hdr=(); [ -n "${CLOSE:-}" ] && hdr=(-H "Connection: close")
# wrk's own counters, when perf can count them (software events: no hardware counters needed).
stat=()
if command -v perf >/dev/null && perf stat -e task-clock true >/dev/null 2>&1; then
  stat=(perf stat -x, -e task-clock,context-switches -o "$D/wrk.stat")
fi
hz=$(getconf CLK_TCK)
echo "# per request: CAL received by CPU 0, RES received by CPU 1, backend context switches and CPU µs; % busy of CPU 0 and 1; proxy CPU µs, CPU 1 busy µs, TCP segments received, wrk's CPU µs and context switches ($SCHEME, path $PATHQ)"
for r in $(seq "$ROUNDS"); do
  for t in "${targets[@]}"; do
    IFS='=' read -r name port pid <<<"$t"
    read -r _ res0 <<<"$(irq RES)"; read -r cal0 _ <<<"$(irq CAL)"
    s0=$(switches "$backend"); c0=$(cpu_ticks "$backend"); p0=$(cpu_ticks "$pid"); t0=$(cpu_times)
    read -r in0 _ <<<"$(tcp_segments)"; rm -f "$D/wrk.stat"
    out=$("${stat[@]}" taskset -c 1 wrk -t1 -c"$CONNS" -d"${DUR}s" "${hdr[@]}" "$SCHEME://127.0.0.1:$port$PATHQ" 2>&1)
    t1=$(cpu_times); read -r in1 _ <<<"$(tcp_segments)"
    read -r _ res1 <<<"$(irq RES)"; read -r cal1 _ <<<"$(irq CAL)"
    s1=$(switches "$backend"); c1=$(cpu_ticks "$backend"); p1=$(cpu_ticks "$pid")
    n=$(awk '/requests in/ {print $1}' <<<"$out")
    # task-clock in ms, context switches: nan without perf.
    read -r wms wcs < <(awk -F, '$3 ~ /^task-clock/ {t = $1} $3 ~ /^context-switches/ {c = $1}
      END {print (t == "" ? "nan" : t), (c == "" ? "nan" : c)}' "$D/wrk.stat" 2>/dev/null || echo nan nan)
    busy1=$(awk '$1 == "cpu1" { if (NR == FNR) b = $2; else print $2 - b }' <(echo "$t0") <(echo "$t1"))
    awk -v name="$name" -v n="${n:-0}" -v cal=$((cal1 - cal0)) -v res=$((res1 - res0)) \
      -v s=$((s1 - s0)) -v c=$((c1 - c0)) -v hz="$hz" -v d="$DUR" -v p=$((p1 - p0)) \
      -v bt1="$busy1" -v seg=$((in1 - in0)) -v wms="$wms" -v wcs="$wcs" \
      -v b0="$(busy_percent 0 "$t0" "$t1")" -v b1="$(busy_percent 1 "$t0" "$t1")" 'BEGIN { if (n > 0)
      printf "round=%d %-8s rps=%.0f cal_cpu0=%.3f res_cpu1=%.3f backend_cs=%.3f backend_us=%.2f cpu0_busy=%s%% cpu1_busy=%s%% proxy_us=%.2f cpu1_us=%.2f segs=%.2f wrk_us=%s wrk_cs=%s\n",
        '"$r"', name, n / d, cal / n, res / n, s / n, c * 1e6 / hz / n, b0, b1, p * 1e6 / hz / n,
        bt1 * 1e6 / hz / n, seg / n, (wms == "nan") ? "nan" : sprintf("%.2f", wms * 1000 / n),
        (wcs == "nan") ? "nan" : sprintf("%.3f", wcs / n) }'
  done
done
# SYSCALLS=1: one more window per target under `perf stat` on the system-call tracepoints of the
# proxy (its worker process, or itself): calls per request, the busiest named. An epoll_wait
# that finds nothing ready puts the proxy's CPU to sleep, and waking it costs CPU 1 an
# interprocessor interrupt (cal_cpu0 above), a VM exit on this machine.
[ -n "${SYSCALLS:-}" ] || exit 0
command -v perf >/dev/null || { echo "missing: perf (SYSCALLS=1)"; exit 2; }
echo "# system calls per request ($SCHEME, one window of ${DUR} s per target)"
for t in "${targets[@]}"; do
  IFS='=' read -r name port pid <<<"$t"
  perf stat -x, -e 'syscalls:sys_enter_*' -p "$(workers_of "$pid")" -o "$D/$name.perf" -- sleep $((DUR + 1)) &
  sp=$!
  sleep 0.5
  out=$(taskset -c 1 wrk -t1 -c"$CONNS" -d"${DUR}s" "${hdr[@]}" "$SCHEME://127.0.0.1:$port$PATHQ" 2>/dev/null)
  wait "$sp" || true
  n=$(awk '/requests in/ {print $1}' <<<"$out")
  per=$(awk -F, -v n="${n:-0}" 'n > 0 && $3 ~ /sys_enter_/ && $1 ~ /^[0-9]+$/ && $1 > 0 {
      sub("syscalls:sys_enter_", "", $3); printf "%.3f %s\n", $1 / n, $3 }' "$D/$name.perf" | sort -gr)
  total=$(awk '{t += $1} END {printf "%.2f", t}' <<<"$per")
  printf "%-8s %s per request: %s\n" "$name" "$total" "$(awk '$1 >= 0.01 && NR <= 8 {printf "%s %s  ", $2, $1}' <<<"$per")"
done
