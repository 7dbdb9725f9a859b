#!/usr/bin/env bash
# scripts/report-section-png.sh: one section of an `xrun report` page as a
# PNG, drawn by headless Chromium exactly as the report draws it (its own
# styles, nothing else on the page): for the README and bench/README.md.
#
#   scripts/report-section-png.sh REPORT.html SECTION_ID OUT.png [WIDTH HEIGHT]
#   scripts/report-section-png.sh convergence.html convergence docs/batch-vs-convergence.png
set -euo pipefail

if [[ $# -lt 3 ]]; then
  echo "usage: $0 REPORT.html SECTION_ID OUT.png [WIDTH HEIGHT]" >&2
  exit 2
fi
report=$1 section=$2 out=$3 width=${4:-1240} height=${5:-900}
browser=$(command -v chromium || command -v chromium-browser || true)
if [[ -z $browser ]]; then
  echo "$0: chromium is not installed (apt-get install chromium)" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The page's <head> (its styles) and the one <section id="SECTION_ID">.
python3 - "$report" "$section" "$work/section.html" <<'EOF'
import re, sys
html = open(sys.argv[1], encoding="utf-8").read()
head = html[: html.index("<main>") + len("<main>")]
m = re.search(r'<section[^>]*\bid="%s"' % re.escape(sys.argv[2]), html)
if not m:
    sys.exit("no section with id %r in %s" % (sys.argv[2], sys.argv[1]))
end = html.index("</section>", m.start()) + len("</section>")
open(sys.argv[3], "w", encoding="utf-8").write(head + html[m.start():end] + "</main></body></html>\n")
EOF

timeout 120 "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
  --user-data-dir="$work/profile" --window-size="$width,$height" \
  --screenshot="$out" "file://$work/section.html" 2>/dev/null
echo "$out"
