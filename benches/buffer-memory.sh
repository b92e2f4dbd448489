#!/usr/bin/env bash
# Memory of N slow uploaders under `[switch] buffer_memory` (issue 46), measured as
# benches/slowloris.sh measures: VmRSS (/proc/PID/status) and Pss (/proc/PID/smaps_rollup) of
# the tcpvs process (workers = 1, on CPU 0) before and after, (after - before) / N in KiB per
# connection (user-space memory only: kernel socket buffers and splice pipes are not in RSS).
# tcpvs (access_log = false, buffer_memory = VARIANT, max_clients = 20000, idle_timeout 300 s,
# header_timeout 60 s; its pool with request_buffer = "1MiB" and one server; the admin endpoint
# on loopback, whose reads need no token) runs in front of benches/buffer_memory.py's origin on
# CPU 1, a sink that accepts every connection and reads each body, answering only a finished
# one: a body that finds the budget spent streams to it (never refused), so the origin holds one
# connection per such body. benches/buffer_memory.py's client (CPU 1, its own process) opens N
# connections, BATCH at a time, each sending "POST /upload HTTP/1.1" with Content-Length 1 MiB
# and the first SENT bytes of the body (16 KiB: the switch holds it in one or two of its 16 KiB
# buffers), then one byte every TRICKLE s, so that no timeout ends them. Once every connection
# is in and one trickle has passed, this reads RSS, Pss and the switch's /stats (buffered_bytes,
# which must stay <= buffer_memory, and buffer_fallbacks) and what the origin holds; then the
# client closes everything, and buffered_bytes (which must be back to 0) and RSS are read again.
# A variant is one buffer_memory, each with a fresh switch and origin (freed memory would
# otherwise be reused by the next). Printed: one raw row per variant, a table, checks (ok/FAIL:
# the exit status), and with two variants the cost of a held upload beyond its buffered bytes
# and of a streamed one, solved from both, and the bound buffer_memory + N x the larger.
#
# Usage: benches/buffer-memory.sh
# Env: N (10000 uploaders), SENT (16384 body bytes sent at once), TRICKLE (10 s between the
#      client's extra bytes), VARIANTS ("64MiB 16MiB", buffer_memory values), TCPVS (the binary,
#      /tmp/tcpvs-base), BATCH (500 connections opened at once), SOURCES (N loopback client
#      addresses, 127.0.0.1 and 127.0.X.Y, one per uploader, so that the last quarter of
#      max_clients, kept for light sources, refuses none: from 32 addresses, 9850 uploaders got
#      1034 503s past 8816), WARM (20 uploads of 64 KiB first), SPLICE (1: the switch's default
#      `splice = true`; 0 writes `splice = false`), KEEP=1 (keep the temporary directory:
#      configs, logs, raw rows)
# Open files: the switch holds, per uploader, its connection, and for a body that streams the
# server's and a splice pipe's two (2 without splice): up to 4 N + 300 (2 N + 300), the client N
# and the origin N (separate processes). N is lowered, with a note, to what `ulimit -Hn` allows.
# Needs: curl, taskset, python3 (3.8+)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
N=${N:-10000}; SENT=${SENT:-16384}; TRICKLE=${TRICKLE:-10}; VARIANTS=${VARIANTS:-64MiB 16MiB}
BATCH=${BATCH:-500}; SOURCES=${SOURCES:-}; WARM=${WARM:-20}; SPLICE=${SPLICE:-1}
bin=${TCPVS:-/tmp/tcpvs-base}
for t in curl taskset python3; do command -v $t >/dev/null || { echo "missing: $t" >&2; exit 2; }; done
[ -x "$bin" ] || { echo "not an executable: $bin (set TCPVS)" >&2; exit 2; }
per=4; [ "$SPLICE" = 0 ] && per=2
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt $((per * N + 300)) ]; then
  fit=$(((hard - 300) / per))
  [ "$fit" -ge 1 ] || { echo "ulimit -Hn $hard is too low for any uploader" >&2; exit 2; }
  echo "# note: N lowered from $N to $fit: ulimit -Hn is $hard and the switch needs up to $per x N + 300 open files (each uploader's connection; for a body that streams, the server's$([ "$per" = 4 ] && echo ' and a splice pipe (SPLICE=0 needs 2 x N + 300)'))"
  N=$fit
fi
ulimit -Sn "$hard"
SOURCES=${SOURCES:-$N}

