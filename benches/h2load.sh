#!/usr/bin/env bash
# HTTP/2 from clients: tcpvs beside HAProxy 2.6 and nginx 1.22, measured with h2load (Debian
# nghttp2-client). Each proxy has ONE thread or worker pinned to CPU 0; h2load (one thread) and
# the nginx backend (one worker, HTTP/1.1 keep-alive, as ../shared/tools/peerbench.sh runs it) on
# CPU 1. Layout and configurations: benches/h2peers.sh.
#
# Cases: TLS (h2 by ALPN, TLS 1.3 with TLS13_CIPHERS, AES-128-GCM, one self-signed ECDSA P-256
# certificate for all) and h2c (prior
# knowledge), 100-byte (/small.html) and 1 MiB (/1m.bin) response bodies, 1 and 100 streams per
# connection (h2load -m), CONNS connections. Rounds go target by target (haproxy nginx tcpvs
# haproxy ...), ROUNDS rounds; the tables give medians. A run is DUR seconds (h2load -D) for
# 100-byte bodies, and for 1 MiB a count of requests (h2load -n): 3 x CONNS x streams, at least
# N1M (1000).
# Per run: req/s (h2load's), the proxy's CPU per request (utime + stime from /proc/PID/stat of
# the proxy and its children, before and after, divided by h2load's succeeded requests), the
# proxy's CPU share of the run's wall time and what else ran on CPU 0 meanwhile, CPU 1's busy
# share (h2load + backend: when it is near 100 % and the proxy's share is well under, the load
# generator is the limit, not the proxy), and the CPU per request of the backend and of h2load.
# Before each run the script waits (QUIET_WAIT, 300 s at most) until the machine is idle
# (both CPUs under QUIET_MAX, 15 %, over a second): a build or another bench on the same CPUs
# spoils the figures; "other on CPU 0" shows what still got in.
#
# Usage: benches/h2load.sh [TCPVS_BINARY]      (default target/release/tcpvs; build it first)
# Env: ROUNDS (3), DUR (5 s), CONNS (10), N1M (1000), CASES (all eight: "tls/small/1 tls/small/100 tls/1m/1
#      tls/1m/100 h2c/small/1 h2c/small/100 h2c/1m/1 h2c/1m/100"), RAW=FILE (append every run's
#      row and h2load's TLS lines to FILE), and those of benches/h2peers.sh (H2_BASE, BACKEND_IDLE,
#      TCPVS_SWITCH), QUIET_WAIT, QUIET_MAX (above), PERF=DIR (`perf record -g` the proxy
#      PERF_TARGET, tcpvs by default, during each of its runs, into DIR/CASE.NAME.ROUND.perf.data;
#      perf's own cost is in those runs' figures, so profile in a run of its own:
#      `ROUNDS=1 CASES=h2c/small/100 PERF=/tmp/p benches/h2load.sh`, then
#      `perf report -i /tmp/p/h2c-small-m100.tcpvs.1.perf.data --no-children --sort dso,symbol`).
# Needs: apt-get install haproxy nginx nghttp2-client curl openssl
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
source "$root/benches/h2peers.sh"
for t in haproxy nginx h2load curl openssl taskset /usr/bin/time; do
  command -v $t >/dev/null || { echo "missing: $t"; exit 2; }
