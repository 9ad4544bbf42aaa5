#!/usr/bin/env bash
# At most 3 pairs of repeated blocks (6+ lines alike) within src/ and include/, as `duplicates`
# (the project's tool, /work/.library) counts them. Rows the tool marks `boilerplate` (what they
# share is thin: a class's deleted copy operations, a name table, a constructor's
# register_module lines) are listed but not counted. Where the tool is not installed the check
# cannot run, and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v duplicates >/dev/null 2>&1; then
  echo "check_duplicates: the 'duplicates' tool is not installed here; the check did not run"
  exit 0
fi
rows=$(duplicates --most 200 --seconds 120 | grep -E '^D[0-9]+ (src|include)/[^ ]* ~ (src|include)/' || true)
counted=$(printf '%s\n' "$rows" | grep -v boilerplate | grep -c '^D' || true)
echo "check_duplicates: $counted pairs of repeated blocks within src/ and include/ (at most 3), besides boilerplate:"
printf '%s\n' "$rows"
[ "$counted" -le 3 ]
