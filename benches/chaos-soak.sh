#!/usr/bin/env bash
# Chaos soak, long variant (issue 13): tests/chaos.rs with its storm stretched to CHAOS_SECONDS
# (default 300). The real tcpvs binary (2 workers) under honest clients that check every byte
# (small, 1 MiB, chunked, uploads by Content-Length and chunked; kept alive and not), rude
# clients (resets mid-body, abandoned downloads, garbage, cut heads, pipelined junk), a few
# hundred slowloris connections, a server killed and restarted every 2 s and the rule file
# reloaded every 3 s. Then: 0 corrupted bodies, 0 errors, the process alive and answering, its
# descriptors back to the baseline and its RSS back near it. Prints the totals; exit status 0
# when every invariant held. The quick variant (15 s) runs in `cargo test --workspace --release`.
#
# Usage: benches/chaos-soak.sh            Env: CHAOS_SECONDS (300)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export CHAOS_SECONDS=${CHAOS_SECONDS:-300}
cargo build --release
echo "chaos soak: storm of ${CHAOS_SECONDS} s; $(nproc) CPUs; tcpvs $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo '+changes')"
started=$(date +%s)
status=0
cargo test --release --test chaos -- --nocapture --test-threads 1 || status=$?
echo "chaos soak: wall time $(( $(date +%s) - started )) s, exit status $status"
exit "$status"
