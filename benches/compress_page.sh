#!/usr/bin/env bash
# The page of benches/compress.sh: real HTML of exactly BYTES bytes, none of it repeated (a
# repeat within 32 KiB would flatter gzip, one within a few MiB brotli and zstd): the admin
# monitor page (HTML, CSS and JS), then the README's lines as HTML paragraphs (prose, tables
# and code, escaped), cut to BYTES.
# Usage: benches/compress_page.sh OUT [BYTES]   (BYTES: 102400; PAGE_SRC: an HTML file to use
#        instead, repeated if it is shorter)
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 OUT [BYTES]"; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
want=${2:-102400}
if [ -n "${PAGE_SRC:-}" ]; then
  size=$(wc -c < "$PAGE_SRC")
  [ "$size" -gt 0 ] || { echo "empty: $PAGE_SRC"; exit 2; }
  for _ in $(seq $(( (want + size - 1) / size ))); do cat "$PAGE_SRC"; done > "$1.whole"
else
  { cat "$root/switch/admin/monitor.html"
    sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' -e 's|.*|<p>&</p>|' "$root/README.md"
  } > "$1.whole"
fi
[ "$(wc -c < "$1.whole")" -ge "$want" ] || { echo "not enough HTML for $want bytes"; exit 1; }
head -c "$want" "$1.whole" > "$1"; rm -f "$1.whole"
[ "$(wc -c < "$1")" -eq "$want" ] || { echo "page not $want bytes: $1"; exit 1; }