done
[ $# -le 1 ] || { echo "usage: $0 [TCPVS_BINARY]"; exit 2; }
if [ -n "${PERF:-}" ]; then
  command -v perf >/dev/null || { echo "missing: perf"; exit 2; }
  mkdir -p "$PERF"
fi
bin=${1:-$root/target/release/tcpvs}
ROUNDS=${ROUNDS:-3}; DUR=${DUR:-5}; CONNS=${CONNS:-10}; N1M=${N1M:-1000}
# One cipher for all: left to themselves HAProxy picks AES-256-GCM (its server preference),
# nginx and tcpvs h2load's first choice, AES-128-GCM.
TLS13_CIPHERS=${TLS13_CIPHERS:-TLS_AES_128_GCM_SHA256}
CASES=${CASES:-tls/small/1 tls/small/100 tls/1m/1 tls/1m/100 h2c/small/1 h2c/small/100 h2c/1m/1 h2c/1m/100}
raw=${RAW:-/dev/null}
ulimit -Sn "$(ulimit -Hn)"
D=$(mktemp -d /tmp/tcpvs-h2load.XXXX)
PIDS=()
trap 'stop_gracefully "${PIDS[@]}"; rm -rf "$D"' EXIT
start_h2_peers "$D" "$bin"
hz=$(getconf CLK_TCK)
{
  echo "# $(date -u +%FT%TZ) $(uname -r), $(nproc) CPUs; $(haproxy -v | head -1); $(nginx -v 2>&1);"
  echo "# $(h2load --version); tcpvs $bin ($("$bin" --version 2>/dev/null || echo '?'))"
} | tee -a "$raw"

# wait_quiet: up to QUIET_WAIT (300) s until both CPUs are busy less than QUIET_MAX (15) % over
# one second (other work on this machine, e.g. a build, spoils a run: the proxies and h2load then
# share their CPU with it). Prints the seconds waited, and "+" when it gave up.
wait_quiet() {
  local s0 s1 waited=0
  while [ "$waited" -lt "${QUIET_WAIT:-300}" ]; do
    s0=$(cpu_times); sleep 1; s1=$(cpu_times)
    awk -v a="$(busy_percent 0 "$s0" "$s1")" -v b="$(busy_percent 1 "$s0" "$s1")" -v m="${QUIET_MAX:-15}" \
      'BEGIN { exit !(a < m && b < m) }' && { echo "$waited"; return; }
    waited=$((waited + 1))
  done
  echo "$waited+"
}

# one_run CASE ROUND NAME URL PROXY_PID STREAMS BIG: one h2load run, one row (BIG=1: 1 MiB).
one_run() {
  local case=$1 r=$2 name=$3 url=$4 pid=$5 m=$6 big=$7 quiet t0 t1 b0 b1 c0 c1 w0 w1 out
  quiet=$(wait_quiet)
  local rec=
  if [ -n "${PERF:-}" ] && [ "$name" = "${PERF_TARGET:-tcpvs}" ]; then
    perf record -q -g -p "$(workers_of "$pid")" -o "$PERF/$case.$name.$r.perf.data" 2>/dev/null &
    rec=$!
    sleep 0.5
  fi
  t0=$(cpu_ticks "$pid"); b0=$(cpu_ticks "$BP"); c0=$(cpu_times); w0=$(date +%s%N)
  # 100-byte bodies: DUR seconds. 1 MiB bodies: a count of requests, 3 waves of CONNS x STREAMS
  # (at least N1M): with 100 streams of 1 MiB per connection the first answers end only after
  # some 100 MiB per connection, so a window of seconds would count a handful.
  local amount=(-D "$DUR")
  if [ "$big" = 1 ]; then amount=(-n "$(( 3 * CONNS * m > N1M ? 3 * CONNS * m : N1M ))"); fi
  out=$(taskset -c 1 /usr/bin/time -f "h2load_cpu_s %U %S" -o "$D/time" \
    timeout $((DUR + 300)) h2load -t1 -c"$CONNS" -m"$m" "${amount[@]}" --tls13-ciphers="$TLS13_CIPHERS" "$url" 2>&1) || true
  t1=$(cpu_ticks "$pid"); b1=$(cpu_ticks "$BP"); c1=$(cpu_times); w1=$(date +%s%N)
  if [ -n "$rec" ]; then kill -INT "$rec"; wait "$rec" 2>/dev/null || true; fi
  grep -E '^(TLS Protocol|Cipher|Server Temp Key|Application protocol):' <<<"$out" \
    | sed "s/^/# $case $name: /" | sort -u >>"$raw"
  cat "$D/time" - <<<"$out" | awk -v c="$case" -v r="$r" -v n="$name" -v hz="$hz" -v t="$((t1 - t0))" \
      -v b="$((b1 - b0))" -v w="$(( (w1 - w0) / 1000 ))" -v busy0="$(busy_percent 0 "$c0" "$c1")" \
      -v busy1="$(busy_percent 1 "$c0" "$c1")" -v q="$quiet" '
    /^h2load_cpu_s/ { g = $2 + $3 }
    /^finished in/ { rps = $4 + 0 }
    /^requests:/ { ok = $8 + 0; bad = $10 + $12 + $14 }
    /^Application protocol:/ { proto = $3 }
    END {
      if (ok > 0) { cpu = sprintf("%.2f", t * 1e6 / hz / ok); bcpu = sprintf("%.2f", b * 1e6 / hz / ok); gcpu = sprintf("%.2f", g * 1e6 / ok) }
      else { cpu = "nan"; bcpu = "nan"; gcpu = "nan" }
      pct = t * 1e8 / hz / w
      printf "case=%s round=%s target=%s rps=%.0f cpu_us_per_req=%s proxy_cpu_pct=%.1f cpu0_busy_pct=%s other_cpu0_pct=%.1f cpu1_busy_pct=%s backend_us_per_req=%s h2load_us_per_req=%s requests=%d failed=%d proto=%s quiet_wait_s=%s\n",
        c, r, n, rps, cpu, pct, busy0, busy0 - pct, busy1, bcpu, gcpu, ok, bad, proto ? proto : "none", q
    }'
}

rows=$D/rows
for case in $CASES; do
  IFS=/ read -r proto body m <<<"$case"
  case $proto in tls) scheme=https; targets=("${H2_TLS[@]}") ;; h2c) scheme=http; targets=("${H2_C[@]}") ;;
    *) echo "unknown case $case"; exit 2 ;; esac
  case $body in small) path=/small.html ;; 1m) path=/1m.bin ;; *) echo "unknown case $case"; exit 2 ;; esac
  for r in $(seq "$ROUNDS"); do
    for t in "${targets[@]}"; do
      IFS='=' read -r name addr pid <<<"$t"
      one_run "$proto-$body-m$m" "$r" "$name" "$scheme://$addr$path" "$pid" "$m" "$([ "$body" = 1m ] && echo 1 || echo 0)"
    done
  done
