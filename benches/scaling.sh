#!/usr/bin/env bash
# Two worker threads on both cores: tcpvs `workers = 2` against HAProxy `nbthread 2` and nginx
# `worker_processes 2`, with the load generator (wrk, 2 threads) and the backend (nginx, 1
# worker) on the same two cores, nothing pinned. The same rounds and output as peerbench.sh, so
# benches/report.rs can read it.
# AFFINITY=1: every proxy's workers tied to a CPU each, as each offers it: tcpvs `cpu_affinity =
# "auto"`, HAProxy `cpu-map auto:1/1-2 0-1`, nginx `worker_cpu_affinity auto`; the backend and
# wrk stay unpinned.
# Usage: benches/scaling.sh [tcpvs-binary]     Env: DUR (5), CONNS (100), ROUNDS (5), PATHQ, AFFINITY
# Needs: apt-get install haproxy nginx wrk curl
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
bin=${1:-$root/target/release/tcpvs}
for t in haproxy nginx wrk curl; do command -v $t >/dev/null || { echo "missing: $t"; exit 2; }; done
D=$(mktemp -d /tmp/scaling.XXXX); chmod 755 "$D"; mkdir -p "$D/www" "$D/logs"
DUR=${DUR:-5}; CONNS=${CONNS:-100}; ROUNDS=${ROUNDS:-5}; PATHQ=${PATHQ:-/small.html}; BE=18481
head -c 100 /dev/zero | tr '\0' 'a' > "$D/www/small.html"
head -c 1048576 /dev/urandom > "$D/www/1m.bin"
chmod -R a+rX "$D/www"
nginx_backend_config "$D" "$BE"
nginx_proxy_config "$D" 2 18491 "$BE"
haproxy_config "$D/haproxy.cfg" 2 18490 "$BE"
tcpvs_config "$D/tcpvs.toml" 2 18492 "$BE"
if [ "${AFFINITY:-}" = 1 ]; then
  sed -i 's/^workers = 2$/workers = 2\ncpu_affinity = "auto"/' "$D/tcpvs.toml"
  sed -i 's/^  nbthread 2$/  nbthread 2\n  cpu-map auto:1\/1-2 0-1/' "$D/haproxy.cfg"
  sed -i 's/^worker_processes 2;/worker_processes 2; worker_cpu_affinity auto;/' "$D/nginxproxy.conf"
  grep -q 'cpu_affinity = "auto"' "$D/tcpvs.toml" && grep -q 'cpu-map' "$D/haproxy.cfg" \
    && grep -q worker_cpu_affinity "$D/nginxproxy.conf" || { echo "AFFINITY: configs not changed"; rm -rf "$D"; exit 1; }
fi
nginx -c "$D/backend.conf" -p "$D" & BP=$!
nginx -c "$D/nginxproxy.conf" -p "$D" & NP=$!
haproxy -f "$D/haproxy.cfg" -db >"$D/logs/h.log" 2>&1 & HP=$!
"$bin" run -c "$D/tcpvs.toml" >"$D/logs/t.log" 2>&1 & TP=$!
trap 'kill $BP $NP $HP $TP 2>/dev/null; wait 2>/dev/null; rm -rf "$D"' EXIT
sleep 1
targets=("direct=127.0.0.1:$BE=$BP" "haproxy=127.0.0.1:18490=$HP" "nginx=127.0.0.1:18491=$NP" "tcpvs=127.0.0.1:18492=$TP")
WRK=(wrk -t2 -c"$CONNS" -d"${DUR}s")
run_rounds "$ROUNDS" "$PATHQ" "${targets[@]}" > "$D/rows"
echo "# medians over $ROUNDS rounds (path $PATHQ, $CONNS connections, 2 threads each, $([ "${AFFINITY:-}" = 1 ] && echo "proxies pinned per worker, the rest unpinned" || echo unpinned))"
print_medians "$D/rows" "${targets[@]}"
