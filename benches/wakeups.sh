#!/usr/bin/env bash
# What a proxy costs the other CPU, per request (BENCHMARKS.md, "where the small-request runs
# are decided"): inter-processor interrupts each CPU received (/proc/interrupts: CAL on CPU 0 =
# CPU 1 waking the proxy, RES on CPU 1 = the proxy waking wrk or the backend), the backend's
# context switches and CPU; and how busy each CPU was during the window (/proc/stat: all but idle
# and iowait), the "CPU 1 at 96-100%, CPU 0 at 94-96% for HAProxy and 86-89% for tcpvs" of
# BENCHMARKS.md. peerbench's layout: proxies on CPU 0, wrk and the backend on CPU 1.
# Usage: benches/wakeups.sh [tcpvs-binary]     Env: ROUNDS (2), DUR (5), CONNS (50), CLOSE=1,
#        PATHQ (/small.html; /1m.bin for 1 MiB bodies)
# Needs: apt-get install haproxy nginx wrk
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
bin=${1:-$root/target/release/tcpvs}
for t in haproxy nginx wrk; do command -v $t >/dev/null || { echo "missing: $t"; exit 2; }; done
D=$(mktemp -d /tmp/wakeups.XXXX); chmod 755 "$D"; mkdir -p "$D/www" "$D/logs"
DUR=${DUR:-5}; CONNS=${CONNS:-50}; ROUNDS=${ROUNDS:-2}; PATHQ=${PATHQ:-/small.html}; BE=18581
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
trap 'kill $BP $NP $HP $TP 2>/dev/null; wait 2>/dev/null; rm -rf "$D"' EXIT
sleep 1
backend=$(pgrep -P "$BP" | head -1)
irq() { awk -v k="$1:" '$1 == k {print $2, $3}' /proc/interrupts; }
switches() { awk '/ctxt_switches/ {s += $2} END {print s}' "/proc/$1/status"; }
hdr=(); [ -n "${CLOSE:-}" ] && hdr=(-H "Connection: close")
echo "# per request: CAL received by CPU 0, RES received by CPU 1, backend context switches and CPU µs; % busy of CPU 0 and 1 (path $PATHQ)"
for r in $(seq "$ROUNDS"); do
  for t in haproxy=18590=$HP nginx=18591=$NP tcpvs=18592=$TP; do
    IFS='=' read -r name port pid <<<"$t"
    read -r _ res0 <<<"$(irq RES)"; read -r cal0 _ <<<"$(irq CAL)"
    s0=$(switches "$backend"); c0=$(cpu_ticks "$backend"); t0=$(cpu_times)
    out=$(taskset -c 1 wrk -t1 -c"$CONNS" -d"${DUR}s" "${hdr[@]}" "http://127.0.0.1:$port$PATHQ" 2>&1)
    t1=$(cpu_times)
    read -r _ res1 <<<"$(irq RES)"; read -r cal1 _ <<<"$(irq CAL)"
    s1=$(switches "$backend"); c1=$(cpu_ticks "$backend")
    n=$(awk '/requests in/ {print $1}' <<<"$out")
    awk -v name="$name" -v n="${n:-0}" -v cal=$((cal1 - cal0)) -v res=$((res1 - res0)) \
      -v s=$((s1 - s0)) -v c=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" -v d="$DUR" \
      -v b0="$(busy_percent 0 "$t0" "$t1")" -v b1="$(busy_percent 1 "$t0" "$t1")" 'BEGIN { if (n > 0)
      printf "round=%d %-8s rps=%.0f cal_cpu0=%.3f res_cpu1=%.3f backend_cs=%.3f backend_us=%.2f cpu0_busy=%s%% cpu1_busy=%s%%\n",
        '"$r"', name, n / d, cal / n, res / n, s / n, c * 1e6 / hz / n, b0, b1 }'
  done
done
