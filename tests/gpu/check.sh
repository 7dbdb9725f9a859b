#!/usr/bin/env bash
# tests/gpu/check.sh: every GPU check in one go, for a machine with an NVIDIA
# GPU (a lent one is short-lived: this runs all of it from one command; each
# stage has a time limit, 30 + 200 + 120 + 90 + 60 + 45 + 90 s: under 11
# minutes at worst):
#   1. setup    the binaries (the bundle in .device/, else ./build) and the
#               CUDA libraries they load
#   2. doctor   xrun doctor --require cuda (driver, CUDA, and which cuDNN,
#               cuBLAS and CUPTI files were loaded, with their versions);
#               without a usable GPU it stops here, exit 1
#   3. tests    tests/cuda: every CUDA op, the optimizers, gradient
#               accumulation and the input path against the CPU engine in
#               fp32/tf32/fp16/bf16, and whole resnet18/resnet50 steps against
#               PyTorch float64 (fp32) or the error budget (the others), the
#               shape matrix (every arch at the size classes, fp32), GPT-2's
#               ops and a whole GPT-2 step, ending with a table of every
#               comparison (error, threshold, verdict)
#   4. smoke    experiments/gpu-smoke.toml cut to 12 steps a run: each
#               precision x cudnn benchmark, then its table and the
#               convolution algorithms each run chose
#   4b. gpt2    experiments/gpu-gpt2-smoke.toml cut to 12 steps a run: GPT-2
#               124M on synthetic tokens in each precision, clipped on the
#               device: tokens/s per precision
#   5. cupti    one of those runs again (fp16, benchmark on) with
#               profile.cupti = "trace", pinned overlapped input and device
#               augmentation and profile.layers: kernels, copies, CUPTI
#               overhead, each layer's kernel time on the roofline, the GPU trace
#   6. nccl     one smoke run (fp16) again with distributed.backend = "nccl":
#               launched as one rank (CUDA_VISIBLE_DEVICES, rendezvous folder),
#               its gradients summed by NCCL before every update (the
#               one-rank NCCL cases of the tests stage check the sums)
#   7. headline ResNet50 at 224x224, batch 256, bf16 and fp16: xrun, then
#               PyTorch eager (channels_last, autocast, the machine's own
#               torch) on the same card, 5 warmup + 15 measured steps each:
#               img/s and xrun's ratio (the fuller comparison is --bench)
# then one line per stage: stage, result, seconds, key figure.
#   tests/gpu/check.sh                     the checks above
#   tests/gpu/check.sh STAGE [FILTER...]   setup, doctor and one stage only
#                                          (tests | smoke | gpt2 | cupti |
#                                          nccl | headline),
#                                          to rerun what failed; for tests,
#                                          FILTER is Catch2's test spec
#                                          ("cuda pooling*" "[parity]"), run
#                                          with -c SECTION too
#   tests/gpu/check.sh --bench             instead: bench/gpu_vs_pytorch.sh,
#                                          xrun against PyTorch on this GPU
#                                          (several minutes)
# Binaries: the bundle scripts/device_bundle.sh made in .device/ on another
# machine (carry it; its libstdc++ is used only where this machine's is too
# old), else ./build (XRUN_BUILD_DIR), built here when missing (XRUN_CUDA=ON,
# this card's architecture).
# CUDA libraries: the toolkit's (/usr/local/cuda, CUPTI from its
# extras/CUPTI/lib64 too) or, where cuDNN and cuBLAS come from Python wheels
# (PyTorch's), their site-packages folders (the `nvidia/*/lib` folders
# beside torch); set XRUN_CUDA_LIBS to a ':'-list to choose them yourself.
# They are put on the library path of xrun and test_cuda only, not of
# python3.
# Output: the stage lines and the table on stdout; everything (doctor, every
# comparison, the runs, the CUPTI summary) in $OUT/gpu-check.log
# ($OUT/gpu-bench.log with --bench), with the stores gpu.db and cupti.db and
# the trace gpu-trace.json beside it; OUT defaults to a new temporary folder.
# Exit status 0 when every stage passed, 1 otherwise, 2 on a usage error.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1

