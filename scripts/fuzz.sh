#!/usr/bin/env bash
# fuzz.sh: build thx's fuzz targets with clang, libFuzzer, AddressSanitizer and UBSan, and fuzz
# every reader of outside bytes (tests/fuzz/README.md).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     each target SECONDS (default 600), all by default
#   scripts/fuzz.sh --smoke                   each target 5 s over its seeds (the test suite's run)
#
# Targets run JOBS at a time (default: the cores). Each starts from its committed seeds
# (tests/fuzz/corpus/TARGET) and a working corpus kept between runs in build-fuzz/corpus/TARGET;
# an input that finds something (a crash, a leak, undefined behaviour, an error that is not one
# clear line) is written to build-fuzz/findings/TARGET/ and the script exits 1. A summary per
# target (seconds, executions, corpus size, findings) goes to build-fuzz/summary.md.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=600
targets=()
for a in "$@"; do
  case "$a" in
    --smoke) seconds=5 ;;
    ''|*[!0-9]*) targets+=("$a") ;;
    *) seconds="$a" ;;
  esac
done
jobs=${JOBS:-$(nproc)}
build=${FUZZ_BUILD_DIR:-build-fuzz}

all=$(cd tests/fuzz && for f in *.cpp; do
  case $f in fuzz.cpp | replay_main.cpp) ;; *) printf '%s ' "${f%.cpp}" ;; esac
done)
[ ${#targets[@]} -gt 0 ] || read -r -a targets <<< "$all"
for t in "${targets[@]}"; do
  case " $all " in *" $t "*) ;; *) echo "fuzz.sh: unknown target '$t'; targets: $all" >&2; exit 2 ;; esac
done

command -v clang++-14 >/dev/null && [ -f /usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a ] \
  || { echo "fuzz.sh: clang 14 with libFuzzer not found; run scripts/setup.sh --fuzz" >&2; exit 2; }
echo "[fuzz] building ${#targets[@]} targets in $build (clang, libFuzzer, address,undefined)"
if [ ! -f "$build/CMakeCache.txt" ]; then
  # -O1 with line tables: fast enough to fuzz, and every report names file and line.
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DTHX_FUZZ=ON -DTHX_SANITIZE=address,undefined > "$build.configure.log" 2>&1 \
    || { cat "$build.configure.log" >&2; exit 1; }
fi
cmake --build "$build" --target "${targets[@]/#/fuzz_}"

# allocator_may_return_null: HDF5 (Debian's library) allocates what a damaged file's metadata
# says and handles a NULL as an error; thx's own allocations go through LibTorch, which throws,
# and the harness reports every exception that is not a one-line InputError.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/fuzz/lsan.supp:print_suppressions=0}
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
mkdir -p "$build/findings" "$build/logs"
summary="$build/summary.md"
echo "| target | seconds | executions | exec/s | corpus | findings |" > "$summary.tmp"
echo "|---|---:|---:|---:|---:|---:|" >> "$summary.tmp"

run_one() {
  local t=$1 work="$build/corpus/$1" out="$build/findings/$1" log="$build/logs/$1.log"
  mkdir -p "$work" "$out"
  local start=$SECONDS status=0
  "$build/fuzz_$t" "$work" "tests/fuzz/corpus/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
    -artifact_prefix="$out/" -print_final_stats=1 > "$log" 2>&1 || status=$?
  local execs rate size found
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  size=$(find "$work" -type f | wc -l)
  found=$(find "$out" -type f | wc -l)
  echo "| $t | $((SECONDS - start)) | ${execs:-?} | ${rate:-?} | $size | $found |" >> "$summary.tmp"
  if [ "$status" -ne 0 ] || [ "$found" -ne 0 ]; then
    echo "[fuzz] $t: FINDING (exit $status); see $log and $out/" >&2
    grep -m3 -E "FINDING|ERROR: |runtime error" "$log" >&2 || true
    return 1
  fi
  echo "[fuzz] $t: ${execs:-?} executions in $((SECONDS - start)) s, corpus $size, no finding"
}

failed=0
pids=()
for t in "${targets[@]}"; do
  run_one "$t" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$jobs" ]; then
    wait "${pids[0]}" || failed=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || failed=1; done
mv "$summary.tmp" "$summary"
cat "$summary"
[ "$failed" -eq 0 ] || { echo "fuzz.sh: findings above (inputs in $build/findings/)" >&2; exit 1; }
echo "[fuzz] ${#targets[@]} targets, ${seconds} s each: no finding"
