#!/usr/bin/env bash
# A screenshot of the admin endpoint's monitor page, as a browser shows it after a few polls of
# /stats: headless Chromium, window 1400x900, into docs/monitor.png (or OUT).
# Usage: benches/monitor-screenshot.sh ADMIN_ADDR [OUT]   e.g. 127.0.0.1:9090, the [admin] listen
#        of a running switch (send it some traffic first, so the figures and sparklines move)
# Env: BUDGET_MS (5000: virtual time before the shot, about one poll a second),
#      CHROMIUM (the browser binary, default chromium)
# Needs: apt-get install chromium
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then echo "usage: $0 ADMIN_ADDR [OUT]"; exit 2; fi
root=$(cd "$(dirname "$0")/.." && pwd)
addr=${1#http://}
addr=${addr%%/*}
out=${2:-$root/docs/monitor.png}
browser=${CHROMIUM:-chromium}
command -v "$browser" >/dev/null 2>&1 || { echo "$browser not found: apt-get install chromium"; exit 2; }
if command -v curl >/dev/null 2>&1; then
  curl -fsS --max-time 5 -o /dev/null "http://$addr/stats" \
    || { echo "no /stats at http://$addr/: is the switch running with [admin] listen = \"$addr\"?"; exit 1; }
fi
work=$(mktemp -d /tmp/tcpvs-monitor-shot.XXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$(dirname "$out")"
timeout -k 5 60 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
  --no-first-run --hide-scrollbars --user-data-dir="$work/profile" \
  --virtual-time-budget="${BUDGET_MS:-5000}" --window-size=1400,900 \
  --screenshot="$work/monitor.png" "http://$addr/" >"$work/chromium.log" 2>&1 \
  || { echo "chromium failed:"; tail -20 "$work/chromium.log"; exit 1; }
[ -s "$work/monitor.png" ] || { echo "chromium wrote no screenshot:"; tail -20 "$work/chromium.log"; exit 1; }
mv "$work/monitor.png" "$out"
echo "$out"
