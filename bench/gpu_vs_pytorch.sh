#!/usr/bin/env bash
# bench/gpu_vs_pytorch.sh: xrun's CUDA engine against PyTorch eager on the
# same GPU in one go: torchvision resnet50, synthetic 224x224, batch 256,
# channels_last / NHWC, cudnn benchmark on, AdamW, fp16 (dynamic loss
# scaling) and bf16. Prints images/s side by side and xrun's ratio (goal:
# 1.25x). Needs a GPU and a python3 with torch + torchvision.
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
