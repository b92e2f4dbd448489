#!/usr/bin/env bash
# Rate limits of tcpvs beside nginx `limit_req` and HAProxy stick tables, on loopback (issue 26).
# One nginx backend and the load generators on CPU 1, every proxy on CPU 0 with one worker/thread.
#
# 1. Accuracy: a limit of RATE req/s per client address with a small burst; h2load offers a
#    constant 2x and 10x RATE (HTTP/1.1, CLIENTS connections, each `--rps` its share) for DUR
#    seconds from 127.0.0.1. h2load's per-request log gives the status and start time of every
#    answer: admitted = 200, refused = 429/503. Admitted per second ÷ RATE is counted over the
#    steady part of the run (from SKIP seconds after the start, once the burst is spent) and over
#    the whole run; medians of ROUNDS rounds.
# 2. Cost: CPU µs per request (user + system ticks of the proxy ÷ requests, as benches/lib.sh's
#    run_rounds counts) with a limit that never refuses (rate far above the load) and with the same
#    rule without it; wrk -t1 -c CONNS, small keep-alive requests, COST_ROUNDS rounds, every target
#    in turn, medians; ratio with/without.
#
# Usage: benches/limits.sh [TCPVS_BINARY]   (or TCPVS=/path/to/tcpvs; without one, or with a
#        binary whose `tcpvs check` refuses `limit`, the tcpvs rows are skipped)
# Env: RATE (1000), BURST (20), DUR (10), SKIP (2), ROUNDS (3), CLIENTS (10), COST_ROUNDS (5),
#      COST_DUR (5), CONNS (50), PORT_BASE (18400), KEEP=1 keeps the work directory,
#      WAIT_QUIET=1 waits up to 20 min for a load average below 1.5 before starting;
#      ACCURACY=0 or COST_RUNS=0 leaves that part out.
# Needs: apt-get install -y haproxy nginx nghttp2-client wrk curl
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
for t in haproxy nginx h2load wrk curl taskset; do
  command -v $t >/dev/null || { echo "missing: $t (apt-get install -y haproxy nginx nghttp2-client wrk curl)" >&2; exit 2; }
done
TCPVS=${1:-${TCPVS:-}}
RATE=${RATE:-1000}; BURST=${BURST:-20}; DUR=${DUR:-10}; SKIP=${SKIP:-2}; ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-10}; COST_ROUNDS=${COST_ROUNDS:-5}; COST_DUR=${COST_DUR:-5}; CONNS=${CONNS:-50}
base=${PORT_BASE:-18400}
be=$base
# A rate no load here reaches: the "never refusing" limit of the cost runs.
HUGE=10000000
[ $((RATE * 10 % CLIENTS)) -eq 0 ] && [ $((RATE * 2 % CLIENTS)) -eq 0 ] ||
  { echo "RATE*2 and RATE*10 must divide by CLIENTS" >&2; exit 2; }
[ "$SKIP" -lt "$DUR" ] || { echo "SKIP must be below DUR" >&2; exit 2; }

# WAIT_QUIET=1: wait (up to 20 min) for the 1-minute load average to fall below 1.5 first.
if [ -n "${WAIT_QUIET:-}" ]; then
  for _ in $(seq 120); do
    awk '{exit !($1 < 1.5)}' /proc/loadavg && break
    sleep 10
  done
  echo "# load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
