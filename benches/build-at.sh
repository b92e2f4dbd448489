#!/usr/bin/env bash
# Builds the release binary of tcpvs at COMMIT, for the before -> after figures of BENCHMARKS.md
# (benches/ab.sh OLD NEW, faults.sh, syscalls.sh, scaling.sh take binaries): the commit's tree
# from `git archive` (no checkout, the working tree and the index are not touched) in
# $BUILD_ROOT/COMMIT/src, built with its own target directory $BUILD_ROOT/COMMIT/target (never
# the shared one: a stale library there once spoiled a bench run). Prints the binary's path;
# a binary already built is reused.
# Usage: benches/ab.sh "$(benches/build-at.sh 91f78c0)" "$(benches/build-at.sh e6497f4)"
# Env: BUILD_ROOT (/tmp/tcpvs-at)
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 COMMIT" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
commit=$(git -C "$root" rev-parse --short=12 "$1^{commit}")
dir=${BUILD_ROOT:-/tmp/tcpvs-at}/$commit
bin=$dir/target/release/tcpvs
if [ ! -x "$bin" ]; then
  rm -rf "$dir/src"; mkdir -p "$dir/src"
  git -C "$root" archive "$commit" | tar -x -C "$dir/src"
  cargo build --release --bin tcpvs --manifest-path "$dir/src/Cargo.toml" --target-dir "$dir/target" >&2
fi
echo "$bin"
