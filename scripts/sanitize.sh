#!/usr/bin/env bash
# scripts/sanitize.sh: builds everything with AddressSanitizer + UBSan (the
# "asan" preset of CMakePresets.json: clang, CPU only, build-asan/, the fuzz
# targets too) and runs the whole ctest suite under them; any sanitizer
# report (a memory error, undefined behaviour, a leak) fails its test.
# Installs what is missing first (scripts/setup.sh --packages, then clang-14,
# its sanitizer runtimes, libomp and ccache). Idempotent: a second run rebuilds
# only what changed. Extra arguments go to ctest (e.g. -L store, -R merge).
#   scripts/sanitize.sh --build-only [TARGET...]   install, configure and
#   build (only TARGETs when given, e.g. fuzz_all); no tests. scripts/fuzz.sh
#   uses it.
# The regular build (scripts/setup.sh, ./build, gcc) is not touched.
set -euo pipefail
cd "$(dirname "$0")/.."

# What the build needs, plus clang 14, its ASan/UBSan/libFuzzer runtimes and
# LLVM's OpenMP (what clang's -fopenmp links; oneDNN's libgomp calls resolve
# to it).
./scripts/setup.sh --packages clang-14 libclang-rt-14-dev libomp-14-dev ccache

build=build-asan  # the preset's binaryDir
# The preset names clang/clang++; Debian's clang-14 alone installs only the
# versioned names. (Given once: later runs keep the configured compiler.)
compilers=()
if [ ! -f "$build/CMakeCache.txt" ] && ! command -v clang++ >/dev/null; then
  compilers=(-DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14)
fi

# Compiled objects are cached by ccache (in ~/.cache/ccache, keyed on the
# compiler, its flags and the preprocessed source), so a machine that builds
# one submission after another (CI) compiles only what changed, whichever
# folder the clone is in (paths taken relative to it). XRUN_CCACHE=0: none.
launcher=()
if [ "${XRUN_CCACHE:-1}" != 0 ]; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
else
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER= -DCMAKE_CXX_COMPILER_LAUNCHER=)
fi

# XRUN_CMAKE: the cmake to configure and build with (CI: CMake 3.22, the
# oldest supported, from scripts/oldest-cmake.sh); its ctest beside it.
cmake="${XRUN_CMAKE:-cmake}"
ctest="$(dirname "$(command -v "$cmake")")/ctest"
[ -x "$ctest" ] || ctest=ctest
"$cmake" --version | sed -n 1p

t0=$(date +%s)
"$cmake" --preset asan "${compilers[@]}" "${launcher[@]}" >/dev/null
if [ "${1:-}" = "--build-only" ]; then
  shift
  targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  "$cmake" --build --preset asan -j"$(nproc)" "${targets[@]}"
  exit 0
fi
"$cmake" --build --preset asan -j"$(nproc)"
t1=$(date +%s)

# The safetensors interoperability tests need PyPI's safetensors and numpy,
# as in scripts/test.sh.
if ! python3 -c "import safetensors, numpy" 2>/dev/null; then
  if [ ! -x "$build/venv/bin/python" ] || ! "$build/venv/bin/python" -c "import safetensors, numpy" 2>/dev/null; then
    python3 -m venv "$build/venv"
    "$build/venv/bin/pip" install -q safetensors numpy
  fi
  export XRUN_PYTHON="$PWD/$build/venv/bin/python"
fi

# Every report is fatal and fails its test, in the test executables and in
# the xrun processes the cli tests start (exit status 86 is no status xrun
# gives, so a test expecting 1 or 2 sees it); leaks are reported at exit
# (LeakSanitizer, exit status 23). No leak needs suppressing today (oneDNN
# and OpenMP included); should a third-party one appear, list it in
# tests/sanitizers/lsan.supp ("leak:libname", with a comment saying why) and
# it is used from then on.
export ASAN_OPTIONS="halt_on_error=1:exitcode=86:detect_leaks=1:print_stacktrace=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1"
export UBSAN_OPTIONS="halt_on_error=1:exitcode=86:print_stacktrace=1"
if [ -f tests/sanitizers/lsan.supp ]; then
  export LSAN_OPTIONS="suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0"
fi

t2=$(date +%s)
status=0
"$ctest" --test-dir "$build" --output-on-failure -j"$(nproc)" "$@" || status=$?
t3=$(date +%s)
echo "sanitize: configure + build $((t1 - t0)) s, tests $((t3 - t2)) s ($(nproc) cores)"
exit $status
