#!/usr/bin/env bash
# Memory per idle TLS keep-alive connection: N clients (benches/tls-memory.py, Python's ssl)
# each make one request and stay connected; the resident memory of each proxy before and after,
# divided by N. Same layout and certificate as benches/tls.sh (start_tls_peers in lib.sh).
# Usage: benches/tls-memory.sh   Env: N (2000), ROUNDS (3), TCPVS (binary)
# Needs: apt-get install haproxy nginx curl openssl
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
bin=${TCPVS:-}
if [ -z "$bin" ]; then
  cargo build --release --manifest-path "$root/Cargo.toml" >&2
  bin=$root/target/release/tcpvs
fi
N=${N:-2000}; ROUNDS=${ROUNDS:-3}
ulimit -Sn "$(ulimit -Hn)"
# rss_kib PID: resident KiB of PID and its children (nginx's workers).
rss_kib() {
  local t=0 p
  for p in $1 $(pgrep -P "$1" 2>/dev/null); do
    t=$((t + $(awk '/^VmRSS/ {print $2}' "/proc/$p/status")))
  done
  echo $t
}
echo "# KiB of resident memory per idle TLS keep-alive connection, $N connections, $ROUNDS rounds (fresh processes each)"
for r in $(seq "$ROUNDS"); do
  D=$(mktemp -d /tmp/tcpvs-tls-memory.XXXX)
  PIDS=()
  trap 'stop_gracefully "${PIDS[@]}"; rm -rf "$D"' EXIT
  start_tls_peers "$D" "$bin"
  for t in "haproxy=18290=$HP" "nginx=18291=$NP" "tcpvs=18292=$TP"; do
    IFS='=' read -r name port pid <<<"$t"
    # nginx's master keeps no connection: its workers are what grows.
    before=$(rss_kib "$pid")
    exec {hold}> >(python3 "$root/benches/tls-memory.py" "127.0.0.1:$port" "$N" > "$D/ready.$name")
    for _ in $(seq 600); do grep -q ready "$D/ready.$name" 2>/dev/null && break; sleep 0.1; done
    after=$(rss_kib "$pid")
    exec {hold}>&-
    awk -v r="$r" -v n="$name" -v a="$before" -v b="$after" -v c="$N" \
      'BEGIN { printf "round=%s target=%s kib_per_connection=%.2f (rss %d -> %d KiB)\n", r, n, (b-a)/c, a, b }'
    sleep 1
  done
  stop_gracefully "${PIDS[@]}"; rm -rf "$D"
  trap - EXIT
done