mode=check
only=""         # one stage (tests | smoke | gpt2 | cupti | nccl | headline), "" for all
test_filter=()  # Catch2 test spec for the tests stage
case "${1:-}" in
  "") ;;
  --bench) mode=bench ;;
  tests | smoke | gpt2 | cupti | nccl | headline)
    only=$1
    shift
    test_filter=("$@")
    ;;
  -h | --help)
    sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "usage: tests/gpu/check.sh [--bench | tests|smoke|gpt2|cupti|nccl|headline [FILTER...]]" >&2
    exit 2
    ;;
esac
if [ ${#test_filter[@]} -gt 0 ] && [ "$only" != tests ]; then
  echo "check.sh: a filter is for the tests stage only" >&2
  exit 2
fi
# wanted STAGE: whether this call runs STAGE.
wanted() { [ -z "$only" ] || [ "$only" = "$1" ]; }

out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
log="$out/gpu-$mode.log"
: >"$log"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

rows=()
failed=0
# record STAGE RESULT SECONDS KEY: one line of the final table.
record() {
  rows+=("$(printf '%-7s %-9s %7s  %s' "$1" "$2" "$3" "$4")")
  case "$2" in ok) ;; *) failed=1 ;; esac
}
print_table() {
  printf '\n%-7s %-9s %7s  %s\n' stage result seconds "key figure"
  printf '%s\n' "${rows[@]}"
  echo "full output: $log"
}
# run_stage NAME LIMIT_S COMMAND...: the command with its output in the log,
# under a time limit; sets stage_rc and stage_s.
run_stage() {
  local name=$1 limit=$2
  shift 2
  echo "== $name (limit ${limit}s)"
  printf '\n==== %s: %s\n' "$name" "$*" >>"$log"
  local start=$SECONDS
  timeout -k 10 "$limit" "$@" >>"$log" 2>&1
  stage_rc=$?
  stage_s=$((SECONDS - start))
  echo "---- $name: exit $stage_rc after ${stage_s}s" >>"$log"
}
result_of() {  # exit status -> result word
  case "$1" in
    0) echo ok ;;
    124 | 137) echo TIMEOUT ;;
    77) echo skipped ;;
    *) echo "FAIL($1)" ;;
  esac
}
have_python() { command -v python3 >/dev/null; }

# ---- 1. setup: binaries and libraries ---------------------------------------
start=$SECONDS
libs=""
if [ -d .device/bin ]; then
  bin_xrun=.device/bin/xrun
  bin_test=.device/bin/test_cuda
  source_of="bundle .device"
  libs="$PWD/.device/lib"
  # oneDNN travels xz-compressed: unpacked for this run only, so .device
  # stays the size it was carried at.
  if [ -f .device/lib/libdnnl.so.2.xz ] && [ ! -f .device/lib/libdnnl.so.2 ]; then
    mkdir -p "$tmp/lib"
    xz -dc .device/lib/libdnnl.so.2.xz >"$tmp/lib/libdnnl.so.2" 2>>"$log" ||
      python3 -c 'import lzma, shutil, sys
shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        .device/lib/libdnnl.so.2.xz "$tmp/lib/libdnnl.so.2"
    libs="$tmp/lib:$libs"
  fi
else
  build="${XRUN_BUILD_DIR:-build}"
  bin_xrun="$build/runner/xrun"
  bin_test="$build/tests/test_cuda"
  source_of="build $build"
  if [ ! -x "$bin_xrun" ] || [ ! -x "$bin_test" ]; then
    echo "== setup: building xrun and test_cuda in $build"
    { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXRUN_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=native &&
        cmake --build "$build" --target xrun test_cuda -j"$(nproc)"; } >>"$log" 2>&1
    source_of="built in $build"
  fi