OR=18761; SW=18762; AD=18763   # origin, switch, admin endpoint
D=$(mktemp -d /tmp/buffer-memory.XXXX); mkdir -p "$D/logs"
head -c 65536 /dev/zero > "$D/warm.bin"
PROXY=""; ORIGIN=""; CLIENT=""
# stop PID...: SIGTERM, SIGKILL after 5 s, then reaped (lib.sh's stop_gracefully waits for every
# child, which would wait for the origin while it still runs)
running() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) && [ "${s#Z}" = "$s" ]; }   # not a zombie
stop() {
  local p
  for p in "$@"; do
    kill "$p" 2>/dev/null || true
    for _ in $(seq 50); do running "$p" || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true
  done
}
cleanup() {
  # shellcheck disable=SC2086
  stop $CLIENT $PROXY $ORIGIN
  [ -n "${KEEP:-}" ] && echo "kept $D" >&2 || rm -rf "$D"
}
trap cleanup EXIT

kb() { awk -v k="$2" '$1 == k":" {print $2}' "$1"; }   # kb FILE FIELD: a "Field: N kB" value
# stats: "buffered_bytes buffer_fallbacks clients" from the admin endpoint's /stats
stats() {
  curl -s --max-time 5 "http://127.0.0.1:$AD/stats" | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(d["buffered_bytes"], d["buffer_fallbacks"], d["clients"])' 2>/dev/null || echo "nan nan nan"
}
field() { awk -v i="$2" '{print $i}' <<<"$1"; }         # field LINE I
origin_open() { awk '$1 == "open" {o = $2} END {print o + 0}' "$D/origin.out"; }
bytes_of() {   # bytes_of 64MiB: a size in bytes
  awk -v s="$1" 'BEGIN { n = s + 0; u = s; sub(/^[0-9.]+/, "", u)
    m = (u == "KiB") ? 1024 : (u == "MiB") ? 1048576 : (u == "GiB") ? 1073741824 : 1
    printf "%d", n * m }'
}

# config VARIANT: $D/tcpvs.toml with buffer_memory = VARIANT
config() {
  tcpvs_config "$D/tcpvs.toml" 1 "$SW" "$OR" "buffer_memory = \"$1\"
max_clients = 20000
idle_timeout = \"300s\"
header_timeout = \"60s\"
$([ "$SPLICE" = 0 ] && echo 'splice = false')"
  printf 'request_buffer = "1MiB"\n\n[admin]\nlisten = "127.0.0.1:%s"\n' "$AD" >> "$D/tcpvs.toml"
}

