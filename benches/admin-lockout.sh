#!/bin/bash
# benches/admin-lockout.sh [TCPVS_BINARY...]: for each binary, a switch whose admin endpoint is
# on 127.0.0.1:$ADMIN_PORT with a token, and each attack of tools/admin-lockout.py against it
# (idle, slowloris and /stats-reading connections of a local user, then floods of them), with
# the operator's `POST /reload` made through it; for each: the answers the change got, how long
# it took, the switch's peak resident memory (VmHWM) and most open files (sampled every 0.1 s).
# The last attack makes the change with the `tcpvs reload` of the last binary given.
#
#   benches/admin-lockout.sh /tmp/tcpvs-before target/release/tcpvs
#
# RELIABILITY.md, "Admin endpoint on a shared host", has its output before and after the fix.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
binaries=("$@")
[ ${#binaries[@]} -gt 0 ] || binaries=("$here/target/release/tcpvs")
cli=$(realpath "${binaries[-1]}")
ADMIN_PORT=${ADMIN_PORT:-19090}
WEB_PORT=${WEB_PORT:-18080}
GIVE_UP=${GIVE_UP:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/rules.toml" <<EOF
[switch]
workers = 1
access_log = false
[admin]
listen = "127.0.0.1:$ADMIN_PORT"
token = "operator-token"
[virtual.web]
listen = "127.0.0.1:$WEB_PORT"
default_pool = "p"
[pool.p]
servers = [{ addr = "127.0.0.1:9" }]
EOF
chmod 600 "$work/rules.toml"

attacks=(
  "--idle 24 --slow 20 --readers 20"
  "--readers 64"
  "--idle 64"
  "--slow 64"
  "--readers 200"
  "--idle 300"
  "--idle 300 --cli $cli"
)
for bin in "${binaries[@]}"; do
  echo "== $bin"
  for attack in "${attacks[@]}"; do
    "$bin" run -c "$work/rules.toml" > "$work/run.log" 2>&1 &
    pid=$!
    # The endpoint answers: the switch is up.
    for _ in $(seq 100); do
      curl -sf "http://127.0.0.1:$ADMIN_PORT/stats" > /dev/null && break
      sleep 0.05
    done
    ( while kill -0 $pid 2> /dev/null; do ls /proc/$pid/fd 2> /dev/null | wc -l; sleep 0.1; done ) > "$work/fds" &
    sampler=$!
    # shellcheck disable=SC2086 # the attack is words
    python3 "$here/tools/admin-lockout.py" --admin "127.0.0.1:$ADMIN_PORT" --token operator-token \
      $attack --settle 3 --give-up "$GIVE_UP" > "$work/attack" || true
    hwm=$(awk '/VmHWM/ {print $2}' /proc/$pid/status)
    kill $pid; wait $pid 2> /dev/null || true
    kill $sampler 2> /dev/null; wait $sampler 2> /dev/null || true
    echo "[${attack/$cli/tcpvs}] $(grep 'change:' "$work/attack" | tr '\n' ' ')| $(tail -1 "$work/attack") | peak RSS $hwm kB, open files at most $(sort -n "$work/fds" | tail -1)"
  done
done