fi
cuda_libs="${XRUN_CUDA_LIBS:-}"
if [ -z "$cuda_libs" ]; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/extras/CUPTI/lib64; do
    [ -d "$d" ] && cuda_libs="$cuda_libs:$d"
  done
  if have_python; then
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
fi
# The library path, without empty entries (an empty one means ".").
lib_path=$(printf '%s' "$libs:$cuda_libs:${LD_LIBRARY_PATH:-}" | tr -s ':' | sed 's/^://; s/:$//')
# The bundle's libstdc++ (Debian 12's) only where this machine's lacks what
# the binaries need: a newer system one serves the CUDA libraries better.
if [ -d .device/lib/compat ] && [ -x "$bin_xrun" ] &&
  ! LD_LIBRARY_PATH="$lib_path" "$bin_xrun" --version >/dev/null 2>>"$log"; then
  lib_path="$PWD/.device/lib/compat:$lib_path"
fi
# Wrappers: xrun and test_cuda see the libraries, python3 (torch) does not.
for b in xrun test_cuda; do
  src=$bin_xrun
  [ "$b" = test_cuda ] && src=$bin_test
  printf '#!/usr/bin/env bash\nexport LD_LIBRARY_PATH=%q\nexec %q "$@"\n' "$lib_path" "$(realpath -m "$src")" >"$tmp/$b"
  chmod +x "$tmp/$b"
done
xrun="$tmp/xrun"
test_cuda="$tmp/test_cuda"
{
  echo "==== setup: $source_of"
  echo "LD_LIBRARY_PATH for xrun and test_cuda: $lib_path"
  for b in "$bin_xrun" "$bin_test"; do
    echo "-- ldd $b"
    LD_LIBRARY_PATH="$lib_path" ldd "$b" 2>&1
  done
} >>"$log"
missing=$(for b in "$bin_xrun" "$bin_test"; do
  [ -x "$b" ] || { echo "$b"; continue; }
  LD_LIBRARY_PATH="$lib_path" ldd "$b" 2>/dev/null | awk '/not found/ {print $1}'
done | sort -u | tr '\n' ' ')
cudnn_dir=$(LD_LIBRARY_PATH="$lib_path" ldd "$bin_xrun" 2>/dev/null | awk '/libcudnn.so/ {print $3}')
if [ -n "$missing" ]; then
  record setup FAIL $((SECONDS - start)) "missing: $missing(XRUN_CUDA_LIBS chooses CUDA's)"
  print_table
  exit 1
fi
# Both binaries must start (a library found but unusable: truncated, too old).
for check in "xrun --version" "test_cuda --help"; do
  name=${check%% *}
  if ! "$tmp/$name" "${check#* }" >/dev/null 2>"$tmp/start.err"; then
    cat "$tmp/start.err" >>"$log"
    record setup FAIL $((SECONDS - start)) "$name does not start: $(head -c 200 "$tmp/start.err")"
    print_table
    exit 1
  fi
done
record setup ok $((SECONDS - start)) "$source_of; cuDNN ${cudnn_dir:-?}"

# ---- 2. doctor --------------------------------------------------------------
run_stage doctor 30 "$xrun" doctor --require cuda
doctor_rc=$stage_rc
"$xrun" doctor --json >"$tmp/doctor.json" 2>>"$log"
key="-"
if have_python; then
  key=$(python3 - "$tmp/doctor.json" <<'PY' 2>>"$log"
import json, sys
d = json.load(open(sys.argv[1]))
c = d["cuda"]
if not d.get("gpus"):
    print(c.get("status") or "no GPU")
else:
    g = d["gpus"][0]
    def lib(key, name):  # "cuDNN 9.19.0 (/path/libcudnn.so.9.19.0)"
        l = c[key]
        return f'{name} {l["loaded_version"] or "not loaded"} ({l.get("library") or "?"})'
    print(f'{g["name"]} (cc {g["compute_capability"]}, {g["memory_bytes"] / 2**30:.0f} GiB), '
          f'driver {c["driver_release"] or c["driver_cuda"]}, CUDA {c["runtime"]}, '
          f'{lib("cudnn", "cuDNN")}, {lib("cublas", "cuBLAS")}, {lib("cupti_api", "CUPTI")}')
PY
)
fi
record doctor "$(result_of "$doctor_rc")" "$stage_s" "${key:--}"
if [ "$doctor_rc" -ne 0 ]; then
  echo "no usable GPU: stopping (xrun doctor --require cuda exited $doctor_rc)"
  print_table
  exit 1