fi
D=$(mktemp -d /tmp/tcpvs-limits.XXXX); chmod 755 "$D"; mkdir -p "$D/www" "$D/logs"
PIDS=()
cleanup() {
  stop_gracefully "${PIDS[@]}"
  [ -n "${KEEP:-}" ] && echo "kept $D" >&2 || rm -rf "$D"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
head -c 100 /dev/zero | tr '\0' 'a' > "$D/www/small.html"
chmod -R a+rX "$D/www"

# --- configurations -------------------------------------------------------------------------
# nginx proxy NAME PORT LIMIT_LINES: LIMIT_LINES go into http{} (zone) and location{} (limit_req)
# through two variables; each proxy its own process, prefix and pid file, so that its CPU is its own.
nginx_conf() { # NAME PORT HTTP_LINES LOCATION_LINES
  mkdir -p "$D/$1"
  cat > "$D/$1/nginx.conf" <<C
worker_processes 1; daemon off; pid $D/$1/n.pid; error_log $D/logs/$1.err;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000; $3
  upstream be { server 127.0.0.1:$be; keepalive 64; }
  server { listen 127.0.0.1:$2 backlog=4096;
    location / { $4 proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; } } }
C
}
nginx_limit_http() { echo "limit_req_zone \$binary_remote_addr zone=z:10m rate=${1}r/s;"; }
nginx_limit_loc() { echo "limit_req zone=z burst=$2 nodelay; limit_req_status 429;"; }

haproxy_conf() { # NAME PORT FRONTEND_LINES [BACKEND_TABLE_LINES]
  cat > "$D/$1.cfg" <<C
global
  nbthread 1
  maxconn 4000
defaults
  mode http
  timeout connect 3s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
frontend fe
  bind 127.0.0.1:$2
$3
  default_backend be
backend be
  http-reuse always
  server s1 127.0.0.1:$be
${4:-}
C
}
# As the issue states it: every request tracked counts in http_req_rate, refused ones too.
haproxy_req_rate() { # RATE
  printf '  stick-table type ip size 100k expire 30s store http_req_rate(1s)\n  http-request track-sc0 src\n  http-request deny deny_status 429 if { sc_http_req_rate(0) gt %s }\n' "$1"
}
# Counting admitted requests only: gpc0 is incremented after the deny rule, so a refused request
# does not push the window further (the usual HAProxy recipe for a rate that lets RATE through).
haproxy_admitted_rate() { # RATE
  printf '  stick-table type ip size 100k expire 30s store gpc0_rate(1s)\n  http-request track-sc0 src\n  http-request deny deny_status 429 if { sc0_gpc0_rate gt %s }\n  http-request sc-inc-gpc0(0)\n' "$1"
}

tcpvs_conf() { # NAME PORT [LIMIT_RATE]: one rule to the pool, with or without the limit
  local limit_line="" limit_table=""
  if [ -n "${3:-}" ]; then
    limit_line='limit = "rl"'
    limit_table=$(printf '[limit.rl]\nkey = "source"\nrate = "%s/s"\nburst = %s\nstatus = 429\n' "$3" "$BURST")
  fi
  cat > "$D/$1.toml" <<C
[switch]
workers = 1
access_log = false

[virtual.web]
listen = "127.0.0.1:$2"
default_pool = "p"

[[virtual.web.rule]]
path = "^/"
pool = "p"
$limit_line

$limit_table

[pool.p]
servers = [{ addr = "127.0.0.1:$be" }]
C
}

# --- start everything -----------------------------------------------------------------------
# ACC: NAME=HOST:PORT=PID of the limited proxies (accuracy); COST: the cost targets in pairs.
ACC=(); COST=()
nginx_backend_config "$D" "$be"
taskset -c 1 nginx -c "$D/backend.conf" -p "$D" & PIDS+=($!)
wait_http "http://127.0.0.1:$be/small.html"

# Each start_* sets LAST to the target NAME=HOST:PORT=PID and adds the PID to PIDS.
start_nginx() { # NAME PORT HTTP_LINES LOCATION_LINES
  nginx_conf "$1" "$2" "$3" "$4"
  taskset -c 0 nginx -c "$D/$1/nginx.conf" -p "$D/$1" >"$D/logs/$1.log" 2>&1 & PIDS+=($!)
  LAST="$1=127.0.0.1:$2=$!"
}
start_haproxy() { # NAME PORT FRONTEND_LINES
  haproxy_conf "$1" "$2" "$3"
  taskset -c 0 haproxy -f "$D/$1.cfg" -db >"$D/logs/$1.log" 2>&1 & PIDS+=($!)
  LAST="$1=127.0.0.1:$2=$!"
}
start_tcpvs() { # NAME PORT [LIMIT_RATE]
  tcpvs_conf "$1" "$2" "${3:-}"
  taskset -c 0 "$TCPVS" run -c "$D/$1.toml" >"$D/logs/$1.log" 2>&1 & PIDS+=($!)
  LAST="$1=127.0.0.1:$2=$!"
}

