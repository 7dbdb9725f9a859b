#!/usr/bin/env bash
# bench/cpu_vs_pytorch.sh: xrun's CPU engine against PyTorch on this machine,
# in one go: ResNet50 (10 classes), AdamW, synthetic data, the same
# thread count for all (default: all cores), for each configuration in
# CONFIGS ("BATCH:SIZE ...", default "32:32 128:32 8:224": batch 32 and 128
# of 32x32 images, batch 8 of 224x224). Engines:
#   - xrun (bench/cpu-bench.toml), in fp32 and bf16;
#   - Debian's python3-torch (/usr/bin/python3; installed with apt-get when
#     missing and this runs as root);
#   - PyTorch from PyPI, in a virtual environment this script creates and
#     keeps (XRUN_BENCH_VENV, default ~/.cache/xrun/pypi-torch; about 5 GB);
#     PYPI_PYTHON=/path/to/python uses another, PYPI_PYTHON=none skips it;
# PyTorch in channels_last and contiguous layouts, AdamW fused where the
# build has it (bench/pytorch_resnet50.py), in fp32 and, where the CPU has
# bf16 instructions (avx512_bf16 or amx_bf16), with bf16 autocast as well,
# and xrun in bf16 (PRECISIONS="fp32" leaves bf16 out). Every engine runs
# ROUNDS times, interleaved (a noisy machine then hurts all alike). Per
# configuration the table shows each engine's median round, its range, and
# a ratio: for a PyTorch row, xrun of the same precision over it; for xrun
# bf16, itself over xrun fp32; the median of the per-round ratios (round i
# over round i) with their range. Not a CI test: run it on a quiet machine and
# record the figures in bench/README.md.
#   bench/cpu_vs_pytorch.sh [THREADS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
threads="${1:-$(nproc)}"
rounds="${2:-3}"
configs="${CONFIGS:-32:32 128:32 8:224}"
build="${XRUN_BUILD_DIR:-build}"
xrun="$build/runner/xrun"
[ -x "$xrun" ] || ./scripts/setup.sh
work="$(mktemp -d)"

# ---- the engines ------------------------------------------------------------
has_torch() { "$1" -c "import torch, torchvision" 2>/dev/null; }
if ! has_torch /usr/bin/python3 && [ "$(id -u)" = 0 ]; then
  echo "installing Debian's python3-torch and python3-torchvision (apt-get)" >&2
  apt-get install -y -qq python3-torch python3-torchvision >/dev/null ||
    { apt-get update -qq && apt-get install -y -qq python3-torch python3-torchvision >/dev/null; } ||
    echo "could not install python3-torch: Debian's PyTorch is left out" >&2
fi
pypi="${PYPI_PYTHON:-}"
if [ -z "$pypi" ]; then
  venv="${XRUN_BENCH_VENV:-$HOME/.cache/xrun/pypi-torch}"
  if ! has_torch "$venv/bin/python"; then
    echo "creating $venv with PyPI's torch and torchvision (pip; about 5 GB)" >&2
    python3 -m venv "$venv" && "$venv/bin/pip" install -q torch torchvision ||
      echo "could not install PyPI's torch: it is left out" >&2
  fi
  pypi="$venv/bin/python"
fi

precisions="${PRECISIONS:-fp32 bf16}"
if [[ " $precisions " == *" bf16 "* ]] && ! grep -qwE "avx512_bf16|amx_bf16" /proc/cpuinfo; then
  echo "this CPU has no bf16 instructions (avx512_bf16, amx_bf16): PyTorch's bf16 autocast is left out" >&2
  precisions="${precisions//bf16/}"
fi
engines=()
for p in $precisions; do engines+=("xrun $p"); done
for py in /usr/bin/python3 "$pypi"; do
  [ "$py" != none ] && has_torch "$py" || continue
  for p in $precisions; do engines+=("$py channels_last $p" "$py contiguous $p"); done
done

# ---- one round of one engine on one configuration: "img/s median_ms label" ---
measure() {  # ENGINE BATCH SIZE
  local batch="$2" size="$3" warmup=5 steps=30
  if [ "$size" -gt 64 ]; then warmup=3 steps=10; fi
  if [[ "$1" == xrun* ]]; then
    local db="$work/round-$RANDOM$RANDOM.db" precision="${1#xrun }"
    "$xrun" run bench/cpu-bench.toml --db "$db" --set train.threads="$threads" \
      --set train.batch_size="$batch" --set data.image_size="$size" \
      --set train.precision="$precision" \
      --set measure.warmup_steps="$warmup" --set measure.measure_steps="$steps" >/dev/null 2>&1
    sqlite3 -separator ' ' "$db" \
      "SELECT throughput, step_ms_median, 'xrun $precision (oneDNN ' || onednn || ')' FROM runs"
  else
    set -- $1
    "$1" bench/pytorch_resnet50.py --threads "$threads" --memory-format "$2" --precision "$3" \
      --batch "$batch" --size "$size" --warmup "$warmup" --steps "$steps" | python3 -c '
import json, sys; r = json.load(sys.stdin)
print(r["images_per_second"], r["median_step_ms"], "PyTorch", r["torch"],
      r["precision"] if r["precision"] == "fp32" else "bf16 autocast",
      "(" + r["memory_format"] + ", AdamW " + r["adamw"] + ")")'
  fi
}

for config in $configs; do
  batch="${config%%:*}" size="${config##*:}"
  for ((i = 0; i < rounds; i++)); do
    for e in "${!engines[@]}"; do
      measure "${engines[$e]}" "$batch" "$size" >> "$work/$config-engine-$e.txt"
    done
  done
done

python3 - "$work" "$configs" "${engines[@]}" <<'PY'
import statistics, sys
work, configs, engines = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
# The ratio column: a PyTorch row, xrun of that precision over it (xrun's
# speed-up); xrun's bf16 row, itself over xrun fp32; per round, then median.
def ratio_of(e):  # (numerator engine, denominator engine) or None
    precision = engines[e].split()[-1]
    if engines[e].startswith("xrun"):
        return (e, 0) if e != 0 else None
    same = "xrun " + precision
    return (engines.index(same), e) if same in engines else None
for config in configs:
    batch, size = config.split(":")
    print(f"\nbatch {batch}, {size}x{size}")
    rounds = [[l.strip().split(None, 2) for l in open(f"{work}/{config}-engine-{e}.txt") if l.strip()]
              for e in range(len(engines))]
    print(f"{'engine':64} {'img/s':>7} {'range':>9} {'median ms':>9} {'ratio':>8} {'range':>11}")
    for e, lines in enumerate(rounds):
        ips = [float(l[0]) for l in lines]
        ms = statistics.median(float(l[1]) for l in lines)
        spread = f"{min(ips):.0f}-{max(ips):.0f}"
        ratio = ratio_range = "-"
        if (pair := ratio_of(e)) is not None:
            num, den = ([float(l[0]) for l in rounds[i]] for i in pair)
            per_round = [a / b for a, b in zip(num, den)]
            ratio = f"{statistics.median(per_round):.2f}x"
            ratio_range = f"{min(per_round):.2f}-{max(per_round):.2f}"
        print(f"{lines[0][2]:64} {statistics.median(ips):7.1f} {spread:>9} {ms:9.1f} {ratio:>8} {ratio_range:>11}")
PY
isa=baseline
grep -qw avx2 /proc/cpuinfo && isa=avx2
grep -qw avx512f /proc/cpuinfo && isa=avx512
echo
echo "threads: $threads; rounds: $rounds; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) ($isa); runs in $work"
