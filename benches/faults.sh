#!/usr/bin/env bash
# CPU time and page faults per request of each proxy, in alternating wrk windows (BENCHMARKS.md:
# the CLOSE=1 page faults "1.7 -> 0.06 per request, 33.4 -> 30.2 µs per connection", and the
# per-connection CPU of the A/B probes "26.4 -> 20.7 -> 16.6 µs" beside HAProxy's 25). The layout
# of peerbench (lib.sh start_peers): every proxy pinned to CPU 0 with one thread or worker, wrk
# (`taskset -c 1 wrk -t1 -cCONNS -dDURs`) and the nginx backend on CPU 1. CPU (utime + stime) and
# minor faults (minflt, what `perf stat -e minor-faults -p PID` counts) come from
# /proc/PID/stat (with nginx's workers) before and after each window; rounds go A B C A B C.
#
# Usage: benches/faults.sh [TCPVS_BINARY...]     (default target/release/tcpvs; two builds from
#        benches/build-at.sh for an A/B, targets tcpvs1 and tcpvs2)
# Env: CLOSE=1 (a new connection per request), ROUNDS (6), DUR (4 s), CONNS (50),
#      PATHQ (/small.html), ONLY (targets, default "haproxy nginx" and the tcpvs ones),
#      TCPVS_VIRTUAL, TCPVS_SWITCH (extra rule-file lines for tcpvs)
# Needs: apt-get install haproxy nginx wrk curl
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
ROUNDS=${ROUNDS:-6}; DUR=${DUR:-4}; CONNS=${CONNS:-50}; PATHQ=${PATHQ:-/small.html}
for t in haproxy nginx wrk curl taskset; do command -v $t >/dev/null || { echo "missing: $t"; exit 2; }; done
bins=("$@"); [ $# -gt 0 ] || bins=("$root/target/release/tcpvs")
D=$(mktemp -d /tmp/faults.XXXX)
PIDS=()
trap 'stop_peers; rm -rf "$D"' EXIT
start_peers "$D" 18631 18640 "${bins[@]}"
hdr=(); [ -n "${CLOSE:-}" ] && hdr=(-H "Connection: close")
hz=$(getconf CLK_TCK)
names=()
for t in "${TARGETS[@]}"; do
  name=${t%%=*}
  [[ " ${ONLY:-haproxy nginx tcpvs tcpvs1 tcpvs2 tcpvs3 tcpvs4} " == *" $name "* ]] && names+=("$name")
done
echo "# per request: proxy CPU µs and minor page faults (path $PATHQ, $CONNS connections${CLOSE:+, Connection: close}, $ROUNDS windows of ${DUR} s each)"
for r in $(seq "$ROUNDS"); do
  for t in "${TARGETS[@]}"; do
    IFS='=' read -r name addr pid <<<"$t"
    [[ " ${names[*]} " == *" $name "* ]] || continue
    c0=$(cpu_ticks "$pid"); f0=$(minflt "$pid")
    out=$(taskset -c 1 wrk -t1 -c"$CONNS" -d"${DUR}s" "${hdr[@]}" "http://$addr$PATHQ" 2>&1)
    c1=$(cpu_ticks "$pid"); f1=$(minflt "$pid")
    n=$(awk '/requests in/ {print $1}' <<<"$out")
    awk -v r="$r" -v name="$name" -v n="${n:-0}" -v c=$((c1 - c0)) -v f=$((f1 - f0)) -v hz="$hz" -v d="$DUR" \
      'BEGIN { if (n > 0) printf "round=%d target=%s rps=%.0f cpu_us_per_req=%.2f minflt_per_req=%.3f\n",
        r, name, n / d, c * 1e6 / hz / n, f / n }'
  done
done | tee "$D/rows"
echo "# medians"
for name in "${names[@]}"; do
  for col in 3 4 5; do
    awk -v n="$name" -v c="$col" '$2 == "target="n { split($c, kv, "="); print kv[2] }' "$D/rows" \
      | sort -g | awk '{v[NR] = $1} END { printf "%s ", NR ? v[int((NR + 1) / 2)] : "nan" }'
  done | awk -v n="$name" '{ printf "%-8s rps=%s cpu_us_per_req=%s minflt_per_req=%s\n", n, $1, $2, $3 }'
done