start_haproxy haproxy-req_rate $((base + 1)) "$(haproxy_req_rate "$RATE")"; ACC+=("$LAST")
start_haproxy haproxy-gpc0_rate $((base + 2)) "$(haproxy_admitted_rate "$RATE")"; ACC+=("$LAST")
start_nginx nginx-limit_req $((base + 3)) "$(nginx_limit_http "$RATE")" "$(nginx_limit_loc "$RATE" "$BURST")"; ACC+=("$LAST")

start_haproxy haproxy-without $((base + 11)) ""; COST+=("$LAST")
start_haproxy haproxy-with $((base + 12)) "$(haproxy_req_rate "$HUGE")"; COST+=("$LAST")
start_nginx nginx-without $((base + 13)) "" ""; COST+=("$LAST")
# nginx drains a key's excess by whole milliseconds of its cached clock, which moves once per event
# loop turn: the requests of one epoll batch (up to CONNS) all land in the same millisecond and each
# adds 1 to the excess whatever the rate. A burst below CONNS refuses even at 10^7 r/s (seen: 429s
# at "excess: 21.000" with burst 20), so the never-refusing nginx gets a burst far above CONNS.
start_nginx nginx-with $((base + 14)) "$(nginx_limit_http "$HUGE")" "$(nginx_limit_loc "$HUGE" 100000)"; COST+=("$LAST")

tcpvs_note=""
if [ -z "$TCPVS" ]; then
  tcpvs_note="tcpvs: skipped (no binary given)"
elif [ ! -x "$TCPVS" ]; then
  echo "not an executable: $TCPVS" >&2; exit 2
else
  tcpvs_conf probe $((base + 9)) "$RATE"
  if ! "$TCPVS" check "$D/probe.toml" >"$D/logs/probe.check" 2>&1; then
    tcpvs_note="tcpvs: skipped ($TCPVS refuses limit: $(head -c 200 "$D/logs/probe.check" | tr '\n' ' '))"
  else
    start_tcpvs tcpvs-limit $((base + 4)) "$RATE"; ACC+=("$LAST")
    start_tcpvs tcpvs-without $((base + 15)); COST+=("$LAST")
    start_tcpvs tcpvs-with $((base + 16)) "$HUGE"; COST+=("$LAST")
  fi
fi
for t in "${ACC[@]}" "${COST[@]}"; do
  IFS='=' read -r name addr _ <<<"$t"
  wait_http "http://$addr/small.html" || { cat "$D/logs/"* >&2; exit 1; }
done
# Sanity: every limited proxy refuses a burst of BURST*5 at once with 429 (the accuracy
# runs wait for the limiter state of this check to drain).
for t in "${ACC[@]}"; do
  IFS='=' read -r name addr _ <<<"$t"
  codes=$(for _ in $(seq $((BURST * 5))); do printf 'url = "http://%s/small.html"\noutput = "/dev/null"\n' "$addr"; done |
    curl -s -Z --parallel-max 50 -K - -w '%{http_code}\n' 2>/dev/null | sort | uniq -c | tr '\n' ' ')
  echo "# check $name, $((BURST * 5)) requests at once: $codes" >&2
  # HAProxy has no burst: its window lets RATE through in the first second, so only the bucket
  # meters must refuse here.
  case $name in haproxy-*) ;; *) grep -q ' 429' <<<"$codes" || echo "warning: $name refused nothing in the burst check" >&2 ;; esac
