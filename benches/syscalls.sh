#!/usr/bin/env bash
# System calls per request of each proxy under peerbench's load (BENCHMARKS.md: "5.5 -> 4
# syscalls per request", the eight calls per connection with CLOSE=1 against HAProxy's 8.7 and
# nginx's 11, the per-connection accept4/epoll_ctl/recvfrom/epoll_wait counts, HAProxy's
# recvfrom/sendto without splice for 1 MiB bodies). peerbench's layout (lib.sh start_peers):
# the proxies on CPU 0, one thread or worker each; wrk and the nginx backend on CPU 1. One target
# at a time, the tracer attached to its worker process for one wrk window; the counts are divided
# by the requests wrk completed in that window (a few idle calls around the window included).
#
# Usage: benches/syscalls.sh [TCPVS_BINARY...]     (default target/release/tcpvs; several
#        binaries, e.g. two builds from benches/build-at.sh, become targets tcpvs1, tcpvs2, ...)
# Env: TOOL     strace (default: `strace -c -f -p PID`, what the figures of BENCHMARKS.md used;
#               it slows the proxy several times) or perf (`perf stat -e 'syscalls:sys_enter_*'
#               -p PID`, the syscall tracepoints, little overhead)
#      CLOSE=1  a new connection per request (then the figures are per connection)
#      PATHQ    /small.html (100 bytes, default) or /1m.bin (1 MiB)
#      CONNS (50), DUR (5 s), ONLY (the targets to trace, e.g. "haproxy tcpvs"; default all but
#               direct, the backend alone)
#      TCPVS_VIRTUAL, TCPVS_SWITCH: extra rule-file lines for tcpvs (e.g. "defer_accept = false")
# Needs: apt-get install haproxy nginx wrk curl strace (TOOL=strace) or linux-perf (TOOL=perf)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
TOOL=${TOOL:-strace}; DUR=${DUR:-5}; CONNS=${CONNS:-50}; PATHQ=${PATHQ:-/small.html}
for t in haproxy nginx wrk curl taskset "$TOOL"; do
  command -v "$t" >/dev/null || { echo "missing: $t"; exit 2; }
done
[ "$TOOL" = strace ] || [ "$TOOL" = perf ] || { echo "TOOL is strace or perf"; exit 2; }
bins=("$@"); [ $# -gt 0 ] || bins=("$root/target/release/tcpvs")
D=$(mktemp -d /tmp/syscalls.XXXX)
PIDS=()
tracer=
cleanup() {
  [ -n "$tracer" ] && kill "$tracer" 2>/dev/null
  stop_peers
  rm -rf "$D"
}
trap cleanup EXIT
start_peers "$D" 18611 18620 "${bins[@]}"
hdr=(); [ -n "${CLOSE:-}" ] && hdr=(-H "Connection: close")
unit=request; [ -n "${CLOSE:-}" ] && unit=connection
echo "# system calls per $unit ($TOOL; path $PATHQ, $CONNS connections${CLOSE:+, Connection: close}, ${DUR} s)"
for t in "${TARGETS[@]}"; do
  IFS='=' read -r name addr pid <<<"$t"
  [[ " ${ONLY:-haproxy nginx tcpvs tcpvs1 tcpvs2 tcpvs3 tcpvs4} " == *" $name "* ]] || continue
  procs=$(workers_of "$pid")
  if [ "$TOOL" = strace ]; then
    p_args=(); IFS=, read -ra ps <<<"$procs"; for p in "${ps[@]}"; do p_args+=(-p "$p"); done
    strace -c -f -o "$D/$name.trace" "${p_args[@]}" 2>/dev/null &
  else
    perf stat -x, -o "$D/$name.trace" -e 'syscalls:sys_enter_*' -p "$procs" 2>/dev/null &
  fi
  tracer=$!
  sleep 1 # attach
  out=$(taskset -c 1 wrk -t1 -c"$CONNS" -d"${DUR}s" "${hdr[@]}" "http://$addr$PATHQ" 2>&1)
  kill -INT "$tracer" 2>/dev/null || true
  wait "$tracer" 2>/dev/null || true
  tracer=
  n=$(awk '/requests in/ {print $1}' <<<"$out")
  if [ "$TOOL" = strace ]; then
    # strace -c: "% time  seconds  usecs/call  calls  [errors]  syscall", then a "total" row.
    awk '$NF != "total" && $NF != "syscall" && $4 ~ /^[0-9]+$/ {print $NF, $4}' "$D/$name.trace"
  else
    # perf stat -x,: "count,,syscalls:sys_enter_NAME,..."
    awk -F, '$3 ~ /^syscalls:sys_enter_/ && $1 ~ /^[0-9]+$/ && $1 > 0 {
      sub("syscalls:sys_enter_", "", $3); print $3, $1 }' "$D/$name.trace"
  fi | sort -k2,2nr | awk -v name="$name" -v n="${n:-0}" -v unit="$unit" '
    { calls[NR] = $1; count[NR] = $2; total += $2 }
    END {
      if (n == 0) { printf "%-8s no requests completed\n", name; exit }
      printf "%-8s %d %ss, %.2f system calls per %s:", name, n, unit, total / n, unit
      for (i = 1; i <= NR; i++) if (count[i] / n >= 0.01) printf " %s %.2f", calls[i], count[i] / n
      printf "\n"
    }'
done
