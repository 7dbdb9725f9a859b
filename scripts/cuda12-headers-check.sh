#!/usr/bin/env bash
# scripts/cuda12-headers-check.sh: compiles (syntax only, g++) every C++
# file of the build that includes a CUDA, cuDNN, cuBLAS, CUPTI or NVTX
# header against the oldest stack xrun supports: CUDA 12.2 and cuDNN 8.9.7,
# the headers of PyPI's cu12 wheels (nvidia-cuda-runtime-cu12 12.2.140,
# nvidia-cublas-cu12 12.2.5.6, nvidia-cuda-cupti-cu12 12.2.142,
# nvidia-nvtx-cu12 12.2.140, nvidia-cudnn-cu12 8.9.7.29), in place of the
# installed toolkit's. The .cu files need nvcc 12 and are not covered here.
# Needs the CUDA toolkit this machine builds with (to configure a CUDA
# build: the files and their flags) and pip; the wheels are kept in
# XRUN_CUDA12_CACHE (default ~/.cache/xrun/cuda12). Exit 0 when every file
# compiles, 1 with the errors otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

cache="${XRUN_CUDA12_CACHE:-$HOME/.cache/xrun/cuda12}"
build="${XRUN_CUDA12_BUILD:-build-cuda12-check}"
wheels=(nvidia-cuda-runtime-cu12==12.2.140 nvidia-cublas-cu12==12.2.5.6
        nvidia-cuda-cupti-cu12==12.2.142 nvidia-nvtx-cu12==12.2.140
        nvidia-cudnn-cu12==8.9.7.29)

./scripts/setup.sh --packages python3-pip >/dev/null
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
if ! command -v nvcc >/dev/null; then
  echo "cuda12-headers-check: skipped: no CUDA toolkit here to configure a CUDA build with"
  exit 0
fi

mkdir -p "$cache/wheels" "$cache/include"
if [ ! -f "$cache/include/.complete" ]; then
  echo "cuda12-headers-check: fetching ${wheels[*]}"
  python3 -m pip download -q --no-deps -d "$cache/wheels" "${wheels[@]}"
  python3 - "$cache" <<'EOF'
import glob, os, sys, zipfile
cache = sys.argv[1]
for wheel in glob.glob(os.path.join(cache, "wheels", "*.whl")):
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if "/include/" in name:
                z.extract(name, os.path.join(cache, "include"))
open(os.path.join(cache, "include", ".complete"), "w").close()
EOF
fi

# XRUN_CMAKE: CI's CMake 3.22 (scripts/oldest-cmake.sh) configures it, so
# the CUDA configuration is proven with the oldest CMake too.
"${XRUN_CMAKE:-cmake}" -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXRUN_CUDA=ON >/dev/null

python3 - "$build" "$cache/include/nvidia" <<'EOF'
import json, os, re, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
build, headers = sys.argv[1], sys.argv[2]
extra = " ".join("-I" + os.path.join(headers, d, "include")
                 for d in ("cudnn", "cublas", "cuda_cupti", "cuda_runtime", "nvtx"))
commands = json.load(open(os.path.join(build, "compile_commands.json")))
jobs = []
for c in commands:
    if not c["file"].endswith(".cpp") or "/usr/local/cuda" not in c["command"]:
        continue
    cmd = re.sub(r"-I/usr/local/cuda[^ ]*/include", "", c["command"])
    cmd = re.sub(r" -o \S+", " ", cmd)
    jobs.append((c["file"], c["directory"], cmd.replace(" -c ", " -fsyntax-only " + extra + " -c ", 1)))

def run(job):
    name, where, cmd = job
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True, cwd=where)
    return name, r.returncode, r.stderr

failed = 0
with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
    for name, code, err in pool.map(run, jobs):
        if code != 0:
            failed += 1
            print(f"cuda12-headers-check: {name}:\n{err}", file=sys.stderr)
print(f"cuda12-headers-check: {len(jobs) - failed} passed, {failed} failed "
      f"(C++ files against CUDA 12.2 + cuDNN 8.9.7 headers)")
sys.exit(1 if failed else 0)
EOF