done

# --- 1. accuracy ----------------------------------------------------------------------------
# run_accuracy NAME ADDR PID MULT ROUND ATTEMPT: one h2load run; prints one row.
run_accuracy() {
  local name=$1 addr=$2 pid=$3 mult=$4 round=$5 log="$D/acc-$1-$4-$5-$6.log" per_client t0 t1
  per_client=$((RATE * mult / CLIENTS))
  # The limiter's memory of the previous run (a bucket, HAProxy's two 1 s periods) drains first.
  sleep 3
  t0=$(cpu_ticks "$pid")
  taskset -c 1 timeout $((DUR + 30)) h2load --h1 -c "$CLIENTS" --rps "$per_client" -D "$DUR" \
    --log-file "$log" "http://$addr/small.html" >"${log%.log}.out" 2>&1 || true
  t1=$(cpu_ticks "$pid")
  # Log columns: start (µs since epoch), status, duration (µs). The steady window starts SKIP s
  # after the first request and ends DUR s after it. sent_min/sent_max: the fewest and most
  # requests sent in one second of the run ÷ the offered rate. A limiter can only be judged on a
  # load that reached it at a constant rate: when CPU 0 or 1 stalls (a compiler of another job),
  # h2load sends its backlog at once after the stall, and a bucket rightly admits only its burst of
  # it, so such a run is marked steady=no and run again. max_ms, the slowest answer, shows a stall
  # of the proxy itself (then the bucket loses what would have come in the stall beyond its burst).
  # cpu_us_per_answer: the proxy's CPU over the run ÷ every answer it gave (admitted or refused).
  sort -n "$log" | awk -v r="$RATE" -v dur="$DUR" -v skip="$SKIP" -v name="$name" -v m="$mult" -v round="$round" \
    -v ticks=$((t1 - t0)) -v hz="$hz" -v total="$(wc -l < "$log")" '
    NR == 1 { t0 = $1 }
    { rel = ($1 - t0) / 1e6; if (rel >= dur) next
      sent[int(rel)]++; if ($3 > maxlat) maxlat = $3
      all++; if ($2 == 200) adm++; else if ($2 == 429 || $2 == 503) ref++; else other++
      if (rel >= skip) { sall++; if ($2 == 200) sadm++ } }
    END { w = dur - skip; lo = 1e18; hi = 0
      for (b = 0; b < dur; b++) { c = sent[b] + 0; if (c < lo) lo = c; if (c > hi) hi = c }
      lo /= r * m; hi /= r * m
      printf "round=%d target=%s load=%dx offered_per_s=%.0f admitted_per_s=%.1f steady_ratio=%.3f whole_ratio=%.3f answers=%d admitted=%d refused=%d other=%d sent_min=%.2f sent_max=%.2f max_ms=%.1f cpu_us_per_answer=%.2f steady=%s\n",
        round, name, m, sall / w, sadm / w, sadm / w / r, adm / dur / r, all, adm, ref, other, lo, hi, maxlat / 1000,
        (total > 0 ? ticks * 1e6 / hz / total : 0),
        (lo >= 0.9 && hi <= 1.1 && other == 0) ? "yes" : "no" }'
}
hz=$(getconf CLK_TCK)
rows_acc="$D/rows-acc"
: > "$rows_acc"
[ "${ACCURACY:-1}" = 0 ] && ACC=()
for round in $(seq "$ROUNDS"); do
  for mult in 2 10; do
    for t in "${ACC[@]}"; do
      IFS='=' read -r name addr pid <<<"$t"
      for attempt in 1 2 3; do
        row=$(run_accuracy "$name" "$addr" "$pid" "$mult" "$round" "$attempt")
        echo "$row attempt=$attempt" >&2
        case $row in *steady=yes*) break ;; esac
      done
      echo "$row" >> "$rows_acc"
    done
  done
