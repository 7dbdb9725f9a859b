#!/usr/bin/env bash
# bench/cpu_vs_pytorch.sh: xrun's CPU engine against PyTorch on this machine,
# in one go: ResNet50 (10 classes), 32x32, batch 32, AdamW, fp32, the same
# thread count for all (default: all cores). Engines: xrun; Debian's
# python3-torch 1.13 (/usr/bin/python3, when it has torch); PyTorch from PyPI
# (the python named by $PYPI_PYTHON, when set); PyTorch in channels_last and
# contiguous layouts. Every engine runs ROUNDS times, interleaved (a noisy
# machine then hurts all alike); the table shows each engine's median round
# and xrun's ratio to it. Not a CI test: run it on a quiet machine and record
# the figures in bench/README.md.
#   bench/cpu_vs_pytorch.sh [THREADS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
threads="${1:-$(nproc)}"
rounds="${2:-3}"
build="${XRUN_BUILD_DIR:-build}"
xrun="$build/runner/xrun"
[ -x "$xrun" ] || ./scripts/setup.sh
work="$(mktemp -d)"

engines=("xrun")
/usr/bin/python3 -c "import torch, torchvision" 2>/dev/null &&
  engines+=("/usr/bin/python3 channels_last" "/usr/bin/python3 contiguous")
[ -n "${PYPI_PYTHON:-}" ] && engines+=("$PYPI_PYTHON channels_last" "$PYPI_PYTHON contiguous")

# One round of one engine: prints "img/s median_ms label".
measure() {
  if [ "$1" = "xrun" ]; then
    local db="$work/round-$RANDOM.db"
    "$xrun" run bench/cpu-bench.toml --db "$db" --set train.threads="$threads" >/dev/null 2>&1
    sqlite3 -separator ' ' "$db" \
      "SELECT throughput, step_ms_median, 'xrun (oneDNN ' || onednn || ')' FROM runs"
  else
    set -- $1
    "$1" bench/pytorch_resnet50.py --threads "$threads" --memory-format "$2" | python3 -c '
import json, sys; r = json.load(sys.stdin)
print(r["images_per_second"], r["median_step_ms"], "PyTorch", r["torch"], "(" + r["memory_format"] + ")")'
  fi
}

for ((i = 0; i < rounds; i++)); do
  for e in "${!engines[@]}"; do measure "${engines[$e]}" >> "$work/engine-$e.txt"; done
done

python3 - "$work" "${#engines[@]}" <<'PY'
import statistics, sys
work, n = sys.argv[1], int(sys.argv[2])
rows = []
for e in range(n):
    lines = [l.strip().split(None, 2) for l in open(f"{work}/engine-{e}.txt") if l.strip()]
    ips = statistics.median(float(l[0]) for l in lines)
    ms = statistics.median(float(l[1]) for l in lines)
    spread = f"{min(float(l[0]) for l in lines):.0f}-{max(float(l[0]) for l in lines):.0f}"
    rows.append((lines[0][2], ips, ms, spread))
print(f"{'engine':46} {'img/s':>8} {'range':>9} {'median ms':>10} {'xrun is':>8}")
for label, ips, ms, spread in rows:
    ratio = "-" if label.startswith("xrun") else f"{rows[0][1] / ips:.2f}x"
    print(f"{label:46} {ips:8.1f} {spread:>9} {ms:10.1f} {ratio:>8}")
PY
echo "threads: $threads; rounds: $rounds; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); runs in $work"
