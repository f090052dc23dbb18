#!/usr/bin/env bash
# The plan pages' screenshots in docs/img/: the forced #348 run, its diff against autoparallel
# alone, the PR #517 case's diff (alone vs the default call) and llama3 (tiny, 2 layers, 2x4),
# each built here on CPU with `show --example`, rendered by headless Chromium (Debian's package)
# and reduced to a 256-colour PNG. Prints the seconds each step took.
#
#     bash benchmarks/plan_pages.sh            # pages and JSON runs in build/plan_pages/
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/plan_pages
mkdir -p "$out" docs/img
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

page() {  # name, show's arguments...
  local name=$1; shift
  local t0=$(date +%s.%N)
  python3 -m autoparallel_constraints show "$@" -o "$out/$name.html" 2>/dev/null | grep -v '^wrote .*json$'
  local t1=$(date +%s.%N)
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,1100 \
    --screenshot="$out/$name.png" "file://$PWD/$out/$name.html" >/dev/null 2>&1
  local t2=$(date +%s.%N)
  python3 - "$out/$name.png" "docs/img/$name.png" <<'PY'
import sys
from PIL import Image
Image.open(sys.argv[1]).convert("RGB").quantize(256).save(sys.argv[2], optimize=True)
PY
  printf '%s: show %.1f s, chromium screenshot %.1f s -> docs/img/%s.png\n' "$name" \
    "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)" "$name"
}

page plan_348 --example 348
page diff_348 --example 348 --diff
page diff_517 --example 517 --diff
page plan_llama3 --example llama3