done

# --- 2. cost --------------------------------------------------------------------------------
rows_cost="$D/rows-cost"
: > "$rows_cost"
[ "${COST_RUNS:-1}" = 0 ] && COST_ROUNDS=0
for round in $(seq "$COST_ROUNDS"); do
  # Odd rounds run the targets in order, even rounds backwards: "with" is not always the one that
  # follows "without" (a machine whose other load changes from run to run favours one place).
  order=("${COST[@]}")
  if [ $((round % 2)) -eq 0 ]; then
    order=(); for ((i = ${#COST[@]} - 1; i >= 0; i--)); do order+=("${COST[i]}"); done
  fi
  for t in "${order[@]}"; do
    IFS='=' read -r name addr pid <<<"$t"
    # A refused or failed request costs less than a served one, and a stall of the machine shows as
    # socket timeouts: such a run is done again, at most twice.
    for attempt in 1 2 3; do
      t0=$(cpu_ticks "$pid")
      out=$(taskset -c 1 wrk -t1 -c"$CONNS" -d"${COST_DUR}s" "http://$addr/small.html" 2>/dev/null) || true
      t1=$(cpu_ticks "$pid")
      rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out"); n=$(awk '/requests in/ {print $1}' <<<"$out")
      bad=$(awk '/Non-2xx/ {s += $NF} /Socket errors/ {gsub(/,/, ""); s += $4 + $6 + $8 + $10} END {print s + 0}' <<<"$out")
      cpu=$(awk -v a="$t0" -v b="$t1" -v n="${n:-0}" -v hz="$hz" 'BEGIN{ if (n > 0) printf "%.2f", (b - a) * 1e6 / hz / n; else print "nan"}')
      row="round=$round target=$name rps=${rps:-0} cpu_us_per_req=$cpu not_served=$bad"
      echo "$row attempt=$attempt" >&2
      [ "$bad" = 0 ] && break
    done
    echo "$row" >> "$rows_cost"
    [ "$bad" = 0 ] || echo "warning: $name: $bad requests not served with 2xx in a cost run" >&2
  done
done

# --- report ---------------------------------------------------------------------------------
med() { sort -g | awk '{v[NR]=$1} END{ if (NR) print v[int((NR+1)/2)]; else print "nan"}'; }
field() { # ROWS TARGET LOAD KEY: the values of KEY in the rows of TARGET at LOAD
  awk -v n="target=$2" -v l="load=$3" -v k="$4" '$2 == n && $3 == l {
    for (i = 1; i <= NF; i++) if (index($i, k "=") == 1) print substr($i, length(k) + 2) }' "$1"
}
meter() {
  case $1 in
    haproxy-req_rate) echo "sliding window (1 s, the previous period weighted), counts refused requests too" ;;
    haproxy-gpc0_rate) echo "sliding window (1 s) of admitted requests (gpc0 after the deny)" ;;
    nginx-limit_req) echo "leaky bucket in ms (excess drains at rate; burst $BURST nodelay)" ;;
    tcpvs-limit) echo "GCRA, i.e. a token bucket of size burst ($BURST) refilled at rate" ;;
  esac
}
echo
echo "## Rate limits (benches/limits.sh)"
echo
echo "Limit $RATE req/s per client address, burst $BURST; h2load --h1 -c $CLIENTS --rps (constant rate) from"
echo "127.0.0.1 for $DUR s; admitted (200) per second ÷ $RATE over seconds $SKIP..$DUR (after the burst),"
echo "whole run in brackets; medians of $ROUNDS rounds. Proxies on CPU 0, backend and h2load on CPU 1."
echo "A run counts when every second of it sent within ±10% of the offered rate (else run again, up to 3 times)."
echo "haproxy-req_rate is the stick table as issue 26 words it (http_req_rate, deny if gt $RATE): refused requests"
echo "count in the rate too, so under a sustained overload the estimate never falls below $RATE and it admits only"
echo "the first second's $RATE. haproxy-gpc0_rate counts admitted requests only (sc-inc-gpc0 after the deny)."
echo "HAProxy's rate is a sliding-window estimate: the current 1 s period plus the previous one weighted by"
echo "the part of it still inside the window; nginx and tcpvs meter with buckets (burst, then the rate)."
echo
echo "| proxy | how it meters | offered 2x /s | admitted ÷ rate at 2x | offered 10x /s | admitted ÷ rate at 10x | CPU µs per answer at 10x |"
echo "|---|---|---:|---:|---:|---:|---:|"
for t in "${ACC[@]}"; do
  name=${t%%=*}
  o2=$(field "$rows_acc" "$name" 2x offered_per_s | med); s2=$(field "$rows_acc" "$name" 2x steady_ratio | med)
  w2=$(field "$rows_acc" "$name" 2x whole_ratio | med)
  o10=$(field "$rows_acc" "$name" 10x offered_per_s | med); s10=$(field "$rows_acc" "$name" 10x steady_ratio | med)
  w10=$(field "$rows_acc" "$name" 10x whole_ratio | med)
  c10=$(field "$rows_acc" "$name" 10x cpu_us_per_answer | med)
  unsteady=$(awk -v n="target=$name" '$2 == n && /steady=no/' "$rows_acc" | wc -l)
  [ "$unsteady" -gt 0 ] && name="$name ($unsteady runs of unsteady load kept)"
  echo "| $name | $(meter "${name%% *}") | $o2 | $s2 ($w2) | $o10 | $s10 ($w10) | $c10 |"
