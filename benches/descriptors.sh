#!/usr/bin/env bash
# The descriptor test of issue 13: a proxy started under a soft limit of 1024 open files
# (`ulimit -Sn 1024` in the subshell that execs it, the hard limit left as it is) but configured
# for more clients (tcpvs `max_clients = 5000` in [switch], HAProxy `maxconn 5000`), one thread or
# worker on CPU 0, in front of an nginx backend on CPU 1, all on 127.0.0.1. benches/descriptors.py
# on CPU 1 then opens NCLIENTS (2000) connections at once, each sending one GET /small.html and
# keeping its connection open until every client is answered or has failed (TIMEOUT s at most).
# Per proxy: its open-file limit after start (/proc/PID/limits), what tcpvs logged at start,
# answered of NCLIENTS, errors by kind, the most descriptors it held (/proc/PID/fd, sampled every
# 0.1 s), the lines it wrote to stdout/stderr (and how many say "Too many open files") by the end
# of the clients and in all, and the time from SIGTERM to its exit (SIGKILL after 15 s).
#
# Usage: benches/descriptors.sh [TCPVS_BINARY...]  (default target/release/tcpvs; several builds
#        for an A/B, targets tcpvs1, tcpvs2, ...)
# Env: NCLIENTS (2000), SOFT (1024, the soft limit the proxies start under), MAXCONN (5000, tcpvs
#      max_clients and HAProxy maxconn), TIMEOUT (20 s for the clients), ROUNDS (1), ONLY
#      (targets, default haproxy and the tcpvs ones), KEEP=1 (keep the temporary directory)
# Needs: apt-get install haproxy nginx curl; python3; a hard RLIMIT_NOFILE above NCLIENTS + 64
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/benches/lib.sh"
NCLIENTS=${NCLIENTS:-2000}; SOFT=${SOFT:-1024}; MAXCONN=${MAXCONN:-5000}; TIMEOUT=${TIMEOUT:-20}
ROUNDS=${ROUNDS:-1}
for t in haproxy nginx curl taskset python3; do command -v $t >/dev/null || { echo "missing: $t"; exit 2; }; done
bins=("$@"); [ $# -gt 0 ] || bins=("$root/target/release/tcpvs")
for b in "${bins[@]}"; do [ -x "$b" ] || { echo "not an executable: $b" >&2; exit 2; }; done
HARD=$(ulimit -Hn)
[ "$HARD" = unlimited ] || [ "$HARD" -ge $((NCLIENTS + 64)) ] || { echo "ulimit -Hn $HARD < NCLIENTS + 64" >&2; exit 2; }
ulimit -Sn "$HARD"   # the client's and the backend's limit (descriptors.py raises its own too)

BE=18831; BASE=18840
D=$(mktemp -d /tmp/descriptors.XXXX); chmod 755 "$D"; mkdir -p "$D/www" "$D/logs"
head -c 100 /dev/zero | tr '\0' 'a' > "$D/www/small.html"; chmod -R a+rX "$D/www"
PIDS=(); PROXY=""; CLIENT=""; SAMPLER=""
cleanup() {
  # shellcheck disable=SC2086
  stop_gracefully $SAMPLER $CLIENT $PROXY "${PIDS[@]}"
  [ -n "${KEEP:-}" ] && echo "kept $D" >&2 || rm -rf "$D"
}
trap cleanup EXIT

nginx_backend_config "$D" "$BE"
taskset -c 1 nginx -c "$D/backend.conf" -p "$D" & PIDS+=($!)
wait_http "http://127.0.0.1:$BE/small.html"

cat > "$D/haproxy.cfg" <<C
global
  nbthread 1
  maxconn $MAXCONN
defaults
  mode http
  timeout connect 3s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
frontend fe
  bind 127.0.0.1:$BASE
  default_backend be
backend be
  http-reuse always
  server s1 127.0.0.1:$BE
C
targets=(haproxy); i=0
for b in "${bins[@]}"; do
  i=$((i + 1)); name=tcpvs; [ ${#bins[@]} -gt 1 ] && name=tcpvs$i
  tcpvs_config "$D/$name.toml" 1 $((BASE + i)) "$BE" "max_clients = $MAXCONN"
  targets+=("$name")
done
names=()
for t in "${targets[@]}"; do
  [[ " ${ONLY:-haproxy tcpvs tcpvs1 tcpvs2 tcpvs3 tcpvs4} " == *" $t "* ]] && names+=("$t")
done

# start_proxy NAME LOG: execs it under `ulimit -Sn $SOFT` on CPU 0, output to LOG; sets PROXY and
# PORT, waits until it answers.
start_proxy() {
  local k
  case $1 in
    haproxy) PORT=$BASE
      ( ulimit -Sn "$SOFT"; exec taskset -c 0 haproxy -f "$D/haproxy.cfg" -db ) >"$2" 2>&1 & PROXY=$! ;;
    tcpvs*) k=${1#tcpvs}; PORT=$((BASE + ${k:-1}))
      ( ulimit -Sn "$SOFT"; exec taskset -c 0 "${bins[${k:-1} - 1]}" run -c "$D/$1.toml" ) >"$2" 2>&1 & PROXY=$! ;;
  esac
  wait_http "http://127.0.0.1:$PORT/small.html"
}
lines() { wc -l < "$1" | tr -d ' '; }
emfile() { grep -c 'Too many open files' "$1" || true; }

echo "# descriptors: proxies under ulimit -Sn $SOFT (hard $HARD), max_clients/maxconn $MAXCONN; $NCLIENTS clients at once, ${TIMEOUT} s"
for r in $(seq "$ROUNDS"); do
  for name in "${names[@]}"; do
    log="$D/logs/$name.$r.log"
    start_proxy "$name" "$log"
    lim=$(awk '/^Max open files/ {print $4 "/" $5}' "/proc/$PROXY/limits")
    sleep 0.3
    if [[ $name == tcpvs* ]]; then
      echo "## $name (round $r) logged at start ($(lines "$log") lines; open-file limit now soft/hard $lim):"
      head -20 "$log" | sed 's/^/    /'
    fi
    ( m=0; for k in $(seq $((TIMEOUT * 10 + 100))); do
        c=$(ls "/proc/$PROXY/fd" 2>/dev/null | wc -l) || c=0; [ "$c" -gt "$m" ] && m=$c && echo "$m" > "$D/peak"
        sleep 0.1; done ) & SAMPLER=$!
    taskset -c 1 python3 "$root/benches/descriptors.py" 127.0.0.1 "$PORT" "$NCLIENTS" "$TIMEOUT" \
      >"$D/client.out" 2>"$D/client.err" & CLIENT=$!
    wait "$CLIENT" || echo "client exited with $?: $(tail -3 "$D/client.err")" >&2
    CLIENT=""
    sleep 1
    kill "$SAMPLER" 2>/dev/null || true; wait "$SAMPLER" 2>/dev/null || true; SAMPLER=""
    peak=$(cat "$D/peak" 2>/dev/null || echo 0); rm -f "$D/peak"
    l1=$(lines "$log"); e1=$(emfile "$log")
    t0=$(date +%s.%N); kill -TERM "$PROXY"; stopped=no
    for k in $(seq 150); do kill -0 "$PROXY" 2>/dev/null || { stopped=yes; break; }; sleep 0.1; done
    t1=$(date +%s.%N)
    if [ $stopped = no ]; then kill -9 "$PROXY" 2>/dev/null || true; fi
    wait "$PROXY" 2>/dev/null || true; PROXY=""
    stop_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
    [ $stopped = yes ] || stop_s=">15 (killed)"
    answered=$(awk '/^answered/ {print $2}' "$D/client.out")
    errors=$(awk '/^error/ {printf "%s%s=%s", sep, $2, $3; sep=", "}' "$D/client.out")
    wall=$(awk '/^wall_s/ {print $2}' "$D/client.out")
    echo "round=$r target=$name limit=$lim answered=${answered:-0} errors=[${errors:-none}] wall_s=${wall:-nan} peak_fds=$peak" \
      "log_lines=$l1 emfile_lines=$e1 log_lines_total=$(lines "$log") emfile_total=$(emfile "$log") stop_s=$stop_s" \
      | tee -a "$D/rows"
  done
done

echo
echo "Under ulimit -Sn $SOFT (hard $HARD), max_clients / maxconn $MAXCONN, $NCLIENTS clients at once"
echo "(one request each, connections held until all are done; log lines: by the clients' end / in all)."
echo
echo "| proxy | round | open files soft/hard | answered of $NCLIENTS | errors | peak fds | log lines | \"Too many open files\" | SIGTERM to exit (s) | within 5 s |"
echo "|---|---|---|---|---|---|---|---|---|---|"
while read -r line; do
  f() { sed -n "s/.* $1=\\([^ ]*\\).*/\\1/p" <<<" $line"; }
  errs=$(sed -n 's/.*errors=\[\([^]]*\)\].*/\1/p' <<<"$line")
  s=$(sed -n 's/.*stop_s=//p' <<<"$line")
  ok=no; [[ $s =~ ^[0-9.]+$ ]] && awk -v s="$s" 'BEGIN { exit !(s <= 5) }' && ok=yes
  echo "| $(f target) | $(f round) | $(f limit) | $(f answered) | $errs | $(f peak_fds) | $(f log_lines) / $(f log_lines_total) | $(f emfile_lines) / $(f emfile_total) | $s | $ok |"
done < "$D/rows"