# measure VARIANT: one row (to stdout and $D/rows)
measure() {
  local v=$1 s0 s1 s2 rss0 rss1 rss2 pss0 pss1 o0 o1 o2 conn line prev cur
  taskset -c 1 python3 "$root/benches/buffer_memory.py" origin 127.0.0.1 "$OR" \
    >"$D/origin.out" 2>"$D/logs/origin.$v.err" & ORIGIN=$!
  for _ in $(seq 100); do grep -q '^listening' "$D/origin.out" && break; sleep 0.1; done
  config "$v"
  "$bin" check "$D/tcpvs.toml" >"$D/logs/check.$v.log" 2>&1 || { cat "$D/logs/check.$v.log" >&2; exit 2; }
  taskset -c 0 "$bin" run -c "$D/tcpvs.toml" >"$D/logs/tcpvs.$v.log" 2>&1 & PROXY=$!
  wait_http "http://127.0.0.1:$AD/stats"
  wait_http "http://127.0.0.1:$SW/"
  grep -h -o 'open-file limit raised.*\|max_clients = .* lowered to [0-9]*' "$D/logs/tcpvs.$v.log" | sed 's/^/# tcpvs: /' || true
  for _ in $(seq "$WARM"); do
    curl -s -o /dev/null --max-time 5 --data-binary @"$D/warm.bin" "http://127.0.0.1:$SW/upload" || true
  done
  sleep 1.5   # and the origin's once-a-second count has seen the warm-up
  rss0=$(kb "/proc/$PROXY/status" VmRSS); pss0=$(kb "/proc/$PROXY/smaps_rollup" Pss); s0=$(stats)
  o0=$(origin_open)   # the warm-up's server connection, kept idle by the switch

  taskset -c 1 python3 "$root/benches/buffer_memory.py" client 127.0.0.1 "$SW" "$N" "$SENT" "$TRICKLE" \
    "$BATCH" 3600 "$SOURCES" >"$D/client.out" 2>"$D/logs/client.$v.err" & CLIENT=$!
  for _ in $(seq 6000); do   # the ramp: at most 10 minutes
    grep -q '^connected' "$D/client.out" && break; running "$CLIENT" || break; sleep 0.1
  done
  conn=$(awk '/^connected/ {print $2}' "$D/client.out"); conn=${conn:-0}
  for _ in $(seq 300); do   # every connection accepted
    cur=$(field "$(stats)" 3); { [ "$cur" = nan ] || [ "$cur" -ge "$conn" ]; } && break; sleep 0.1
  done
  for _ in $(seq $((TRICKLE * 10 + 300))); do   # one trickle past the ramp
    grep -q '^alive' "$D/client.out" && break; running "$CLIENT" || break; sleep 0.1
  done
  prev=""
  for _ in $(seq 30); do   # settled: the budget, the fallbacks and the origin's connections still
    cur="$(field "$(stats)" 1) $(field "$(stats)" 2) $(origin_open)"
    [ "$cur" = "$prev" ] && break; prev=$cur; sleep 1
  done
  rss1=$(kb "/proc/$PROXY/status" VmRSS); pss1=$(kb "/proc/$PROXY/smaps_rollup" Pss)
  s1=$(stats); o1=$(origin_open)
  line=$(grep '^alive' "$D/client.out" | tail -1 || true); line=${line:-alive 0 closed 0 statuses -}

  stop "$CLIENT"; CLIENT=""
  for _ in $(seq 60); do   # everything closed: the budget given back
    s2=$(stats); [ "$(field "$s2" 1)" = 0 ] && [ "$(field "$s2" 3)" = 0 ] && [ "$(origin_open)" -le "$o0" ] && break
    sleep 0.5
  done
  # the switch gives freed memory back to the system (malloc_trim) at most once a second: wait
  # 3 s, then until RSS holds still for a second (at most 10 s more)
  sleep 3; rss2=$(kb "/proc/$PROXY/status" VmRSS)
  for _ in $(seq 10); do
    sleep 1; cur=$(kb "/proc/$PROXY/status" VmRSS); [ "$cur" = "$rss2" ] && break; rss2=$cur
  done
  s2=$(stats); o2=$(origin_open)
  stop "$PROXY"; PROXY=""
  stop "$ORIGIN"; ORIGIN=""
  echo "variant=$v n=$N conn=$conn rss0=$rss0 rss1=$rss1 rss2=$rss2 pss0=$pss0 pss1=$pss1" \
    "buffered0=$(field "$s0" 1) buffered=$(field "$s1" 1) fallbacks=$(field "$s1" 2) clients=$(field "$s1" 3)" \
    "origin0=$o0 origin=$o1 alive=$(field "$line" 2) statuses=$(field "$line" 6) buffered_closed=$(field "$s2" 1)" \
    "clients_closed=$(field "$s2" 3) origin_closed=$o2 limit=$(bytes_of "$v")" | tee -a "$D/rows"
}

echo "# buffer-memory: N=$N uploaders (Content-Length 1 MiB, SENT=$SENT bytes at once, 1 byte every ${TRICKLE} s), request_buffer 1MiB, buffer_memory: $VARIANTS, splice $([ "$SPLICE" = 0 ] && echo off || echo on), $($bin --version)"
for v in $VARIANTS; do measure "$v"; done

echo
echo "Memory of $N slow uploaders under buffer_memory (RSS and Pss of the tcpvs process, one worker;"
echo "KiB = 1024 bytes, MiB = 1024 KiB). held: bodies the switch holds (no server yet); streamed:"
echo "bodies that found the budget spent and stream to the origin (buffer_fallbacks); origin holds:"
echo "its open connections (the streamed bodies', and the warm-up's when the switch kept it idle)."
echo
echo "| buffer_memory | uploaders in | RSS before (MiB) | RSS held (MiB) | RSS KiB/conn | Pss KiB/conn | buffered_bytes (MiB) | held / streamed (fallbacks) | origin holds | KiB/conn beyond buffered_bytes | closed: buffered_bytes, RSS (MiB) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
  n = f["n"]; d = f["rss1"] - f["rss0"]
  printf "| %s | %s of %s | %.1f | %.1f | %.2f | %.2f | %.2f | %d / %d | %d | %.2f | %s, %.1f |\n",
    f["variant"], f["clients"], n, f["rss0"] / 1024, f["rss1"] / 1024, d / n, (f["pss1"] - f["pss0"]) / n,
    f["buffered"] / 1048576, f["clients"] - f["fallbacks"], f["fallbacks"], f["origin"],
    (d - f["buffered"] / 1024) / n, f["buffered_closed"], f["rss2"] / 1024 }' "$D/rows"
