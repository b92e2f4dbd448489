#!/bin/bash
# The LARD flood attack of RELIABILITY.md ("LARD: a flooded path, crafted slow paths, moderate
# spills"): every scenario against two tcpvs binaries, a new and an old build, one run each
# (run.py: 4 emulated backends with LRU caches, 64 honest Zipf clients, the attacker), with
# the CPU to itself. Usage (as measured, under the benchmarks' lock):
#   flock -x /tmp/tcpvs-cpu.lock bash benches/attacks/flood/all.sh NEW_TCPVS OLD_TCPVS OUTDIR
#   python3 benches/attacks/flood/summarize.py OUTDIR/results.jsonl
# Stops starting runs after 14 minutes. Needs python3 only.
set -u
NEW=$1
OLD=$2
OUT=$3
mkdir -p "$OUT"
START=$(date +%s)
HERE=$(cd "$(dirname "$0")" && pwd)
log() { echo "[$(date -u +%H:%M:%S) +$(( $(date +%s) - START ))s] $*" | tee -a "$OUT/driver.log"; }
R="$OUT/results.jsonl"
budget() { [ $(( $(date +%s) - START )) -lt 840 ]; }
run() { # label bin args...
  local label=$1 bin=$2; shift 2
  budget || { log "skip $label (lock budget)"; return; }
  log "run $label $*"
  timeout 60 python3 "$HERE/run.py" --bin "$bin" --label "$label" --results "$R" --workdir /tmp/flood-attack "$@" >> "$OUT/runs.log" 2>&1
  tail -1 "$OUT/runs.log" | tee -a "$OUT/driver.log"
}
run n-base "$NEW" --scenario none
H=$(python3 -c "import json;r=[json.loads(l) for l in open('$R')];print(r[-1]['honest']['top_rank_rps'][0])" 2>/dev/null || echo 90)
log "hottest honest path rate H=$H req/s"
run o-base "$OLD" --scenario none --hottest "$H"
run n-same16 "$NEW" --scenario same:16 --hottest "$H"
run o-same16 "$OLD" --scenario same:16 --hottest "$H"
run n-other16 "$NEW" --scenario other:16 --hottest "$H"
run o-other16 "$OLD" --scenario other:16 --hottest "$H"
run n-all16x5 "$NEW" --scenario all:16:5 --hottest "$H"
run o-all16x5 "$OLD" --scenario all:16:5 --hottest "$H"
run n-slowsame "$NEW" --scenario slowsame:32:2000 --hottest "$H"
run n-slowspread "$NEW" --scenario slowspread:32:2000 --hottest "$H"
run n-mod-base "$NEW" --scenario none --clients 40
run n-modflood "$NEW" --scenario modflood:400 --clients 40
run n-modflood-off "$NEW" --scenario modflood:400 --clients 40 --spill off
run o-modflood "$OLD" --scenario modflood:400 --clients 40
run o-slowsame "$OLD" --scenario slowsame:32:2000 --hottest "$H"
run n-same8 "$NEW" --scenario same:8 --hottest "$H"
run o-same8 "$OLD" --scenario same:8 --hottest "$H"
run n-base-r2 "$NEW" --scenario none
run n-same16-r2 "$NEW" --scenario same:16 --hottest "$H"
run n-other16-r2 "$NEW" --scenario other:16 --hottest "$H"
run o-same16-r2 "$OLD" --scenario same:16 --hottest "$H"
log "done"
