#!/usr/bin/env bash
# scripts/setup.sh: installs what xrun needs on Debian 12 or 13 (only what is
# missing), then configures and builds it in ./build. Idempotent; run as root
# or with sudo available. Used by scripts/quickstart.sh, scripts/test.sh and CI.
#   XRUN_BUILD_DIR   build directory (default: build)
#   XRUN_CUDA        AUTO (default) | ON | OFF: build the CUDA parts
# `setup.sh --packages [MORE...]` installs what is missing (and the Debian
# packages MORE) and stops there (used by scripts/sanitize.sh and
# scripts/fuzz.sh, which build in build-asan).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build git pkg-config
          libtomlplusplus-dev libsqlite3-dev sqlite3 catch2 libcli11-dev
          libdnnl-dev libgloo-dev ocl-icd-opencl-dev nlohmann-json3-dev zlib1g-dev dataset-fashion-mnist
          fortunes-min
          python3 python3-venv chromium slurm-wlm munge)
only_packages=0
if [ "${1:-}" = "--packages" ]; then
  only_packages=1
  packages+=("${@:2}")
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  log=$(mktemp /tmp/xrun-apt.XXXXXX.log)
  if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
         $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "setup: apt-get failed (log above, kept in $log)" >&2
    exit 1
  fi
  rm -f "$log"
fi

((only_packages)) && exit 0

# nvcc where the CUDA toolkit is installed but not on PATH.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

build="${XRUN_BUILD_DIR:-build}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXRUN_CUDA="${XRUN_CUDA:-AUTO}" >/dev/null
cmake --build "$build" -j"$(nproc)"