done | tee -a "$raw" >"$rows"

# field_values ROWS CASE TARGET KEY: KEY of every round of CASE and TARGET, one a line.
field_values() {
  awk -v c="$2" -v t="$3" -v k="$4" '{ delete f; for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
    if (f["case"] == c && f["target"] == t) print f[k] }' "$1"
}
# field ROWS CASE TARGET KEY: the median of KEY over the rounds.
field() { field_values "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "nan" }'; }
# total ROWS CASE TARGET KEY: the sum of KEY over the rounds.
total() { field_values "$@" | awk '{ s += $1 } END { print s + 0 }'; }

echo
echo "### h2load, $CONNS connections, one h2load thread; medians of $ROUNDS rounds (100 B: ${DUR} s each; 1 MiB: 3 x $CONNS x streams requests, at least $N1M)"
echo
echo "| case | proxy | req/s | CPU µs/req | proxy CPU % | other on CPU 0 % | CPU 1 busy % | backend µs/req | h2load µs/req | failed |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for case in $CASES; do
  IFS=/ read -r proto body m <<<"$case"; c=$proto-$body-m$m
  for name in haproxy nginx tcpvs; do
    echo "| $c | $name | $(field "$rows" "$c" "$name" rps) | $(field "$rows" "$c" "$name" cpu_us_per_req)" \
      "| $(field "$rows" "$c" "$name" proxy_cpu_pct) | $(field "$rows" "$c" "$name" other_cpu0_pct)" \
      "| $(field "$rows" "$c" "$name" cpu1_busy_pct) | $(field "$rows" "$c" "$name" backend_us_per_req)" \
      "| $(field "$rows" "$c" "$name" h2load_us_per_req) | $(total "$rows" "$c" "$name" failed) |"
  done
done
echo
echo "### tcpvs against the better peer (the one with less CPU per request)"
echo
echo "The bar of issue 25: CPU per request <= 0.85x the better peer's, at >= 1.0x its req/s, where"
echo "the load generator is not the limit (the peer's proxy CPU % near 100)."
echo
echo "| case | better peer | tcpvs CPU/req ÷ peer | tcpvs req/s ÷ peer | peer's proxy CPU % | tcpvs proxy CPU % |"
echo "|---|---|---:|---:|---:|---:|"
for case in $CASES; do
  IFS=/ read -r proto body m <<<"$case"; c=$proto-$body-m$m
  hc=$(field "$rows" "$c" haproxy cpu_us_per_req); nc=$(field "$rows" "$c" nginx cpu_us_per_req)
  peer=$(awk -v h="$hc" -v n="$nc" 'BEGIN { print (n + 0 < h + 0 && n != "nan") ? "nginx" : "haproxy" }')
  pc=$(field "$rows" "$c" "$peer" cpu_us_per_req); pr=$(field "$rows" "$c" "$peer" rps)
  tc=$(field "$rows" "$c" tcpvs cpu_us_per_req); tr=$(field "$rows" "$c" tcpvs rps)
  awk -v c="$c" -v p="$peer" -v pc="$pc" -v pr="$pr" -v tc="$tc" -v tr="$tr" \
      -v pp="$(field "$rows" "$c" "$peer" proxy_cpu_pct)" -v tp="$(field "$rows" "$c" tcpvs proxy_cpu_pct)" \
    'BEGIN { printf "| %s | %s | %.2f | %.2f | %s | %s |\n", c, p, (pc > 0) ? tc / pc : 0, (pr > 0) ? tr / pr : 0, pp, tp }'
done
