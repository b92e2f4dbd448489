#!/usr/bin/env bash
# A CPU profile of one CPU while wrk loads one proxy, with the figures needed to read it per
# request (BENCHMARKS.md: the `perf record` profiles behind "what the profiles found": the tokio
# timer's share of a small request, the kernel profile of tcpvs against HAProxy with `fdget`/
# `fput` and "the same packets per request", the backend's `_copy_from_iter` on CPU 1 for 1 MiB
# bodies). peerbench's layout (lib.sh start_peers): proxies on CPU 0, one thread or worker each;
# wrk and the nginx backend on CPU 1. For each TARGET in turn: `perf record -g -C CPU` during one
# wrk window, then per request: the proxy's user and system CPU (/proc/PID/stat), CPU's busy time
# (/proc/stat), TCP segments in and out (/proc/net/snmp, nstat's TcpInSegs/TcpOutSegs); and the
# top of `perf report --no-children --sort comm,dso,symbol`. A symbol's share of CPU's busy µs per
# request is its percentage times that figure.
# SCHEME=https: benches/tls.sh's layout instead (lib.sh start_tls_peers: one ECDSA certificate,
# TLS 1.3; HAProxy and the nginx proxy on OpenSSL, tcpvs on rustls; "direct" is the nginx
# backend's TLS server; ports 18281-18295, so not beside a running tls.sh). With CPU=1 it shows
# what each proxy's TLS keep-alive responses cost wrk's core (issue 28).
#
# Usage: benches/profile.sh TARGET...    TARGET: haproxy, nginx, tcpvs or direct (the backend)
# Env: CPU (0: the proxy; 1: wrk and the backend), TCPVS_BIN (target/release/tcpvs), CLOSE=1,
#      PATHQ (/small.html; /1m.bin), CONNS (50), DUR (5 s), TOP (lines of the report, 40),
#      KEEP=DIR (keep DIR/TARGET.perf.data for `perf report -i`), SCHEME (http, or https)
# Needs: apt-get install haproxy nginx wrk curl linux-perf (root, or perf_event_paranoid <= 0);
#        SCHEME=https: and openssl
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
[ $# -ge 1 ] || { echo "usage: $0 TARGET...   (haproxy nginx tcpvs direct)"; exit 2; }
CPU=${CPU:-0}; DUR=${DUR:-5}; CONNS=${CONNS:-50}; PATHQ=${PATHQ:-/small.html}; TOP=${TOP:-40}
SCHEME=${SCHEME:-http}
for t in haproxy nginx wrk curl taskset perf; do command -v $t >/dev/null || { echo "missing: $t"; exit 2; }; done
D=$(mktemp -d /tmp/profile.XXXX)
PIDS=()
rec=
cleanup() {
  [ -n "$rec" ] && kill "$rec" 2>/dev/null
  stop_peers
  rm -rf "$D"
}
trap cleanup EXIT
if [ "$SCHEME" = https ]; then
  command -v openssl >/dev/null || { echo "missing: openssl"; exit 2; }
  start_tls_peers "$D" "${TCPVS_BIN:-$root/target/release/tcpvs}"
  TARGETS=("direct=127.0.0.1:18282=$BP" "haproxy=127.0.0.1:18290=$HP" "nginx=127.0.0.1:18291=$NP"
    "tcpvs=127.0.0.1:18292=$TP")
else
  start_peers "$D" 18651 18660 "${TCPVS_BIN:-$root/target/release/tcpvs}"
fi
hdr=(); [ -n "${CLOSE:-}" ] && hdr=(-H "Connection: close")
hz=$(getconf CLK_TCK)
for want in "$@"; do
  found=
  for t in "${TARGETS[@]}"; do
    IFS='=' read -r name addr pid <<<"$t"
    [ "$name" = "$want" ] || continue
    found=1
    perf record -q -g -C "$CPU" -o "$D/$name.perf.data" 2>/dev/null &
    rec=$!
    sleep 0.5
    user0=0; sys0=0
    for p in $pid $(pgrep -P "$pid" || true); do
      read -r u s < <(awk '{print $14, $15}' "/proc/$p/stat"); user0=$((user0 + u)); sys0=$((sys0 + s))
    done
    cpus0=$(cpu_times); read -r in0 out0 <<<"$(tcp_segments)"
    out=$(taskset -c 1 wrk -t1 -c"$CONNS" -d"${DUR}s" "${hdr[@]}" "$SCHEME://$addr$PATHQ" 2>&1)
    cpus1=$(cpu_times); read -r in1 out1 <<<"$(tcp_segments)"
    user1=0; sys1=0
    for p in $pid $(pgrep -P "$pid" || true); do
      read -r u s < <(awk '{print $14, $15}' "/proc/$p/stat"); user1=$((user1 + u)); sys1=$((sys1 + s))
    done
    kill -INT "$rec"; wait "$rec" 2>/dev/null || true
    rec=
    n=$(awk '/requests in/ {print $1}' <<<"$out")
    busy=$(awk -v c="cpu$CPU" '$1 == c { if (NR == FNR) b = $2; else print $2 - b }' <(echo "$cpus0") <(echo "$cpus1"))
    echo "## $name: CPU $CPU profile, $SCHEME, path $PATHQ, $CONNS connections${CLOSE:+, Connection: close}, ${DUR} s"
    awk -v n="${n:-0}" -v hz="$hz" -v u=$((user1 - user0)) -v s=$((sys1 - sys0)) -v b="$busy" -v cpu="$CPU" \
      -v i=$((in1 - in0)) -v o=$((out1 - out0)) 'BEGIN { if (n > 0)
      printf "requests=%d proxy_user_us_per_req=%.2f proxy_sys_us_per_req=%.2f cpu%d_busy_us_per_req=%.2f tcp_in_segs_per_req=%.2f tcp_out_segs_per_req=%.2f\n",
        n, u * 1e6 / hz / n, s * 1e6 / hz / n, cpu, b * 1e6 / hz / n, i / n, o / n }'
    perf report -i "$D/$name.perf.data" --stdio --no-children --sort comm,dso,symbol -g none \
      --percent-limit 0.3 >"$D/$name.report" 2>/dev/null || true
    grep -v -e '^#' -e '^$' "$D/$name.report" | sed 's/[-[:space:]]*$//' | cut -c1-200 | head -n "$TOP" || true
    if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$D/$name.perf.data" "$KEEP/"; fi
  done
  [ -n "$found" ] || { echo "unknown target: $want (haproxy nginx tcpvs direct)"; exit 2; }
done
