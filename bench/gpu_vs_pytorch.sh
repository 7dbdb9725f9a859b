#!/usr/bin/env bash
# bench/gpu_vs_pytorch.sh: xrun's CUDA engine against PyTorch eager on the
# same GPU in one go: torchvision resnet50, synthetic 224x224, batch 256,
# channels_last / NHWC, cudnn benchmark on, AdamW, fp16 (dynamic loss
# scaling) and bf16. Prints images/s side by side and xrun's ratio (goal:
# 1.25x). Then GPT-2 124M (experiments/gpu-gpt2-smoke.toml: synthetic
# tokens, T 256, batch 8, 10 warmup + 20 measured steps) against PyTorch's
# nanoGPT-style model of the same shape (bench/pytorch_gpt2.py on cuda,
# autocast), tokens/s in fp16 and bf16. Needs a GPU and a python3 with
# torch + torchvision.
#   bench/gpu_vs_pytorch.sh [XRUN] [DB]
set -euo pipefail
cd "$(dirname "$0")/.."
xrun="${1:-${XRUN_BUILD_DIR:-build}/runner/xrun}"
db="${2:-$(mktemp -d)/gpu-bench.db}"
python="${PYTHON:-python3}"

"$xrun" run experiments/gpu-bench.toml --db "$db" --force
printf "%-6s %12s %12s %8s\n" precision "xrun img/s" "torch img/s" "xrun is"
for p in fp16 bf16; do
  ours=$("$xrun" runs --db "$db" --where train.precision=$p --where status=complete --format csv |
         python3 -c 'import csv,sys; r=list(csv.DictReader(sys.stdin)); print(round(max(float(x["throughput"]) for x in r), 1) if r else "")')
  theirs=$("$python" bench/pytorch_resnet50_gpu.py --precision "$p" |
           python3 -c 'import json,sys; print(round(json.load(sys.stdin)["images_per_second"], 1))')
  ratio=$(python3 -c "print(f'{float(\"$ours\" or 0) / float(\"$theirs\"):.2f}x')")
  printf "%-6s %12s %12s %8s\n" "$p" "$ours" "$theirs" "$ratio"
done

# GPT-2 124M, T 256, batch 8.
"$xrun" run experiments/gpu-gpt2-smoke.toml --db "$db" --force --set train.steps=30 \
  --set measure.warmup_steps=10 --set measure.measure_steps=20
printf "\n%-6s %12s %12s %8s\n" precision "xrun tok/s" "torch tok/s" "xrun is"
for p in fp16 bf16; do
  ours=$("$xrun" runs --db "$db" --where experiment=gpu-gpt2-smoke --where train.precision=$p \
           --where status=complete --format csv |
         python3 -c 'import csv,sys; r=list(csv.DictReader(sys.stdin)); print(round(max(float(x["throughput"]) for x in r), 1) if r else "")')
  theirs=$("$python" bench/pytorch_gpt2.py nanogpt 12 12 768 256 8 1 10 20 "$p" cuda |
           awk '/^tokens_per_s/ {print $2}')
  ratio=$(python3 -c "print(f'{float(\"$ours\" or 0) / float(\"$theirs\"):.2f}x')")
  printf "%-6s %12s %12s %8s\n" "$p" "$ours" "$theirs" "$ratio"
done
