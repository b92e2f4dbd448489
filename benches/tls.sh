#!/usr/bin/env bash
# TLS side by side: tcpvs (rustls, ring), HAProxy 2.6 and nginx 1.22 (both OpenSSL 3.0), all
# with the same ECDSA P-256 certificate, TLS 1.3, ALPN http/1.1, one thread or worker each,
# pinned to CPU 0; wrk and the nginx backend on CPU 1, as peerbench.sh pins them.
#   keepalive    100-byte responses over kept-alive HTTPS connections (CONNS, 50)
#   handshakes   Connection: close: every request on a new TLS connection; wrk resumes the
#                session of its last connection (the script prints what tcpvs counted)
#   full         full handshakes only: CLIENTS (4) `openssl s_time -new` at once (no resumption),
#                each fetching /small.html on a new connection after the other
#   passthrough  1 MiB bodies over TLS to an nginx TLS backend: tcpvs `tls-passthrough` beside
#                HAProxy `mode tcp` (neither decrypts; 10 connections)
# The negotiated version, cipher and group of each target are printed first.
# Usage: benches/tls.sh [PART...] (default: all three)   Env: ROUNDS (5), DUR (5), TCPVS (binary)
# Needs: apt-get install haproxy nginx wrk curl openssl
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
for t in haproxy nginx wrk curl openssl taskset; do
  command -v $t >/dev/null || { echo "missing: $t"; exit 2; }
done
bin=${TCPVS:-}
if [ -z "$bin" ]; then
  cargo build --release --manifest-path "$root/Cargo.toml" >&2
  bin=$root/target/release/tcpvs
fi
parts=("$@"); [ ${#parts[@]} -gt 0 ] || parts=(keepalive handshakes full passthrough)
ROUNDS=${ROUNDS:-5}; DUR=${DUR:-5}
D=$(mktemp -d /tmp/tcpvs-tls-bench.XXXX)
PIDS=()
trap 'stop_gracefully "${PIDS[@]}"; rm -rf "$D"' EXIT
start_tls_peers "$D" "$bin"
terminating=("haproxy=127.0.0.1:18290=$HP" "nginx=127.0.0.1:18291=$NP" "tcpvs=127.0.0.1:18292=$TP")
# Passthrough: "haproxy" is HAProxy in mode tcp, "tcpvs" the tls-passthrough service.
passing=("direct=127.0.0.1:18282=$BP" "haproxy=127.0.0.1:18293=$HP" "tcpvs=127.0.0.1:18294=$TP")
for t in "${terminating[@]}" "${passing[@]}"; do
  IFS='=' read -r name addr _ <<<"$t"
  line=$(echo | openssl s_client -connect "$addr" -servername bench.test 2>/dev/null \
    | awk '/^New, / {v=$2; c=$NF} /Server Temp Key/ {sub(/.*Key: /, ""); k=$0} END {print v, c, k}')
  echo "# $name: $line" >&2
done
tls_counts() {
  curl -s 127.0.0.1:18295/stats | tr ',' '\n' | grep -E '"tls_(handshakes|resumed)"' | tr -d ' "' | paste -sd' ' -
}
# full_handshake_rounds TARGET...: like run_rounds, with CLIENTS `openssl s_time -new` on CPU 1.
full_handshake_rounds() {
  local r t name addr pid t0 t1 i n hz
  hz=$(getconf CLK_TCK)
  for r in $(seq "$ROUNDS"); do
    for t in "$@"; do
      IFS='=' read -r name addr pid <<<"$t"
      t0=$(cpu_ticks "$pid")
      for i in $(seq "${CLIENTS:-4}"); do
        taskset -c 1 openssl s_time -connect "$addr" -new -time "$DUR" -www /small.html \
          >"$D/s_time.$i" 2>/dev/null &
      done
      wait $(jobs -p | tail -"${CLIENTS:-4}")
      t1=$(cpu_ticks "$pid")
      # "N connections in S real seconds": the rate is the sum of each client's N / S.
      read -r n rps < <(cat "$D"/s_time.* | awk '/connections in [0-9.]+ real seconds/ \
        {n += $1; r += $1 / $4} END {printf "%d %.2f\n", n, r}')
      awk -v r="$r" -v name="$name" -v rps="$rps" -v a="$t0" -v b="$t1" -v n="$n" -v hz="$hz" \
        'BEGIN { cpu = (n > 0) ? sprintf("%.2f", (b-a)*1e6/hz/n) : "nan";
                 print "round=" r " target=" name " rps=" rps " cpu_us_per_req=" cpu }'
    done
  done
}

SCHEME=https
for part in "${parts[@]}"; do
  case $part in
    keepalive)
      WRK=(taskset -c 1 wrk -t1 -c50 -d"${DUR}s")
      run_rounds "$ROUNDS" /small.html "${terminating[@]}" > "$D/rows"
      echo "## TLS keep-alive: tls.sh keepalive (100-byte body, 50 connections; medians of $ROUNDS rounds)"
      print_medians "$D/rows" "${terminating[@]}"
      ;;
    handshakes)
      before=$(tls_counts)
      WRK=(taskset -c 1 wrk -t1 -c50 -d"${DUR}s" -H "Connection: close")
      run_rounds "$ROUNDS" /small.html "${terminating[@]}" > "$D/rows"
      echo "## TLS connection per request, resumed: tls.sh handshakes (Connection: close, 50 connections; medians of $ROUNDS rounds)"
      print_medians "$D/rows" "${terminating[@]}"
      echo "# tcpvs counted: before: $before; after: $(tls_counts)" >&2
      ;;
    full)
      full_handshake_rounds "${terminating[@]}" > "$D/rows"
      echo "## TLS full handshake per request: tls.sh full (${CLIENTS:-4} openssl s_time -new clients; medians of $ROUNDS rounds)"
      print_medians "$D/rows" "${terminating[@]}"
      ;;
    passthrough)
      WRK=(taskset -c 1 wrk -t1 -c10 -d"${DUR}s")
      run_rounds "$ROUNDS" /1m.bin "${passing[@]}" > "$D/rows"
      echo "## TLS passthrough, 1 MiB: tls.sh passthrough (HAProxy mode tcp; 10 connections; medians of $ROUNDS rounds)"
      print_medians "$D/rows" "${passing[@]}"
      ;;
    *) echo "unknown part: $part (keepalive, handshakes, full, passthrough)"; exit 2 ;;
  esac
done
