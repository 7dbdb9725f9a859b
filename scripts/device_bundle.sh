#!/usr/bin/env bash
# scripts/device_bundle.sh: packs what a GPU machine without this machine's
# packages (no oneDNN, TOML++, SQLite or Catch2; no network) needs to run
# tests/gpu/check.sh into .device/ (git-ignored): the xrun and test_cuda
# binaries, built for one CUDA architecture, and every shared library they
# load that is neither CUDA's (cudart, cuBLAS, cuDNN, CUPTI, the driver: the
# GPU machine's toolkit or PyTorch's nvidia-* wheels provide those, and
# check.sh finds them) nor the C runtime: oneDNN (xz-compressed), TOML++,
# SQLite, OpenMP, the OpenCL loader, zlib; and libstdc++ in .device/lib/compat,
# which check.sh uses only where the GPU machine's is older. It builds in its
# own directory (build-device), only those two targets, so ./build is left
# as it is. The bundle must stay under XRUN_BUNDLE_MAX_MIB (default 60): a
# lent machine takes 64 MiB with the working tree.
#   XRUN_CUDA_ARCH=90 scripts/device_bundle.sh   architecture of the GPU (default
#                                                90: H100/H200; 80 A100, 86 RTX 30xx,
#                                                89 RTX 40xx; "80;90" for both)
#   then carry .device and run tests/gpu/check.sh there
#   XRUN_BUILD_DIR  the build directory (default build-device)
set -euo pipefail
cd "$(dirname "$0")/.."
arch="${XRUN_CUDA_ARCH:-90}"
build="${XRUN_BUILD_DIR:-build-device}"
max_mib="${XRUN_BUNDLE_MAX_MIB:-60}"

./scripts/setup.sh --packages >/dev/null
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXRUN_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" >/dev/null
cmake --build "$build" --target xrun test_cuda -j"$(nproc)"

rm -rf .device && mkdir -p .device/bin .device/lib/compat
cp "$build/runner/xrun" "$build/tests/test_cuda" .device/bin/
strip --strip-unneeded .device/bin/*
for bin in .device/bin/*; do
  if ldd "$bin" | grep -q 'not found'; then
    ldd "$bin" | grep 'not found' >&2
    echo "device_bundle: $bin needs libraries this machine lacks" >&2
    exit 1
  fi
  ldd "$bin" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | libutil.so* | ld-linux*) ;;
      libgcc_s.so*) ;;
      libcuda.so* | libcudart* | libcublas* | libcudnn* | libcupti* | libnvrtc* | libnvJitLink*) ;;
      libnvidia-* | libnvToolsExt*) ;;
      libstdc++.so*) cp -L -n "$lib" .device/lib/compat/ ;;
      *) cp -L -n "$lib" .device/lib/ ;;
    esac
  done
done
xz -T0 -6 .device/lib/libdnnl.so.2
{
  echo "built $(date -u +%Y-%m-%dT%H:%MZ) on $(grep -m1 "^PRETTY_NAME=" /etc/os-release | cut -d= -f2- | tr -d '"')"
  echo "commit $(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "CUDA architectures $arch"
  "$build/runner/xrun" --version
} >.device/BUILD-INFO
ls -l .device/bin .device/lib .device/lib/compat
kib=$(du -sk .device | awk '{print $1}')
echo "bundle: $((kib / 1024)) MiB in .device (limit $max_mib MiB)"
if [ "$kib" -gt $((max_mib * 1024)) ]; then
  echo "device_bundle: .device is over $max_mib MiB" >&2
  exit 1
fi
