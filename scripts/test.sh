#!/usr/bin/env bash
# scripts/test.sh: sets everything up and runs the whole test suite (ctest).
# Idempotent. The safetensors interoperability tests need PyPI's safetensors
# and numpy: taken from python3 when it has them, else installed into a
# virtual environment in the build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
build="${XRUN_BUILD_DIR:-build}"
if ! python3 -c "import safetensors, numpy" 2>/dev/null; then
  if [ ! -x "$build/venv/bin/python" ] || ! "$build/venv/bin/python" -c "import safetensors, numpy" 2>/dev/null; then
    python3 -m venv "$build/venv"
    "$build/venv/bin/pip" install -q safetensors numpy
  fi
  export XRUN_PYTHON="$PWD/$build/venv/bin/python"
fi
ctest --test-dir "$build" --output-on-failure -j"$(nproc)"
