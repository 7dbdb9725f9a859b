#!/usr/bin/env bash
# scripts/quickstart.sh: sets everything up and runs the main job,
# experiments/quickstart.toml (ResNet50 on Fashion-MNIST; on the GPU when the
# CUDA engine can use one, else on the CPU), storing results in ./xrun.db.
# Idempotent: a run already complete in xrun.db is skipped, not repeated.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
build="${XRUN_BUILD_DIR:-build}"
"$build/runner/xrun" run experiments/quickstart.toml "$@"
"$build/runner/xrun" runs --where experiment=quickstart