fi

# ---- --bench: xrun against PyTorch, on its own -------------------------------
if [ "$mode" = bench ]; then
  if ! python3 -c "import torch, torchvision" 2>>"$log"; then
    record bench FAIL 0 "python3 has no torch + torchvision"
  else
    run_stage bench 540 bench/gpu_vs_pytorch.sh "$xrun" "$out/gpu-bench.db"
    key=$(grep -E '^(fp16|bf16) ' "$log" | awk '{printf "%s%s %s img/s vs torch %s: %s", sep, $1, $2, $3, $4; sep="; "}')
    record bench "$(result_of "$stage_rc")" "$stage_s" "${key:--}"
  fi
  print_table
  exit "$failed"
fi

# ---- 3. tests ---------------------------------------------------------------
export OMP_WAIT_POLICY=PASSIVE
if wanted tests; then
run_stage tests 200 env XRUN_TEST_ERRORS=1 XRUN_TEST_SOURCE_DIR="$PWD" "$test_cuda" --durations yes \
  "${test_filter[@]}"
tests_rc=$stage_rc
comparisons=$(grep -E '^cuda comparisons:' "$log" | tail -1 | sed 's/^cuda comparisons: //')
cases=$(grep -E '^(All tests passed|test cases:)' "$log" | tail -1)
skipped=$(grep -E '^skipped: ' "$log" | tail -1)
record tests "$(result_of "$tests_rc")" "$stage_s" \
  "${skipped:-${comparisons:+$comparisons comparisons; }${cases:-no Catch summary}}"
if [ "$tests_rc" -ne 0 ]; then
  grep -E ' FAIL$' "$log" | head -30
  grep -E '^(test cases|assertions):' "$log" | tail -2
fi
fi

# ---- 4. smoke ---------------------------------------------------------------
steps=(--set train.steps=12 --set measure.warmup_steps=2 --set measure.measure_steps=10)
rm -f "$out"/gpu.db "$out"/gpu.db-* "$out"/cupti.db "$out"/cupti.db-*
if wanted smoke; then
run_stage smoke 120 "$xrun" run experiments/gpu-smoke.toml --db "$out/gpu.db" --force "${steps[@]}"
smoke_rc=$stage_rc
"$xrun" runs --db "$out/gpu.db" --format table >>"$log" 2>&1
# The convolution algorithms each run chose, layer by layer.
if have_python && [ -f "$out/gpu.db" ]; then
  python3 - "$out/gpu.db" >>"$log" 2>&1 <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
for run, label in c.execute("SELECT id, uuid FROM runs ORDER BY id"):
    rows = c.execute("SELECT layer, pass, algo_name, math_type, workspace_bytes "
                     "FROM conv_algorithms WHERE run = ? ORDER BY rowid", (run,)).fetchall()
    print(f"-- run {run}: {len(rows)} convolution algorithm choices")
    for layer, pas, algo, math, ws in rows:
        print(f"   {layer:28} {pas:16} {algo:40} math {math} workspace {ws}")
PY
fi
"$xrun" runs --db "$out/gpu.db" --format csv >"$tmp/smoke.csv" 2>>"$log"
key="-"
if have_python && [ -s "$tmp/smoke.csv" ]; then
  key=$(python3 - "$tmp/smoke.csv" <<'PY' 2>>"$log"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
done = [r for r in rows if r["status"] == "complete"]
best = {}
for r in done:
    if r["throughput"]:
        best[r["precision"]] = max(best.get(r["precision"], 0.0), float(r["throughput"]))
figures = ", ".join(f"{p} {best[p]:.0f}" for p in ("fp32", "tf32", "fp16", "bf16") if p in best)
print(f"{len(done)}/{len(rows)} runs complete; best img/s {figures or '-'}")
PY
)
fi
record smoke "$(result_of "$smoke_rc")" "$stage_s" "${key:--}"
fi

