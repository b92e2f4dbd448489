#!/usr/bin/env bash
# Every side-by-side figure of BENCHMARKS.md in one go: builds the release binary, runs
#   peerbench-tcpvs.sh all   small keep-alive, CLOSE=1 and 1 MiB, tcpvs pinned with workers = 1
#                            (and a splice = false instance), against HAProxy and nginx;
#   scaling.sh               workers = 2 / nbthread 2 / worker_processes 2 on shared cores;
#   splice-vs-copy.sh        1 MiB bodies from a sendfile backend;
#   tls.sh                   TLS keep-alive, a TLS connection per request (resumed, and full
#                            handshakes), passthrough of 1 MiB beside HAProxy mode tcp;
# keeps the medians in benches/results/*.txt and has benches/report.rs write the table between
# the comparison markers of BENCHMARKS.md and draw benches/results/comparison.svg.
# Takes about fifteen minutes. Env: ROUNDS, DUR (peerbench's). Needs: haproxy nginx wrk curl openssl.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mkdir -p benches/results
cargo build --release >&2
benches/peerbench-tcpvs.sh all | tee benches/results/peerbench.txt
{ echo "## 2 workers, shared cores: scaling.sh (wrk and the backend on the same 2 cores)"; benches/scaling.sh; } \
  | tee benches/results/scaling.txt
{ echo "## 1 MiB, sendfile backend: splice-vs-copy.sh"; benches/splice-vs-copy.sh; } \
  | tee benches/results/splice-vs-copy.txt
TCPVS=target/release/tcpvs benches/tls.sh | tee benches/results/tls.txt
cargo bench --bench report -- benches/results/peerbench.txt benches/results/scaling.txt \
  benches/results/splice-vs-copy.txt benches/results/tls.txt