echo
fail=0
ok() { if [ "$1" = 1 ]; then echo "ok   $2"; else echo "FAIL $2"; fail=1; fi; }   # ok 1|"" SENTENCE
while read -r row; do
  g() { tr ' ' '\n' <<<"$row" | awk -F= -v k="$1" '$1 == k {print $2}'; }   # g KEY: the row's value
  v=$(g variant); n=$(g n); b=$(g buffered); r0=$(g rss0); r1=$(g rss1); r2=$(g rss2)
  ok "$([ "$b" != nan ] && [ "$b" -le "$(g limit)" ] && echo 1)" "$v: buffered_bytes $b <= buffer_memory $(g limit)"
  ok "$([ "$(g buffered_closed)" = 0 ] && echo 1)" "$v: buffered_bytes after close $(g buffered_closed) = 0"
  ok "$([ "$(g fallbacks)" != nan ] && [ "$(g origin)" -ge "$(g fallbacks)" ] && echo 1)" \
    "$v: the origin holds a connection for each streamed body ($(g origin) >= $(g fallbacks))"
  ok "$([ "$(g conn)" = "$n" ] && [ "$(g alive)" = "$n" ] && echo 1)" \
    "$v: all $n uploaders connected ($(g conn)) and still sending at the reading ($(g alive); answers: $(g statuses))"
  awk -v v="$v" -v n="$n" -v b="$b" -v r0="$r0" -v r1="$r1" -v r2="$r2" 'BEGIN {
    printf "     %s: RSS grew %.1f MiB = buffered_bytes %.1f MiB + %d x %.2f KiB; after close %.1f MiB above before\n",
      v, (r1 - r0) / 1024, b / 1048576, n, (r1 - r0 - b / 1024) / n, (r2 - r0) / 1024 }'
done < "$D/rows"
# With two variants: what a held upload costs beyond its buffered bytes (a) and what a streamed
# one costs (b), from RSS growth - buffered_bytes = held x a + streamed x b in both; then the
# bound RSS growth <= buffer_memory + N x max(a, b) of each variant.
if [ "$(wc -l < "$D/rows")" -ge 2 ]; then
  awk 'NR <= 2 { for (i = 1; i <= NF; i++) { split($i, kv, "="); f[NR, kv[1]] = kv[2] }
      s[NR] = f[NR, "fallbacks"]; h[NR] = f[NR, "clients"] - s[NR]
      d[NR] = f[NR, "rss1"] - f[NR, "rss0"] - f[NR, "buffered"] / 1024 }
    END { printf "     %s vs %s: RSS held differs by %.1f MiB, buffered_bytes by %.1f MiB, the budgets by %.1f MiB\n",
        f[1, "variant"], f[2, "variant"], (f[1, "rss1"] - f[2, "rss1"]) / 1024,
        (f[1, "buffered"] - f[2, "buffered"]) / 1048576, (f[1, "limit"] - f[2, "limit"]) / 1048576
      det = h[1] * s[2] - h[2] * s[1]
      if (det == 0) { print "     (held and streamed costs not separable from these two variants)"; exit }
      a = (d[1] * s[2] - d[2] * s[1]) / det; b = (h[1] * d[2] - h[2] * d[1]) / det; m = (a > b) ? a : b
      printf "     per upload, solved from both: held %.2f KiB beyond its buffered bytes, streamed %.2f KiB\n", a, b
      for (r = 1; r <= 2; r++)
        printf "     %s: RSS grew %.1f MiB; buffer_memory + N x max(held, streamed) = %.1f + %d x %.2f KiB = %.1f MiB\n",
          f[r, "variant"], (f[r, "rss1"] - f[r, "rss0"]) / 1024, f[r, "limit"] / 1048576, f[r, "n"], m,
          f[r, "limit"] / 1048576 + f[r, "n"] * m / 1024 }' "$D/rows"
fi
exit $fail