done
[ -n "$tcpvs_note" ] && echo "| tcpvs | $tcpvs_note | | | | | |"
echo
echo "CPU µs per request (proxy user+system ÷ requests), wrk -t1 -c$CONNS ${COST_DUR}s /small.html keep-alive,"
echo "medians of $COST_ROUNDS rounds, targets in turn (backwards in even rounds); \"with\" = the same limit at $HUGE"
echo "req/s (never refuses; nginx's with burst 100000, its millisecond clock refusing a burst of one event loop"
echo "turn otherwise). Per-round ratios: each round's with ÷ without."
echo
echo "| proxy | req/s without | req/s with | µs/req without | µs/req with | with ÷ without | per-round ratios |"
echo "|---|---:|---:|---:|---:|---:|---|"
for p in haproxy nginx tcpvs; do
  grep -q "target=$p-without " "$rows_cost" || continue
  rw=$(awk -v n="target=$p-without" '$2 == n {sub("rps=", "", $3); print $3}' "$rows_cost" | med)
  rl=$(awk -v n="target=$p-with" '$2 == n {sub("rps=", "", $3); print $3}' "$rows_cost" | med)
  cw=$(awk -v n="target=$p-without" '$2 == n {sub("cpu_us_per_req=", "", $4); print $4}' "$rows_cost" | med)
  cl=$(awk -v n="target=$p-with" '$2 == n {sub("cpu_us_per_req=", "", $4); print $4}' "$rows_cost" | med)
  ratio=$(awk -v a="$cl" -v b="$cw" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "nan" }')
  # Each round's with ÷ without (the two ran one after the other): the spread the median hides.
  per_round=$(awk -v a="target=$p-with" -v b="target=$p-without" '
    { sub("cpu_us_per_req=", "", $4) } $2 == a { w[$1] = $4 } $2 == b { o[$1] = $4 }
    END { for (r = 1; ("round=" r) in o; r++) printf "%s%.2f", (r > 1 ? " " : ""), w["round=" r] / o["round=" r] }' "$rows_cost")
  echo "| $p | $rw | $rl | $cw | $cl | $ratio | $per_round |"
done
[ -n "$tcpvs_note" ] && echo "| tcpvs | $tcpvs_note | | | | | |"
echo
echo "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