# ---- 4b. gpt2 ----------------------------------------------------------------
# GPT-2 124M on synthetic tokens in every precision (experiments/
# gpu-gpt2-smoke.toml, 12 steps each), clipped on the device: tokens/s per
# precision (a loss that is not finite stops its run with an error).
if wanted gpt2; then
rm -f "$out"/gpt2.db "$out"/gpt2.db-*
run_stage gpt2 90 "$xrun" run experiments/gpu-gpt2-smoke.toml --db "$out/gpt2.db" --force \
  "${steps[@]}"
gpt2_rc=$stage_rc
"$xrun" runs --db "$out/gpt2.db" --format table >>"$log" 2>&1
"$xrun" runs --db "$out/gpt2.db" --format csv >"$tmp/gpt2.csv" 2>>"$log"
key="-"
if have_python && [ -s "$tmp/gpt2.csv" ]; then
  key=$(python3 - "$tmp/gpt2.csv" <<'PY' 2>>"$log"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
done = [r for r in rows if r["status"] == "complete"]
figures = ", ".join(f"{r['precision']} {float(r['throughput']):.0f}" for r in done if r["throughput"])
print(f"{len(done)}/{len(rows)} runs complete; tok/s {figures or '-'}")
PY
)
fi
record gpt2 "$(result_of "$gpt2_rc")" "$stage_s" "${key:--}"
fi

# ---- 5. cupti ---------------------------------------------------------------
if wanted cupti; then
run_stage cupti 60 "$xrun" run experiments/gpu-smoke.toml --db "$out/cupti.db" --force --only 5 \
  "${steps[@]}" --set profile.cupti='"trace"' --set profile.trace_steps=3 \
  --set data.pin_memory=true --set data.augment='["random_crop", "hflip"]' \
  --set profile.layers=true
cupti_rc=$stage_rc
{
  "$xrun" show 1 --db "$out/cupti.db" | sed -n '/^phases/,/^environment/p' | head -80
  "$xrun" trace 1 --db "$out/cupti.db" -o "$out/gpu-trace.json"
} >>"$log" 2>&1
"$xrun" show 1 --db "$out/cupti.db" --json >"$tmp/cupti.json" 2>>"$log"
kernel_rows=$("$xrun" export --db "$out/cupti.db" --table kernels --format csv 2>>"$log" | tail -n +2 | wc -l)
key="-"
if have_python && [ -s "$tmp/cupti.json" ]; then
  key=$(python3 - "$tmp/cupti.json" "$out/gpu-trace.json" "$kernel_rows" <<'PY' 2>>"$log"
import json, os, sys
d = json.load(open(sys.argv[1]))
overhead = d.get("cupti_overhead")
trace = os.path.getsize(sys.argv[2]) / 2**20 if os.path.exists(sys.argv[2]) else None
points = d.get("roofline", {}).get("points", [])
print(f'{d.get("status")}; {d.get("cupti_steps")} traced steps, '
      f'overhead {"-" if overhead is None else f"{100 * overhead:.1f}%"}, {sys.argv[3]} kernel rows, '
      f'{len(points)} layer passes on the roofline, '
      f'trace {"none" if trace is None else f"{trace:.1f} MiB"}')
PY
)
fi
record cupti "$(result_of "$cupti_rc")" "$stage_s" "${key:--}"
fi

