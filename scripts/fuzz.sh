#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]: fuzzes xrun's readers
# with libFuzzer (tests/fuzz/README.md): builds the fuzz targets in
# build-asan (scripts/sanitize.sh --build-only: the asan preset, reusing its
# build), then runs each target (all six by default: experiment where
# safetensors idx cifar10 store) for SECONDS_PER_TARGET seconds (default 60),
# two at a time, each on a scratch copy of its seed corpus
# (tests/fuzz/corpus/<target>, never written). Prints one line per target:
# executions, corpus size (seeds -> after, new inputs), result. Exits 1 when
# any target crashed, leaked, timed out or ran out of memory, naming the
# input that did it (kept under build-asan/fuzz-out/<run>/<target>/); such an
# input becomes a regression test once copied to
# tests/fuzz/regressions/<target>/ with a descriptive name.
#   XRUN_FUZZ_JOBS   targets run at once (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-60}"
shift || true
all=(experiment where safetensors idx cifar10 store tokens)
targets=("$@")
((${#targets[@]})) || targets=("${all[@]}")
parallel="${XRUN_FUZZ_JOBS:-2}"

# Largest input each target is given (libFuzzer's -max_len): a few times its
# largest seed.
declare -A max_len=([experiment]=16384 [where]=1024 [safetensors]=8192
                    [idx]=16384 [cifar10]=16384 [store]=65536 [tokens]=8192)
for t in "${targets[@]}"; do
  [ -n "${max_len[$t]:-}" ] || { echo "fuzz: unknown target '$t' (${all[*]})" >&2; exit 2; }
done

fuzz_targets=()
for t in "${targets[@]}"; do fuzz_targets+=("fuzz_$t"); done
./scripts/sanitize.sh --build-only "${fuzz_targets[@]}"

out="$PWD/build-asan/fuzz-out/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
# Leaks are checked by libFuzzer after each input that allocated (-detect_leaks=1).
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:print_stacktrace=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

run_target() {
  local t="$1" dir="$out/$t"
  mkdir -p "$dir/corpus" "$dir/tmp" "$dir/artifacts"
  cp tests/fuzz/corpus/"$t"/* "$dir/corpus/" 2>/dev/null || true
  ls "$dir/corpus" | wc -l >"$dir/seeds"
  local rc=0
  # TMPDIR: the target's scratch files (and any a crash leaves behind).
  TMPDIR="$dir/tmp" build-asan/tests/fuzz/fuzz_"$t" "$dir/corpus" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="${max_len[$t]}" \
    -print_final_stats=1 -artifact_prefix="$dir/artifacts/" >"$dir/log" 2>&1 || rc=$?
  echo "$rc" >"$dir/rc"
  rm -rf "$dir/tmp"
}

echo "fuzz: ${targets[*]}, $seconds s each, $parallel at a time; logs and inputs in $out"
for t in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= parallel)); do wait -n || true; done
  run_target "$t" &
done
wait

failed=0
printf '%-12s %12s %20s  %s\n' target executions "corpus (new)" result
for t in "${targets[@]}"; do
  dir="$out/$t"
  rc=$(cat "$dir/rc")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  seeds=$(cat "$dir/seeds")
  after=$(ls "$dir/corpus" | wc -l)
  result=ok
  if [ "$rc" != 0 ]; then
    failed=1
    if grep -q "ERROR: libFuzzer: timeout" "$dir/log"; then result=timeout
    elif grep -q "ERROR: libFuzzer: out-of-memory" "$dir/log"; then result=out-of-memory
    elif grep -q "ERROR: LeakSanitizer" "$dir/log"; then result=leak
    else result=crash
    fi
    input=$(ls -t "$dir"/artifacts/* 2>/dev/null | head -1 || true)
    result="$result: ${input:-no input saved} (log: $dir/log)"
  fi
  printf '%-12s %12s %20s  %s\n' "$t" "${execs:-?}" "$seeds -> $after ($((after - seeds)))" "$result"
done
exit $failed
