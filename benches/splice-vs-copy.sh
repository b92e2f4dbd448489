#!/usr/bin/env bash
# 1 MiB bodies through tcpvs with splice and with copy, beside HAProxy (option splice-auto),
# against an nginx backend that serves with sendfile ON (peerbench.sh's backend has it off).
# Shows how much of the splice result depends on the backend's memory behaviour.
# Pinning as peerbench.sh: proxies on CPU 0, wrk and the backend on CPU 1.
# Usage: benches/splice-vs-copy.sh [tcpvs-binary]   (default: builds target/release/tcpvs)
#        Env: ROUNDS (5), DUR (5), CONNS (10)
# Needs: apt-get install haproxy nginx wrk
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
if [ $# -ge 1 ]; then
  bin=$1
else
  cargo build --release --manifest-path "$root/Cargo.toml" >&2
  bin=$root/target/release/tcpvs
fi
D=$(mktemp -d /tmp/splice-vs-copy.XXXX); chmod 755 "$D"; mkdir -p "$D/www" "$D/logs"
head -c 1048576 /dev/urandom > "$D/www/1m.bin"; chmod -R a+rX "$D/www"
ROUNDS=${ROUNDS:-5}; DUR=${DUR:-5}; CONNS=${CONNS:-10}
nginx_backend_config "$D" 18181 on
haproxy_config "$D/haproxy.cfg" 1 18190 18181
tcpvs_config "$D/splice.toml" 1 18192 18181
tcpvs_config "$D/copy.toml" 1 18193 18181 "splice = false"
taskset -c 1 nginx -c "$D/backend.conf" -p "$D" & BP=$!
taskset -c 0 haproxy -f "$D/haproxy.cfg" -db >"$D/logs/h.log" 2>&1 & HP=$!
taskset -c 0 "$bin" run -c "$D/splice.toml" >"$D/logs/s.log" 2>&1 & SP=$!
taskset -c 0 "$bin" run -c "$D/copy.toml" >"$D/logs/c.log" 2>&1 & CP=$!
trap 'kill $BP $HP $SP $CP 2>/dev/null; wait 2>/dev/null; rm -rf "$D"' EXIT
sleep 1
targets=("direct=127.0.0.1:18181=$BP" "haproxy=127.0.0.1:18190=$HP" "tcpvs-splice=127.0.0.1:18192=$SP"
  "tcpvs-copy=127.0.0.1:18193=$CP")
WRK=(taskset -c 1 wrk -t1 -c"$CONNS" -d"${DUR}s")
run_rounds "$ROUNDS" /1m.bin "${targets[@]}" > "$D/rows"
echo "# medians over $ROUNDS rounds: 1 MiB bodies, $CONNS connections, backend nginx with sendfile on"
print_medians "$D/rows" "${targets[@]}"