# ---- 6. nccl ----------------------------------------------------------------
# The NCCL path of data-parallel training on the one GPU this machine has:
# xrun's launcher starts one rank, which joins through NCCL and has NCCL sum
# its gradients (fp16: the half mirror folded into the fp32 region first)
# before each update. Several GPU ranks stay unverified until a machine with
# several GPUs runs them.
if wanted nccl; then
  rm -f "$out"/nccl.db "$out"/nccl.db-*
  run_stage nccl 45 "$xrun" run experiments/gpu-smoke.toml --db "$out/nccl.db" --force --only 5 \
    "${steps[@]}" --set distributed.backend='"nccl"'
  nccl_rc=$stage_rc
  joined=$(grep -c 'joined through nccl' "$log")
  "$xrun" runs --db "$out/nccl.db" --format csv >"$tmp/nccl.csv" 2>>"$log"
  key="-"
  if have_python && [ -s "$tmp/nccl.csv" ]; then
    key=$(python3 - "$tmp/nccl.csv" "$joined" <<'PY' 2>>"$log"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
r = rows[0] if rows else {}
print(f'{r.get("status", "no run")}, {r.get("throughput") or "-"} img/s; '
      f'"joined through nccl" {"seen" if sys.argv[2] != "0" else "NOT seen"}')
PY
)
  fi
  [ "$joined" = 0 ] && nccl_rc=1
  record nccl "$(result_of "$nccl_rc")" "$stage_s" "${key:--}"
fi

# ---- 7. headline ------------------------------------------------------------
# The figure a user asks first, in the first call on a lent machine: ResNet50
# at 224x224, batch 256, bf16 and fp16, xrun then PyTorch eager on this card.
if wanted headline; then
  rm -f "$out"/headline.db "$out"/headline.db-*
  # A script, not a function: run_stage runs it under timeout.
  {
    echo 'set -e'
    printf '%q run experiments/gpu-bench.toml --db %q --force' "$xrun" "$out/headline.db"
    echo ' --set measure.warmup_steps=5 --set measure.measure_steps=15'
    echo 'python3 -c "import torch, torchvision" || { echo "no torch: xrun only"; exit 0; }'
    echo 'for p in bf16 fp16; do'
    printf '  python3 bench/pytorch_resnet50_gpu.py --precision "$p" --warmup 5 --steps 15 >%q/torch-$p.json\n' "$tmp"
    printf '  cat %q/torch-$p.json\n' "$tmp"
    echo 'done'
  } >"$tmp/headline.sh"
  run_stage headline 90 bash "$tmp/headline.sh"
  headline_rc=$stage_rc
  "$xrun" runs --db "$out/headline.db" --format csv >"$tmp/headline.csv" 2>>"$log"
  key="-"
  if have_python && [ -s "$tmp/headline.csv" ]; then
    key=$(python3 - "$tmp/headline.csv" "$tmp" <<'PY' 2>>"$log"
import csv, json, os, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["status"] == "complete"]
parts = []
for p in ("bf16", "fp16"):
    ours = [float(r["throughput"]) for r in rows if r["precision"] == p and r["throughput"]]
    path = os.path.join(sys.argv[2], f"torch-{p}.json")
    theirs = json.load(open(path))["images_per_second"] if os.path.exists(path) else None
    if not ours:
        parts.append(f"{p} xrun -")
    elif theirs:
        parts.append(f"{p} xrun {ours[0]:.0f} vs torch {theirs:.0f} img/s: {ours[0] / theirs:.2f}x")
    else:
        parts.append(f"{p} xrun {ours[0]:.0f} img/s")
print("; ".join(parts))
PY
)
  fi
  echo "headline: ${key:--}" >>"$log"
  record headline "$(result_of "$headline_rc")" "$stage_s" "${key:--}"
fi

# Each store as one file (SQLite's -wal and -shm folded in): fewer files to
# carry back from a lent machine.
if have_python; then
  for db in "$out/gpu.db" "$out/cupti.db" "$out/nccl.db" "$out/headline.db"; do
    [ -f "$db" ] && python3 - "$db" <<'PY' 2>>"$log"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
c.execute("PRAGMA journal_mode=DELETE")
c.close()
PY
  done
fi
print_table
exit "$failed"
