#!/usr/bin/env bash
# tests/gpu/check.sh: every GPU check and the GPU benchmark in one go, for a
# machine with an NVIDIA GPU (a lent one is short-lived: this runs all of it
# from one command):
#   1. xrun doctor (driver, CUDA, cuDNN, cuBLAS, GPU)
#   2. tests/cuda: every CUDA op and whole training steps against the CPU
#      engine in fp32/tf32/fp16/bf16, printing each comparison's error
#   3. experiments/gpu-smoke.toml: 20 steps of each precision x cudnn
#      benchmark, then its table; one run again with profile.cupti = "trace":
#      its kernels, copies, CUPTI overhead and GPU trace
#   4. bench/gpu_vs_pytorch.sh, when python3 has torch (skip: NO_BENCH=1)
# Binaries: ./build (built here when the machine can, XRUN_CUDA=ON), or the
# bundle scripts/device_bundle.sh made in .device/ on another machine.
# CUDA libraries: the toolkit's (/usr/local/cuda) or, where cuDNN and cuBLAS
# come from Python wheels (PyTorch's), their site-packages folders: this
# script puts them on LD_LIBRARY_PATH (the `nvidia/*/lib` folders beside
# torch); set XRUN_CUDA_LIBS to a ':'-list to choose them yourself.
# Output: printed; with $OUT set, also the log and result store there.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"
log="$out/gpu-check.log"
exec > >(tee "$log") 2>&1

if [ -d .device/bin ]; then
  bin=.device/bin
  [ -f .device/lib/libdnnl.so.2.xz ] && xz -dkf .device/lib/libdnnl.so.2.xz
  libs="$PWD/.device/lib"
else
  bin="${XRUN_BUILD_DIR:-build}"
  if [ ! -x "$bin/runner/xrun" ]; then
    cmake -S . -B "$bin" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXRUN_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=native >/dev/null && cmake --build "$bin" -j"$(nproc)" || exit 1
  fi
  bin_xrun="$bin/runner/xrun"; bin_test="$bin/tests/test_cuda"
  libs=""
fi
xrun="${bin_xrun:-$bin/xrun}"
test_cuda="${bin_test:-$bin/test_cuda}"

cuda_libs="${XRUN_CUDA_LIBS:-}"
if [ -z "$cuda_libs" ]; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [ -d "$d" ] && cuda_libs="$cuda_libs:$d"; done
  wheels=$(python3 - 2>/dev/null <<'PY'
import glob, os, site
dirs = []
for sp in site.getsitepackages():
    dirs += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib")))
print(":".join(dirs))
PY
)
  cuda_libs="$cuda_libs:$wheels"
fi
export LD_LIBRARY_PATH="${libs:+$libs:}${cuda_libs#:}:${LD_LIBRARY_PATH:-}"

echo "== nvidia-smi"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -5
echo "== xrun doctor"; "$xrun" doctor || exit 1
"$xrun" doctor --require cuda >/dev/null || { echo "no usable GPU: stopping"; exit 1; }

echo "== CUDA vs CPU tests"
XRUN_TEST_ERRORS=1 OMP_WAIT_POLICY=PASSIVE "$test_cuda" --durations yes
tests_rc=$?

echo "== gpu-smoke"
"$xrun" run experiments/gpu-smoke.toml --db "$out/gpu.db" --force
smoke_rc=$?
"$xrun" runs --db "$out/gpu.db" --format table

echo "== CUPTI, pinned overlapped input, device augmentation: kernels, copies, overhead, GPU trace (fp16, benchmark on)"
"$xrun" run experiments/gpu-smoke.toml --db "$out/cupti.db" --force --only 5 \
  --set profile.cupti='"trace"' --set profile.trace_steps=3 \
  --set data.pin_memory=true --set data.augment='["random_crop", "hflip"]' 
cupti_rc=$?
"$xrun" show 1 --db "$out/cupti.db" | sed -n '/^phases/,/^environment/p' | head -60
"$xrun" trace 1 --db "$out/cupti.db" -o "$out/gpu-trace.json"

if [ -z "${NO_BENCH:-}" ] && python3 -c "import torch, torchvision" 2>/dev/null; then
  echo "== xrun vs PyTorch"
  bench/gpu_vs_pytorch.sh "$xrun" "$out/gpu.db"
fi
echo "== summary: CUDA tests rc=$tests_rc, gpu-smoke rc=$smoke_rc, cupti rc=$cupti_rc; log $log, store $out/gpu.db"
exit $(( tests_rc != 0 || smoke_rc != 0 || cupti_rc != 0 ))
