#!/usr/bin/env bash
# Memory per idle HTTP/2 connection: N clients (benches/h2_idle.py: the preface, SETTINGS, one
# GET of 100 bytes, then nothing) stay connected to each proxy, over TLS (ALPN h2) and h2c (prior
# knowledge); the proxy's resident memory (VmRSS of the process and its children) before and
# after, divided by N. Fresh processes for each round and protocol; same layout and configurations as
# benches/h2load.sh (benches/h2peers.sh): one thread or worker each on CPU 0, idle limits 120 s.
# Usage: benches/h2_idle_memory.sh [TCPVS_BINARY]   (default target/release/tcpvs)
# Env: N (1000), ROUNDS (3), RAW=FILE (append every row to FILE)
# Needs: apt-get install haproxy nginx nghttp2-client curl openssl python3
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
source "$root/benches/h2peers.sh"
for t in haproxy nginx h2load curl openssl python3 taskset; do
  command -v $t >/dev/null || { echo "missing: $t"; exit 2; }
done
[ $# -le 1 ] || { echo "usage: $0 [TCPVS_BINARY]"; exit 2; }
bin=${1:-$root/target/release/tcpvs}
N=${N:-1000}; ROUNDS=${ROUNDS:-3}
raw=${RAW:-/dev/null}
ulimit -Sn "$(ulimit -Hn)"
rows=$(mktemp /tmp/tcpvs-h2-idle-rows.XXXX)
D=
PIDS=()
trap 'stop_gracefully "${PIDS[@]}"; [ -n "$D" ] && rm -rf "$D"; rm -f "$rows"' EXIT
for r in $(seq "$ROUNDS"); do
  # Fresh processes for each protocol too: memory freed by the TLS clients would be reused by
  # the h2c ones without growing the resident set.
  for proto in tls h2c; do
    D=$(mktemp -d /tmp/tcpvs-h2-idle.XXXX)
    start_h2_peers "$D" "$bin"
    if [ $proto = tls ]; then targets=("${H2_TLS[@]}"); else targets=("${H2_C[@]}"); fi
    for t in "${targets[@]}"; do
      IFS='=' read -r name addr pid <<<"$t"
      before=$(rss_kib "$pid")
      exec {hold}> >(exec python3 "$root/benches/h2_idle.py" "$addr" "$N" $proto > "$D/ready.$name.$proto" 2>&1)
      # The client prints one line: "ready N", or why it stopped.
      for _ in $(seq 1200); do [ -s "$D/ready.$name.$proto" ] && break; sleep 0.1; done
      after=$(rss_kib "$pid")
      status=$(head -c 200 "$D/ready.$name.$proto" | tr '\n' ' ')
      exec {hold}>&-
      awk -v r="$r" -v p="$proto" -v n="$name" -v a="$before" -v b="$after" -v c="$N" -v s="$status" \
        'BEGIN { printf "round=%s proto=%s target=%s kib_per_connection=%.2f rss_before=%d rss_after=%d client=\"%s\"\n",
                 r, p, n, (b - a) / c, a, b, s }' | tee -a "$raw" >>"$rows"
      # The clients' connections close with stdin; let each proxy let them go before the next.
      sleep 2
    done
    stop_gracefully "${PIDS[@]}"; PIDS=(); rm -rf "$D"; D=
  done
done
echo "### Resident memory per idle HTTP/2 connection, $N connections, medians of $ROUNDS rounds (fresh processes each)"
echo
echo "| proxy | TLS KiB/conn | h2c KiB/conn |"
echo "|---|---:|---:|"
med() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "nan" }'; }
for name in haproxy nginx tcpvs; do
  printf "| %s |" "$name"
  for proto in tls h2c; do
    printf " %s |" "$(awk -v p="proto=$proto" -v n="target=$name" '$2 == p && $3 == n { sub("kib_per_connection=", "", $4); print $4 }' "$rows" | med)"
  done
  echo
done
