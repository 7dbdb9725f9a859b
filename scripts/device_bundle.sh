#!/usr/bin/env bash
# scripts/device_bundle.sh: packs what a GPU machine without this machine's
# packages needs to run xrun's GPU checks into .device/ (git-ignored): the
# built xrun and test_cuda binaries, and the shared libraries they use that
# are not part of CUDA, cuDNN or the C runtime (oneDNN, TOML++, SQLite,
# OpenMP, zlib; oneDNN xz-compressed to stay under the 64 MiB a lent machine
# takes). CUDA's own libraries come from the GPU machine (its toolkit or
# PyTorch's wheels: tests/gpu/check.sh finds them). Builds first if needed,
# for every architecture in CMAKE_CUDA_ARCHITECTURES (80 86 89 90).
#   scripts/device_bundle.sh   then carry .device and run tests/gpu/check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build="${XRUN_BUILD_DIR:-build}"
XRUN_CUDA=ON ./scripts/setup.sh >/dev/null
rm -rf .device && mkdir -p .device/bin .device/lib
cp "$build/runner/xrun" "$build/tests/test_cuda" .device/bin/
for bin in .device/bin/*; do
  ldd "$bin" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libutil.so*|libgcc_s.so*|libstdc++.so*|ld-linux*) ;;
      libcuda*|libcudart*|libcublas*|libcudnn*|libcupti*|libnvrtc*) ;;
      *) cp -L -n "$lib" .device/lib/ ;;
    esac
  done
done
# libstdc++ too: the GPU machine's may be older than the one this was built with.
cp -L "$(ldd "$build/runner/xrun" | awk '/libstdc\+\+/ {print $3}')" .device/lib/
xz -T0 -6 .device/lib/libdnnl.so.2
du -sh .device
