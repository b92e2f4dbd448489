#!/usr/bin/env bash
# Does a busy CPU 0 slow what runs on CPU 1? (BENCHMARKS.md: "a plain busy loop on CPU 0 did not
# consistently slow wrk and the backend on CPU 1": direct 71.7k/74.6k/71.2k req/s idle against
# 71.0k/64.9k/73.6k spinning.) peerbench's direct target: wrk and the nginx backend both on CPU 1,
# no proxy; rounds alternate a window with CPU 0 idle and one with a shell busy loop pinned to
# CPU 0 (`taskset -c 0 sh -c 'while :; do :; done'`), killed after the window.
# Usage: benches/cpu0-busy.sh       Env: ROUNDS (3), DUR (5 s), CONNS (50)
# Needs: apt-get install nginx wrk curl
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
ROUNDS=${ROUNDS:-3}; DUR=${DUR:-5}; CONNS=${CONNS:-50}; BE=18671
for t in nginx wrk curl taskset; do command -v $t >/dev/null || { echo "missing: $t"; exit 2; }; done
D=$(mktemp -d /tmp/cpu0-busy.XXXX); chmod 755 "$D"; mkdir -p "$D/www" "$D/logs"
head -c 100 /dev/zero | tr '\0' 'a' > "$D/www/small.html"; chmod -R a+rX "$D/www"
nginx_backend_config "$D" "$BE"
spin=
taskset -c 1 nginx -c "$D/backend.conf" -p "$D" & BP=$!
trap '[ -n "$spin" ] && kill $spin 2>/dev/null; kill $BP 2>/dev/null; wait 2>/dev/null; rm -rf "$D"' EXIT
wait_http "http://127.0.0.1:$BE/small.html"
rps() {
  taskset -c 1 wrk -t1 -c"$CONNS" -d"${DUR}s" "http://127.0.0.1:$BE/small.html" 2>&1 \
    | awk '/Requests\/sec/ {printf "%.0f", $2}'
}
echo "# direct (wrk and the backend on CPU 1), req/s with CPU 0 idle and with CPU 0 spinning"
for r in $(seq "$ROUNDS"); do
  idle=$(rps)
  taskset -c 0 sh -c 'while :; do :; done' & spin=$!
  busy=$(rps)
  kill "$spin"; wait "$spin" 2>/dev/null || true; spin=
  echo "round=$r idle_rps=$idle cpu0_spinning_rps=$busy"
done
