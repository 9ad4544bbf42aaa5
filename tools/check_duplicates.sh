#!/usr/bin/env bash
# At most 5 pairs of repeated blocks (6+ lines alike) within src/ and include/, as `duplicates`
# (the project's tool, /work/.library) counts them. Where the tool is not installed the check
# cannot run, and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v duplicates >/dev/null 2>&1; then
  echo "check_duplicates: the 'duplicates' tool is not installed here; the check did not run"
  exit 0
fi
pairs=$(duplicates --most 200 --seconds 120 | awk '/^D[0-9]/ {print $2, $4}' | grep -cE '^(src|include)/[^ ]* (src|include)/' || true)
echo "check_duplicates: $pairs pairs of repeated blocks within src/ and include/ (at most 5)"
if [ "$pairs" -gt 5 ]; then
  duplicates --most 200 | grep -E '^D[0-9]+ (src|include)/[^ ]* ~ (src|include)/'
  exit 1
fi
