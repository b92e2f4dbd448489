#!/usr/bin/env bash
# Issue 28's A/B: the io_uring prototype (benches/io_uring/, `--io io_uring`) beside its own epoll
# driver (`--io epoll`, tokio's current-thread reactor) and its variants: on registered files
# (`--fixed-files`, target "uringfix"), receives that wait for data before trying
# (`--poll-first`, "uringpf", with fixed files), multishot receives into provided buffers
# (`--multishot`, "multi"; "multifix" with fixed files); tcpvs, HAProxy and nginx, in one run and
# peerbench's layout (lib.sh start_peers): every proxy with one thread or worker on CPU 0, wrk and
# the nginx backend on CPU 1; rounds go target by target. Per target: medians of req/s and of CPU
# µs per request, split into user and system time (/proc/PID/stat utime and stime). With
# SYSCALLS=1, one more window per target under `perf stat -e 'syscalls:sys_enter_*'` gives system
# calls per request (the tracepoints, little overhead), the busiest calls named.
# Usage: benches/io-uring-ab.sh
# Env: CLOSE=1 (a connection per request), PATHQ (/small.html, 100 B; /1m.bin, 1 MiB), CONNS (50),
#      ROUNDS (5), DUR (5 s), SYSCALLS=1, TCPVS and PROTO (binaries; default: built here),
#      ONLY (targets to run, e.g. "tcpvs uring")
# Needs: apt-get install haproxy nginx wrk curl (and linux-perf for SYSCALLS=1)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
for t in haproxy nginx wrk curl taskset; do command -v $t >/dev/null || { echo "missing: $t"; exit 2; }; done
ROUNDS=${ROUNDS:-5}; DUR=${DUR:-5}; CONNS=${CONNS:-50}; PATHQ=${PATHQ:-/small.html}
tcpvs=${TCPVS:-}; proto=${PROTO:-}
if [ -z "$tcpvs" ] || [ -z "$proto" ]; then
  cargo build --release --manifest-path "$root/Cargo.toml" --bin tcpvs --example relay_proto >&2
  tcpvs=${tcpvs:-$root/target/release/tcpvs}; proto=${proto:-$root/target/release/examples/relay_proto}
fi
D=$(mktemp -d /tmp/io-uring-ab.XXXX)
PIDS=()
trap 'stop_peers; rm -rf "$D"' EXIT
BE=18781
start_peers "$D" "$BE" 18790 "$tcpvs"
# The prototype's variants: NAME:PORT:ARGUMENTS
variants=("uring:18795:--io io_uring" "uringfix:18796:--io io_uring --fixed-files"
  "uringpf:18798:--io io_uring --fixed-files --poll-first" "multi:18799:--io io_uring --multishot"
  "multifix:18800:--io io_uring --multishot --fixed-files" "epoll:18797:--io epoll")
for v in "${variants[@]}"; do
  IFS=: read -r name port args <<<"$v"
  if [ -n "${ONLY:-}" ] && ! grep -qw "$name" <<<"$ONLY"; then continue; fi
  # shellcheck disable=SC2086 # the arguments are words
  taskset -c 0 "$proto" $args --listen "127.0.0.1:$port" --server "127.0.0.1:$BE" \
    >"$D/logs/$name.log" 2>&1 & PIDS+=($!)
  TARGETS+=("$name=127.0.0.1:$port=$!")
  wait_http "http://127.0.0.1:$port/small.html"
done
chosen=()
for t in "${TARGETS[@]}"; do
  name=${t%%=*}
  [ "$name" = direct ] && continue
  if [ -n "${ONLY:-}" ] && ! grep -qw "$name" <<<"$ONLY"; then continue; fi
  # The bytes every target answers must be the backend's own.
  IFS='=' read -r _ addr _ <<<"$t"
  cmp -s <(curl -s "http://$addr$PATHQ") "$D/www${PATHQ%%\?*}" || { echo "$name answered other bytes for $PATHQ" >&2; exit 1; }
  chosen+=("$t")
