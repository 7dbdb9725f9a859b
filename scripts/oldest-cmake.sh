#!/usr/bin/env bash
# scripts/oldest-cmake.sh: prints the path of CMake 3.22, the oldest CMake
# xrun supports (Ubuntu 22.04's), installing it first from PyPI
# (cmake==3.22.*) into a virtual environment in XRUN_CMAKE_CACHE (default
# ~/.cache/xrun/cmake-3.22). CI configures and builds with it (XRUN_CMAKE,
# read by scripts/sanitize.sh and scripts/cuda12-headers-check.sh), so the
# minimum in CMakeLists.txt is proven, not assumed.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${XRUN_CMAKE_CACHE:-$HOME/.cache/xrun/cmake-3.22}"
if [ ! -x "$venv/bin/cmake" ] || [[ "$("$venv/bin/cmake" --version)" != "cmake version 3.22."* ]]; then
  ./scripts/setup.sh --packages python3-venv >/dev/null
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q 'cmake==3.22.*' >&2
fi
echo "$venv/bin/cmake"
