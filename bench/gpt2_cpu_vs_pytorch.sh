#!/usr/bin/env bash
# bench/gpt2_cpu_vs_pytorch.sh: xrun's GPT-2 training on the CPU against
# PyTorch eager on this machine, in one go, in PRECISION (fp32, the default,
# or bf16: xrun's bf16 GEMMs against torch.autocast's bf16), the same thread count for
# all (default: all cores), synthetic tokens (vocabulary 50257), AdamW with
# decay on matrices only. For each configuration in CONFIGS
# ("LAYERS:HEADS:WIDTH:T:BATCH ...", default "6:6:384:256:4 12:12:768:256:4":
# the issue's small preset and gpt2 124M at context 256). Engines:
#   - xrun (bench/gpt2-bench.toml);
#   - PyTorch from PyPI with transformers (bench/pytorch_gpt2.py): its
#     GPT2LMHeadModel, and a plain nanoGPT-style model (fused qkv Linear,
#     scaled_dot_product_attention), in the virtual environment
#     bench/cpu_vs_pytorch.sh makes (XRUN_BENCH_VENV, default
#     ~/.cache/xrun/pypi-torch; transformers added with pip when missing).
# Every engine runs ROUNDS times, interleaved. The table shows each
# engine's median tokens/s, its range, and for the PyTorch rows xrun's
# speed-up over them (median of the per-round ratios, with their range).
# Not a CI test: run it on a quiet machine, record the figures in
# bench/README.md.
#   bench/gpt2_cpu_vs_pytorch.sh [THREADS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
threads="${1:-$(nproc)}"
rounds="${2:-2}"
configs="${CONFIGS:-6:6:384:256:4 12:12:768:256:4}"
precision="${PRECISION:-fp32}"
build="${XRUN_BUILD_DIR:-build}"
xrun="$build/runner/xrun"
[ -x "$xrun" ] || ./scripts/setup.sh
work="$(mktemp -d)"
venv="${XRUN_BENCH_VENV:-$HOME/.cache/xrun/pypi-torch}"
py="$venv/bin/python"
if ! "$py" -c "import torch, transformers" 2>/dev/null; then
  echo "installing PyPI's torch and transformers into $venv (pip; about 5 GB)" >&2
  { [ -x "$py" ] || python3 -m venv "$venv"; } && "$venv/bin/pip" install -q torch transformers ||
    { echo "no PyTorch with transformers: nothing to compare with" >&2; exit 1; }
fi
engines=(xrun nanogpt hf)

measure() {  # ENGINE LAYERS HEADS WIDTH T BATCH -> "tokens/s label"
  local warmup=3 steps=8
  if [ "$4" -ge 768 ]; then warmup=2 steps=4; fi
  if [ "$1" = xrun ]; then
    local db="$work/round-$RANDOM$RANDOM.db"
    "$xrun" run bench/gpt2-bench.toml --db "$db" --set train.threads="$threads" \
      --set model.layers="$2" --set model.heads="$3" --set model.width="$4" \
      --set model.context="$5" --set data.sequence_length="$5" --set train.batch_size="$6" \
      --set measure.warmup_steps="$warmup" --set measure.measure_steps="$steps" \
      --set train.precision="$precision" >/dev/null 2>&1
    sqlite3 -separator ' ' "$db" "SELECT throughput, 'xrun (oneDNN ' || onednn || ')' FROM runs"
  else
    local version
    version="$("$py" -c 'import torch, transformers; print(torch.__version__, transformers.__version__)')"
    local label="PyTorch ${version% *} nanoGPT-style"
    [ "$1" = hf ] && label="PyTorch ${version% *} transformers ${version#* } GPT2LMHeadModel"
    echo "$("$py" bench/pytorch_gpt2.py "$1" "$2" "$3" "$4" "$5" "$6" "$threads" "$warmup" "$steps" "$precision" |
      awk '/^tokens_per_s/ {print $2}') $label"
  fi
}

for config in $configs; do
  IFS=: read -r layers heads width t batch <<< "$config"
  for ((i = 0; i < rounds; i++)); do
    for e in "${!engines[@]}"; do
      measure "${engines[$e]}" "$layers" "$heads" "$width" "$t" "$batch" >> "$work/$config-$e.txt"
    done
  done
done

python3 - "$work" "$configs" "${#engines[@]}" <<'PY'
import statistics, sys
work, configs, count = sys.argv[1], sys.argv[2].split(), int(sys.argv[3])
for config in configs:
    layers, heads, width, t, batch = config.split(":")
    print(f"\n{layers} layers, {heads} heads, width {width}, T {t}, batch {batch}")
    rounds = [[l.strip().split(None, 1) for l in open(f"{work}/{config}-{e}.txt") if l.strip()]
              for e in range(count)]
    print(f"{'engine':60} {'tok/s':>8} {'range':>11} {'xrun over it':>12} {'range':>11}")
    xrun = [float(l[0]) for l in rounds[0]]
    for e, lines in enumerate(rounds):
        tps = [float(l[0]) for l in lines]
        ratio = span = "-"
        if e > 0:
            per_round = [a / b for a, b in zip(xrun, tps)]
            ratio = f"{statistics.median(per_round):.2f}x"
            span = f"{min(per_round):.2f}-{max(per_round):.2f}"
        print(f"{lines[0][1]:60} {statistics.median(tps):8.1f} {min(tps):5.0f}-{max(tps):<5.0f} {ratio:>12} {span:>11}")
PY
echo
echo "precision: $precision; threads: $threads; rounds: $rounds; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); runs in $work"