done
hdr=(); [ -n "${CLOSE:-}" ] && hdr=(-H "Connection: close")
hz=$(getconf CLK_TCK)
# utime stime of a process and its children (nginx's workers)
user_sys() {
  local u=0 s=0 p
  for p in $1 $(pgrep -P "$1" 2>/dev/null); do
    [ -r "/proc/$p/stat" ] && read -r du ds < <(awk '{print $14, $15}' "/proc/$p/stat") && u=$((u + du)) && s=$((s + ds))
  done
  echo "$u $s"
}
rows=$D/rows
for r in $(seq "$ROUNDS"); do
  for t in "${chosen[@]}"; do
    IFS='=' read -r name addr pid <<<"$t"
    read -r u0 s0 < <(user_sys "$pid")
    out=$(taskset -c 1 wrk -t1 -c"$CONNS" -d"${DUR}s" "${hdr[@]}" "http://$addr$PATHQ" 2>/dev/null)
    read -r u1 s1 < <(user_sys "$pid")
    rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out"); n=$(awk '/requests in/ {print $1}' <<<"$out")
    errs=$(awk '/Non-2xx|Socket errors/' <<<"$out" | tr '\n' ' ')
    awk -v r="$r" -v name="$name" -v rps="${rps:-0}" -v n="${n:-0}" -v u="$((u1 - u0))" -v s="$((s1 - s0))" -v hz="$hz" -v e="$errs" \
      'BEGIN { if (n > 0) printf "round=%s target=%s rps=%s cpu_us_per_req=%.2f user=%.2f sys=%.2f %s\n", r, name, rps, (u+s)*1e6/hz/n, u*1e6/hz/n, s*1e6/hz/n, e;
               else printf "round=%s target=%s rps=0 cpu_us_per_req=nan user=nan sys=nan %s\n", r, name, e }'
  done
done | tee "$rows"
echo "# medians over $ROUNDS rounds (path $PATHQ, $CONNS connections${CLOSE:+, Connection: close}); CPU µs per request"
med() { sort -g | awk '{v[NR]=$1} END{ if (NR) print v[int((NR+1)/2)]; else print "nan"}'; }
for t in "${chosen[@]}"; do
  name=${t%%=*}
  col() { awk -v n="$name" -v k="$1" '$2=="target="n { for (i = 3; i <= NF; i++) if (index($i, k"=") == 1) print substr($i, length(k) + 2) }' "$rows" | med; }
  printf "%-8s rps=%s cpu_us_per_req=%s user=%s sys=%s\n" "$name" "$(col rps)" "$(col cpu_us_per_req)" "$(col user)" "$(col sys)"
done
[ -n "${SYSCALLS:-}" ] || exit 0
command -v perf >/dev/null || { echo "missing: perf (SYSCALLS=1)"; exit 2; }
echo "# system calls per request (one window of ${DUR} s per target, perf stat on the syscall tracepoints)"
for t in "${chosen[@]}"; do
  IFS='=' read -r name addr pid <<<"$t"
  perf stat -x, -e 'syscalls:sys_enter_*' -p "$(workers_of "$pid")" -o "$D/$name.perf" -- sleep $((DUR + 1)) &
  sp=$!
  sleep 0.5
  out=$(taskset -c 1 wrk -t1 -c"$CONNS" -d"${DUR}s" "${hdr[@]}" "http://$addr$PATHQ" 2>/dev/null)
  wait "$sp" || true
  n=$(awk '/requests in/ {print $1}' <<<"$out")
  per=$(awk -F, -v n="$n" '$3 ~ /sys_enter_/ && $1 ~ /^[0-9]+$/ && $1 > 0 {
      sub("syscalls:sys_enter_", "", $3); printf "%.2f %s\n", $1 / n, $3 }' "$D/$name.perf" | sort -gr)
  total=$(awk '{t += $1} END {printf "%.2f", t}' <<<"$per")
  printf "%-8s %s per request: %s\n" "$name" "$total" "$(awk '$1 >= 0.01 && NR <= 8 {printf "%s %s  ", $2, $1}' <<<"$per")"
done
