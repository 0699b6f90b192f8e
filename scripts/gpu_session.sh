#!/usr/bin/env bash
# gpu_session.sh: everything a GPU machine's session runs, as one command (../shared/notes/gpu.md).
# Time on such a machine is short (minutes, and each new machine takes minutes to start), so:
#
#   scripts/gpu_session.sh prepare   here, on the CPU: fills gpu-carry/ (ignored by git, < 64 MB):
#                                    the Debian packages the build needs (gpu_build.sh fetch),
#                                    the PyTorch peer, and the quickstart's prepared corpus;
#   scripts/gpu_session.sh rehearse  here, after the build: every phase but the build and the unit
#                                    suite against this machine's thx, which refuses CUDA in one line:
#                                    the script's own faults and thx command lines that do not parse
#                                    show here, not on the GPU (CTest: gpu_session_rehearsal);
#   scripts/gpu_session.sh run       there, with gpu-carry/ brought along: builds thx against the
#                                    machine's PyTorch (gpu_build.sh build; c10d, or without it if
#                                    its headers do not compile), then runs, in this order, each
#                                    phase that still fits before the deadline (GPU_DEADLINE_S,
#                                    default 560 s): the row and flash kernels' SASS (cuobjdump, to
#                                    read on the CPU machines, which cannot disassemble), the CUDA
#                                    tests (each suite in its own process,
#                                    so that a crash names its suite; what they skipped and
#                                    failed, and why, a line in the summary by
#                                    scripts/gtest_report.py; first the probe of the
#                                    primitives the kernels are built from, against PTX's
#                                    definitions, whose line goes to the summary), compute-sanitizer
#                                    on thx's kernels, Nsight Compute on the row kernels and the
#                                    flash kernels (GPU_NCU_PATHS) and every kernel of the tiled
#                                    and heads-major paths timed (GPU_NCU_KERNEL_PATHS), each SASS
#                                    instruction's executions in the row
#                                    kernels and the flash forward and backward with T5's
#                                    bias (ncu's source page as CSV, beside the SASS), the
#                                    attention benchmark (talking-heads on the flash
#                                    kernels, on the tiled path with thx's row kernels, on the
#                                    heads-major products (gemm, gemm-aten), on the tiled path with their
#                                    composition (tiled-gemm), on the folded products, batched;
#                                    GPU_ATTENTION_PATHS adds tiled-fma, tiled-aten and fused, which
#                                    the fourth session measured), the whole-step benchmark at base
#                                    size in bf16 with the compiled PyTorch peer (its talking-heads
#                                    rows again with the flash kernels, the heads-major and the
#                                    folded products and
#                                    with ATen between the products; one step of each of
#                                    multi-head's and the heads-major path's rows profiled by
#                                    Kineto: every kernel's GPU time, by phase, and the step's
#                                    timeline; and profiled again with Adafactor, the loss and the
#                                    RMS norm by ATen's composition instead of thx's kernels:
#                                    profile-aten-parts), the mini T5 on the GPU
#                                    (fp32, bf16) beside the CPU,
#                                    the rest of the unit suite, the talking-heads rows on the fused
#                                    kernels, and a crashed suite again under cuda-gdb. Four phases
#                                    run only when named: the real TensorBoard reading a run's tb/
#                                    and the kernel SDPA picks (sdpa_backend.py), which passed in the
#                                    second session, the fused kernels' launch tuned (atomics, tiles,
#                                    threads), which in the third found atomics within 2% and fewer
#                                    threads slower, and base-pair (T5-base multi-head and
#                                    talking-heads at 12 and 48 heads, 300 steps each, for
#                                    docs/results).
#
# The order is what a short session needs most first. The peer compiles each model (40-70 s),
# so the default whole-step rows are T5-base at h = 12 and 48 with the peer at h = 12 only
# (GPU_BENCH_TRAIN_ARGS replaces them: "--base" alone is every row, about 6 minutes). A second
# call on the same warm machine finds the build done:
#   GPU_PHASES="build mini-t5 unit-suite bench-train-fused" scripts/gpu_session.sh run
# (On the fourth session's H200 a fresh build took 219 s, the CUDA tests 45, compute-sanitizer 59,
# five attention paths 102, the whole step with the peer at h = 12 207, the mini T5 41.)
#
# Every log, table and the summary go to $OUT (the device tool brings that folder back), at the
# end as $OUT/summary.md (each phase, its exit code and seconds, or why it was skipped) and
# $OUT/session.tgz (everything else; in parts where it is larger than the tool brings back: pack_out).
set -uo pipefail
cd "$(dirname "$0")/.."
CARRY=gpu-carry   # what the session brings along
BUILD=build-gpu   # where gpu_build.sh builds thx (rehearse: this machine's build)
MINI_STEPS=300    # the mini T5's steps on each device (rehearse: a few)
# The phases run() runs when GPU_PHASES names none, in order, and those it runs only when named.
DEFAULT_PHASES="build sass cuda-tests sanitize ncu ncu-source bench-attention bench-train"
DEFAULT_PHASES+=" bench-train-flash bench-train-gemm profile-train profile-aten-parts"
DEFAULT_PHASES+=" bench-train-gemm-aten bench-train-tiled-gemm"
DEFAULT_PHASES+=" bench-train-folded bench-train-deterministic"
DEFAULT_PHASES+=" mini-t5 unit-suite bench-train-aten bench-train-fused cuda-debug"
NAMED_PHASES="tune tensorboard sdpa base-pair"
# thx's --th-path values and attention variants, which the settings below name; the rehearsal
# checks both lists against what this thx accepts (names_check).
TH_PATHS="tiled tiled-fma tiled-aten tiled-gemm flash fused folded gemm gemm-aten batched"
VARIANTS="multi_head talking_heads project_logits project_weights general_bilinear"

# A small corpus (two folders of the kernel's documentation, 6.6 MB of text) so that the
# carried folder stays under the device tool's 64 MB: its tokenizer and prepared shards, in $CARRY.
prepare_corpus() {
  local docs
  docs=$(ls -d /usr/share/doc/linux-doc-*/html/_sources | head -n 1)
  local THX=${THX:-build/thx}
  rm -rf "$CARRY/prepared" "$CARRY/spm.model" "$CARRY/spm.vocab"  # (made anew: a second prepare is the first)
  "$THX" spm-train --input "$docs/admin-guide" --input "$docs/networking" --format text_files --pieces 8000 \
    --out "$CARRY/spm" &&
  "$THX" prepare --input "$docs/admin-guide" --input "$docs/networking" --format text_files \
    --tokenizer "$CARRY/spm.model" --out "$CARRY/prepared" --heldout-fraction 0.02
}

prepare() {
  set -e
  mkdir -p "$CARRY"
  scripts/gpu_build.sh fetch
  cp ../shared/bench/peer_t5.py "$CARRY/peer_t5.py"
  prepare_corpus
  du -sh "$CARRY"/*
  # The device tool sends the working tree (tracked files, and untracked ones git does not ignore)
  # and the carried folder together, at most 64 MiB: a call over it would fail on the GPU's time.
  local tree carry
  tree=$({ git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2> /dev/null || true; } |
    awk '{ s += $1 } END { print s + 0 }')  # (|| true: a tracked file deleted in the tree)
  carry=$(du -sb "$CARRY" | cut -f1)
  echo "sent to the GPU machine: the working tree, $tree bytes, and $CARRY, $carry bytes (at most 67108864)"
  [ $((tree + carry)) -le 67108864 ] ||
    { echo "gpu_session.sh prepare: more than the device tool's 64 MiB; carry less" >&2; exit 1; }
}

# check_settings: what the caller set, before anything runs or is written. A misspelt phase in
# GPU_PHASES would run nothing, a number that is not one would skip every phase
# (GPU_DEADLINE_S) or stop the archive at the end (GPU_PART_BYTES), and a misspelt path or
# variant would be refused by thx only after the build: one line each, exit 2.
check_settings() {
  local v
  check_words GPU_PHASES "$DEFAULT_PHASES $NAMED_PHASES" many
  check_words GPU_TH_PATH "$TH_PATHS" one
  check_words GPU_PROFILE_TH_PATH "$TH_PATHS" one
  check_words GPU_ATTENTION_PATHS "$TH_PATHS fma" many
  check_words GPU_NCU_KERNEL_PATHS "$TH_PATHS" many
  [ "${GPU_NCU_PATHS:-}" = none ] || check_words GPU_NCU_PATHS "tiled tiled-fma flash fused" many
  check_words GPU_MINI_VARIANTS "$VARIANTS" many
  for v in GPU_DEADLINE_S GPU_PART_BYTES GPU_BASE_PAIR_STEPS; do
    case ${!v-1} in
      '' | *[!0-9]* | 0) echo "gpu_session.sh: $v=${!v}: allowed: a whole number above 0" >&2; exit 2 ;;
    esac
  done
}

# check_words VAR ALLOWED one|many: each word of $VAR is among ALLOWED, and there is exactly one
# where `one`. Unset or empty is the default; blanks alone would run nothing: refused too.
check_words() {
  local var=$1 allowed=$2 count=$3 w n=0
  [ -n "${!var:-}" ] || return 0
  for w in ${!var}; do
    n=$((n + 1))
    case " $allowed " in
      *" $w "*) ;;
      *) echo "gpu_session.sh: $var: '$w' is not allowed; allowed: $allowed" >&2; exit 2 ;;
    esac
  done
  if [ "$n" = 0 ] || { [ "$count" = one ] && [ "$n" != 1 ]; }; then
    echo "gpu_session.sh: $var='${!var}': allowed: $([ "$count" = one ] && echo "one of" ||
      echo "one or more of") $allowed" >&2
    exit 2
  fi
}

run() {
  check_settings
  OUT=${OUT:-runs/gpu_session}
  mkdir -p "$OUT"
  local summary="$OUT/summary.md"
  # The device tool ends a command at 10 minutes: every phase must end before the deadline
  # (GPU_DEADLINE_S after the start), and one that would not fit is skipped, not cut off. A
  # later call on the same (warm) machine finds the build done and can run the rest
  # (GPU_PHASES="bench-train unit-suite", say).
  local deadline=$((SECONDS + ${GPU_DEADLINE_S:-560}))
  local phases=${GPU_PHASES:-$DEFAULT_PHASES}
  printf '| phase | exit | seconds | last line of its log |\n|---|---:|---:|---|\n' > "$summary"
  {
    date -u; uname -a; head -3 /etc/os-release 2>/dev/null; nproc; free -g | head -2
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
    nvcc --version 2>&1 | tail -2
  } > "$OUT/machine.txt"

  # phase NAME SECONDS COMMAND...: COMMAND with its output in $OUT/NAME.log, if NAME is asked
  # for and SECONDS (its expected length) fit before the deadline; it is stopped at the deadline.
  phase() {
    local name=$1 need=$2
    shift 2
    case " $phases " in *" $name "*) ;; *) return 0 ;; esac
    local left=$((deadline - SECONDS))
    if [ "$left" -lt "$need" ]; then
      printf '| %s | - | - | skipped: %s s left, it needs about %s |\n' "$name" "$left" "$need" >> "$summary"
      return 0
    fi
    local t0=$SECONDS
    timeout "$left" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    printf '| %s | %s | %s | %s |\n' "$name" "$rc" "$((SECONDS - t0))" \
      "$(grep -v '^\s*$' "$OUT/$name.log" | tail -n 1 | cut -c1-150 | tr '|' '/')" >> "$summary"
    return $rc
  }

  # What a test phase's tests skipped and failed, and why (scripts/gtest_report.py over the XML
  # reports its processes wrote to $OUT/NAME-xml/): a GPU test skipped for want of a device shows
  # in the summary's line, the table in NAME-report.md. (Processes that start at once may pick
  # one report's name, and one is lost: its counts are then short.)
  report_tests() {
    [ -d "$OUT/$1-xml" ] || return 0
    python3 scripts/gtest_report.py "$OUT/$1-xml" > "$OUT/$1-report.md" 2>&1
    printf '| (%s) | - | - | %s |\n' "$1" "$(tail -n 1 "$OUT/$1-report.md" | cut -c1-150 | tr '|' '/')" >> "$summary"
  }

  if ! phase build 240 scripts/gpu_build.sh build; then
    # Again without the part that failed: thx's CUDA kernels (nvcc's errors name a .cu or .cuh
    # file, or cuda_compat.h; each kernel then takes its ATen path), NCCL (nccl.cpp), c10d (its
    # headers or torch_compat.h), or, when the log names none, the kernels.
    local fallback=()
    grep -qE "(\.cuh?|cuda_compat\.h)[(:][0-9].*error" "$OUT/build.log" && fallback+=(THX_CUDA_KERNELS=OFF)
    grep -qE "src/distributed/nccl.*error" "$OUT/build.log" && fallback+=(THX_NCCL=OFF)
    grep -vE "src/distributed/nccl" "$OUT/build.log" | grep -qE "(src/distributed/|torch_compat.h).*error" &&
      fallback+=(THX_DISTRIBUTED=OFF)
    [ ${#fallback[@]} -gt 0 ] || fallback=(THX_CUDA_KERNELS=OFF)
    phases="$phases build-fallback"
    phase build-fallback 200 env "${fallback[@]}" scripts/gpu_build.sh build
  fi
  # Where the build's time went, so that a later session can shorten what bounds it (the build
  # takes a quarter of a session's device time): its longest steps (from ninja's log: start, end,
  # ms), and the log with build.ninja (build-ninja.tgz: `scripts/ninja_replay.py DIR --chain` on
  # the CPU machines replays it and names the chain of steps that ends last).
  if [ -f "$BUILD/.ninja_log" ]; then
    awk -F'\t' 'NR > 1 { printf "%7.1f s  %s\n", ($2 - $1) / 1000, $4 }' "$BUILD/.ninja_log" | sort -rn |
      head -n 25 > "$OUT/build-steps.txt"
    tar czf "$OUT/build-ninja.tgz" -C "$BUILD" .ninja_log build.ninja
  fi
  # Why the GPU build's executables need no libstdc++ (Linking.*, the fourth and fifth sessions)
  # although gpu_build.sh links them with -lstdc++ under --no-as-needed: which file the linker
  # takes for -lstdc++ with the build's -L, what an empty program then needs, and what thx_tests
  # needs (less than a second; linking.txt).
  {
    echo "c++: $(command -v c++) $(c++ -dumpfullversion 2>&1); libstdc++.so: $(c++ -print-file-name=libstdc++.so)"
    echo 'int main() { return 0; }' | c++ -x c++ - -o "$OUT/linking-probe" \
      -Wl,--push-state,--no-as-needed,-lstdc++,--pop-state -L"$CARRY/root/usr/lib/x86_64-linux-gnu" \
      -Wl,--trace 2>&1 | grep -iE "stdc|error"
    readelf -d "$OUT/linking-probe" 2>&1 | grep NEEDED
    echo "$BUILD/thx_tests:"; readelf -d "$BUILD/thx_tests" 2>&1 | grep NEEDED
    rm -f "$OUT/linking-probe"
  } > "$OUT/linking.txt" 2>&1
  LD_LIBRARY_PATH="$(realpath -m "$CARRY")/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LD_LIBRARY_PATH
  local thx=$BUILD/thx prep="$CARRY/prepared"
  if [ -x "$thx" ]; then
    # The kernels' SASS as this build made it (cuobjdump), to read on the CPU machines, which have
    # nvcc but no disassembler: what each loop of the row and flash kernels really holds.
    # (The row kernels on tensor cores, the flash kernels and the softmax only: the archive must
    # stay small.)
    phase sass 30 bash -c "
      set -o pipefail
      cuobjdump=\$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
      \$cuobjdump -sass $thx | awk '/Function :/ { keep = /rows_tc|flash|softmax_kernel/ } keep' |
        gzip -9 > $OUT/thx-sass.txt.gz || exit 1
      echo \"\$(zcat $OUT/thx-sass.txt.gz | grep -c 'Function :') kernels' SASS in thx-sass.txt.gz\""
    # The tests that need or concern the GPU, each group in its own process (a crash names its
    # group; crashed groups are listed for cuda-debug).
    export THX_TEST_PYTHON=python3  # the machine's PyTorch, for the float64 references
    # (Cuda.Deterministic* apart: its thirteen runs and a fixture's would crowd Cuda.*'s 140 s.)
    phase cuda-tests 180 bash -c '
      set -f; failed=0
      for f in CudaPrimitivesOnCuda.* Adafactor.*OnCuda* Cuda.*-Cuda.Deterministic* Cuda.Deterministic* \
          DevicePath.* OutOfMemory.* Device.* CrashReport.* \
          Linking.* TiledRowKernelsOnCuda.* TiledRowKernelsTcOnCuda.* FlashOnCuda.* FusedThOnCuda.* \
          *OnCuda*-FusedThOnCuda.*:TiledRowKernels*OnCuda.*:FlashOnCuda.*:CudaPrimitivesOnCuda.*:Adafactor.*; do
        echo "== $f"
        timeout 140 '"$BUILD"'/thx_tests --gtest_filter="$f" --gtest_brief=1 \
          --gtest_output=xml:'"$OUT"'/cuda-tests-xml/ 2>&1 | tail -40
        rc=${PIPESTATUS[0]}
        echo "== $f: exit $rc"
        [ "$rc" -ge 128 ] && echo "$f" >> '"$OUT"'/cuda-crashed.txt
        [ "$rc" -ne 0 ] && failed=1
      done
      exit $failed'
    report_tests cuda-tests

    # The default talking-heads path is tiled, with thx's row kernels between cuBLAS's products
    # (bf16 on tensor cores); where the tensor-core kernels' tests failed (or crashed) on this GPU,
    # the mini T5 and the whole-step rows take the row kernels' FMAs (--th-path tiled-fma); where
    # the FMAs' failed, ATen between the products (--th-path tiled-aten), so that the session
    # still measures the rest. bench-train-fused and bench-train-flash time the fused kernels and
    # the flash kernels only where their tests passed. The summary says which. GPU_TH_PATH names
    # the path of mini-t5 and bench-train instead (GPU_TH_PATH=gemm: the whole step with the peer
    # beside, on the heads-major products), whatever the tests said.
    th_path=${GPU_TH_PATH:-tiled}; fused_ok=1; flash_ok=1
    [ -n "${GPU_TH_PATH:-}" ] &&
      printf '| (GPU_TH_PATH) | - | - | mini-t5, bench-train and base-pair take --th-path %s |\n' "$th_path" \
        >> "$summary"
    # The primitives' probe first: where it failed, the emulator that proved the kernels on the CPU
    # does not model that primitive as this GPU runs it, and its log names which.
    grep -m 1 "^primitives: " "$OUT/cuda-tests.log" 2>/dev/null | cut -c1-300 | tr '|' '/' |
      sed 's/^/| (cuda-tests) | - | - | /; s/$/ |/' >> "$summary"
    if [ -z "${GPU_TH_PATH:-}" ] &&
        grep -qE "== TiledRowKernelsTcOnCuda[.][*]: exit [1-9]" "$OUT/cuda-tests.log" 2>/dev/null; then
      th_path=tiled-fma
      printf '| (row kernels on tensor cores failed) | - | - | %s take --th-path tiled-fma |\n' \
        "mini-t5, bench-train and base-pair" \
        >> "$summary"
    fi
    if [ -z "${GPU_TH_PATH:-}" ] &&
        grep -qE "== TiledRowKernelsOnCuda[.][*]: exit [1-9]" "$OUT/cuda-tests.log" 2>/dev/null; then
      th_path=tiled-aten
      printf '| (row kernels failed) | - | - | %s take --th-path tiled-aten |\n' "mini-t5, bench-train and base-pair" \
        >> "$summary"
    fi
    # Adafactor's, the loss's and the RMS norm's kernels where their tests passed; else every later
    # phase takes that part's ATen composition (THX_ATEN, common/runtime.h), so that the session
    # still measures and trains right.
    local aten=()
    grep -qE "== Adafactor[.][*]OnCuda[*]: exit [1-9]" "$OUT/cuda-tests.log" 2>/dev/null && aten+=(adafactor)
    # (the loss's kernels are new: a crash of the group that holds their only GPU test counts too)
    grep -qE "FAILED.*DevicePath[.]CrossEntropyOnCuda|== DevicePath[.][*]: exit (12[89]|1[3-9][0-9]|2[0-9][0-9])" \
      "$OUT/cuda-tests.log" 2>/dev/null && aten+=(loss)
    grep -qE "FAILED.*DevicePath[.]RmsNormOnCuda" "$OUT/cuda-tests.log" 2>/dev/null && aten+=(rms_norm)
    if [ ${#aten[@]} -gt 0 ]; then
      THX_ATEN=$(IFS=,; echo "${aten[*]}")
      export THX_ATEN
      printf '| (kernels failed) | - | - | every later phase: THX_ATEN=%s |\n' "$THX_ATEN" >> "$summary"
    fi
    if grep -qE "== FlashOnCuda[.][*]: exit [1-9]" "$OUT/cuda-tests.log" 2>/dev/null; then
      flash_ok=0
      printf '| (flash kernels failed) | - | - | no flash in bench-attention, no bench-train-flash |\n' >> "$summary"
    fi
    if grep -qE "== FusedThOnCuda[.][*]: exit [1-9]" "$OUT/cuda-tests.log" 2>/dev/null; then
      fused_ok=0
      printf '| (fused kernels failed) | - | - | no bench-train-fused |\n' >> "$summary"
    fi

    # thx's own kernels under compute-sanitizer (memcheck: out-of-bounds and uninitialized
    # reads; racecheck: shared-memory races between a block's threads), each group on its own so
    # that a slow run of one cannot take the others' verdicts with it: the flash kernels (every
    # variant and mask, both backwards), the row kernels on tensor cores and as FMAs (small
    # shapes: T5-base width would not fit the time) with the softmax's, the heads-major
    # mixings' and the RMS norm's, the loss's, Adafactor's, and the fused kernels
    # (memcheck only: their racecheck passed in the third session, and the group holding it ran
    # past its 45 s in the fourth).
    phase sanitize 80 bash -c '
      cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer); failed=0
      for tool in memcheck racecheck; do
        for filter in "FlashOnCuda.Bf16*" \
            "TiledRowKernelsTcOnCuda.*:TiledRowKernelsOnCuda.EqualsThePapersCore*:RowsSoftmaxOnCuda.*:RowsMixOnCuda.*:DevicePath.Rms*" \
            "DevicePath.CrossEntropyOnCuda*" \
            "Adafactor.GroupedUpdateOnCuda*" \
            "FusedThOnCuda.EqualsThePapersCoreForEveryVariantMaskAndDtype"; do
          case $tool:$filter in racecheck:FusedTh*) continue ;; esac
          echo "== $tool: $filter"
          timeout 45 "$cs" --tool $tool --error-exitcode 3 '"$BUILD"'/thx_tests --gtest_filter="$filter" \
            --gtest_brief=1 2>&1 | tail -30
          rc=${PIPESTATUS[0]}; echo "== $tool: exit $rc"; [ "$rc" -ne 0 ] && failed=1
        done
      done
      exit $failed'
    # What bounds thx's kernels: Nsight Compute on one layer, bf16, n = 2048, batch 8, at h = 12 and
    # 48 (speed of light, memory workload and its tables, compute workload, occupancy, scheduler
    # and warp-state statistics, instructions, and the source lines behind them: nvcc builds with
    # -lineinfo, and SourceCounters names the shared loads that conflict), for each path in
    # GPU_NCU_PATHS (default: tiled, the default path, then flash): the row kernels' first forward
    # and first backward launch (the tiled path launches them once a block of rows), the flash
    # kernels' forward and the backward's passes D and G, the fused kernels' forward and backward.
    # Then where each path in GPU_NCU_KERNEL_PATHS spends a layer at 48 heads with T5's bias
    # (default: tiled, and gemm, whose cuBLAS mixings over 12 to 48 heads and softmax kernel are only
    # estimated): every kernel of one layer's run timed alone (gpu__time_duration, summed by kernel
    # name: cuBLAS's products, the row kernels, thx's softmax, ATen's element-wise kernels), the
    # bytes each moved to and from DRAM (dram__bytes: over its time, how near the memory's rate a
    # kernel bound by it runs), with the warp instructions each executed (smsp__inst_executed: for
    # the row kernels, over the layer's 1.6 G elements, the instructions an element costs, which
    # the fifth session cut on the CPU; docs/tiled_row_kernels.md, "Per-element work"). The fourth
    # session found the flash kernels latency-bound at low occupancy (docs/fused_talking_heads.md);
    # the row kernels had no profile yet. GPU_NCU_PATHS=none: the timings alone.
    local ncu_paths=${GPU_NCU_PATHS:-tiled flash} kernel_paths=${GPU_NCU_KERNEL_PATHS:-tiled gemm}
    [ "$ncu_paths" = none ] && ncu_paths=
    phase ncu $((50 * $(wc -w <<< "$ncu_paths") + 45 * $(wc -w <<< "$kernel_paths") + 10)) bash -c "
      ncu=\$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      sections='--section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables
        --section ComputeWorkloadAnalysis --section Occupancy --section SchedulerStats --section WarpStateStats
        --section InstructionStats --section SourceCounters'
      profile() {  # h, path, kernel-name regex, launches
        timeout 42 \$ncu --kernel-name regex:\"\$3\" --launch-count \$4 \$sections \
          $thx --device cuda --th-path \$2 bench attention --precision bf16 --heads \$1 --n 2048 --batch 8 \
          --reps 1 --no-reference
      }
      for h in 12 48; do  # (--launch-count counts across the process)
        for path in $ncu_paths; do
          echo \"== ncu: h = \$h, --th-path \$path\"
          case \$path in
            tiled|tiled-fma)
              profile \$h \$path '^rows_(tc_)?forward_kernel' 1; profile \$h \$path '^rows_(tc_)?backward_kernel' 1 ;;
            flash) profile \$h flash '^flash_(forward|backward)_kernel' 3 ;;
            fused) profile \$h fused '^(forward|backward)_kernel' 2 ;;
            *) echo \"GPU_NCU_PATHS: \$path is not a path it profiles (allowed: tiled, tiled-fma, flash, fused)\" ;;
          esac
        done
      done
      for path in $kernel_paths; do
        echo \"== ncu: every kernel of --th-path \$path at h = 48 with T5's bias, timed alone\"
        timeout 90 \$ncu --metrics gpu__time_duration.sum,smsp__inst_executed.sum,dram__bytes.sum \
          --print-summary per-kernel \
          $thx --device cuda --th-path \$path bench attention --precision bf16 --heads 48 --n 2048 --batch 8 \
          --bias --reps 1 --no-reference
      done"
    # Each SASS instruction's executions and stalls (Nsight Compute's source page as CSV, to read on
    # the CPU machines beside thx-sass.txt.gz): the row kernels forward and backward, the flash
    # forward and the flash backward's pass G (its second launch: pass D is the first) at h = 48,
    # n = 2048, batch 8, with T5's bias (the whole-step case), one launch each. Read them with
    # scripts/sass_counts.py (by opcode, and the instructions that stall most).
    phase ncu-source 140 bash -c "
      ncu=\$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      failed=0
      for what in 'tiled ^rows_tc_forward_kernel rows-forward 0' 'tiled ^rows_tc_backward_kernel rows-backward 0' \
          'flash ^flash_forward_kernel flash-forward 0' 'flash ^flash_backward_kernel flash-backward-g 1'; do
        set -- \$what
        echo \"== \$3\"
        timeout 45 \$ncu --kernel-name regex:\"\$2\" --launch-skip \$4 --launch-count 1 --section SourceCounters \
          -f -o $OUT/ncu-\$3 \
          $thx --device cuda --th-path \$1 bench attention --precision bf16 --heads 48 --n 2048 --batch 8 --bias \
          --reps 1 --no-reference > /dev/null || failed=1
        \$ncu --import $OUT/ncu-\$3.ncu-rep --page source --print-source sass --csv > $OUT/sass-counts-\$3.csv ||
          failed=1
        rm -f $OUT/ncu-\$3.ncu-rep  # (the archive must stay small: the CSV has what is read)
        wc -l $OUT/sass-counts-\$3.csv; gzip -9 $OUT/sass-counts-\$3.csv
      done
      exit \$failed"
    # One layer in bf16 at h = 12, 24, 48 (issue 31's grid): talking-heads on the flash kernels
    # (where their tests passed), on the tiled path with thx's row kernels (the default: bf16
    # mixings on tensor cores), on the heads-major products (gemm: the mixings as cuBLAS products
    # over the n m positions, in bf16, the bias, mask and softmax in one launch of thx's kernel; and
    # gemm-aten, the same with ATen's four passes for them: the launch's saving), on the tiled path
    # with that composition between its products (tiled-gemm), on the folded products (the mixings
    # folded into Q and V: cuBLAS alone) and on the batched composition (GPU_ATTENTION_PATHS adds
    # tiled-fma: the row kernels' fp32 FMAs, tiled-aten: ATen between the products in fp32, the
    # default before the row kernels, fused: thx's fused kernels, and fma: those with version 1's
    # FMAs, the slowest), at n = 512 and 2048 (batch 8); at n = 8192 batch 1 without the einsum
    # reference (it keeps [b,h,n,m] tensors of 13 GB each at 48 heads), and flash, tiled-gemm and
    # batched at n = 8192 batch 8 too, where the batched composition's [b,h,n,m] tensors cannot fit
    # (6.4 GB each at 48 heads, batch 1): a variant out of memory is its row, the others go on
    # (issue 31's "show where"). The flash kernels, the row kernels and gemm (both) also with T5's
    # relative position bias (--bias) at n = 2048: what the bias's loads and its gradient cost them,
    # which every T5 layer pays and the rows without it do not show. The flash kernels, the row
    # kernels and gemm also at T5's encoder-decoder attention: 114 targets over 512 inputs (--m),
    # batch 32 as the whole step's, with the einsum reference (n != m, issue 31's coverage, which no
    # GPU has timed so far; three small layers, within the phase's 170 s, which docs/gpu.md's second
    # call leaves 200 s for, the build found done included). A path that fails does not stop the others.
    local paths=${GPU_ATTENTION_PATHS:-flash tiled gemm gemm-aten tiled-gemm folded batched}
    [ "$flash_ok" = 1 ] || paths=${paths/flash/}
    phase bench-attention 170 bash -c "
      bench() { $thx --device cuda bench attention --precision bf16 --heads 12,24,48 \"\$@\"; }
      failed=0
      for path in $paths; do
        flag=\"--th-path \$path\"; [ \$path = fma ] && flag=\"--th-path fused --fma\"
        for n in 512 2048; do bench --n \$n --batch 8 \$flag --out $OUT/attention-\$path-n\$n.md || failed=1; done
        case \$path in fma) ;; *) bench --n 8192 --batch 1 --no-reference \$flag --out $OUT/attention-\$path-n8192.md || failed=1 ;; esac
        case \$path in flash|batched|tiled-gemm)
          bench --n 8192 --batch 8 --no-reference \$flag --out $OUT/attention-\$path-n8192-b8.md || failed=1 ;;
        esac
        case \$path in flash|tiled|gemm|gemm-aten)
          bench --n 2048 --batch 8 --bias --no-reference \$flag --out $OUT/attention-\$path-bias-n2048.md || failed=1 ;;
        esac
        case \$path in flash|tiled|gemm)
          bench --n 114 --m 512 --batch 32 \$flag --out $OUT/attention-\$path-n114-m512.md || failed=1 ;;
        esac
      done
      # version 2.4's padded heads against none (the same numbers): fused at n = 2048
      case \" ${GPU_ATTENTION_PATHS:-} \" in *' fused '*)
        bench --n 2048 --batch 8 --no-reference --th-path fused --th-unpadded --out $OUT/attention-fused-unpadded-n2048.md ;; esac
      exit \$failed"
    # T5-base in bf16 (the ratio issue 30 asks for), multi-head and talking-heads at h = 12 and
    # 48 on the default path, the compiled peer beside
    # h = 12 (each of its models compiles for a minute; GPU_BENCH_TRAIN_ARGS adds or replaces).
    phase bench-train 200 env THX_PEER_PYTHON=python3 "$thx" --device cuda --th-path $th_path bench train \
      --config configs/t5/mini.yaml \
      --precision bf16 ${GPU_BENCH_TRAIN_ARGS:---base --base-only --base-heads 12,48 --peer-heads 12} \
      --peer "$CARRY/peer_t5.py" --out "$OUT/train.md"
    # The talking-heads rows with the flash kernels (where their tests passed), for their ratio to the
    # default on the same machine.
    [ "$flash_ok" = 1 ] && phase bench-train-flash 60 "$thx" --device cuda --th-path flash bench train \
      --config configs/t5/mini.yaml --precision bf16 --base --base-only --base-heads 12,48 --out "$OUT/train-flash.md"
    # The talking-heads rows on the heads-major products (the mixings as cuBLAS products in bf16,
    # the weights kept), for their ratio to the default on the same machine, at the issue's three
    # head counts.
    phase bench-train-gemm 90 "$thx" --device cuda --th-path gemm bench train \
      --config configs/t5/mini.yaml --precision bf16 --base --base-only --base-heads 12,24,48 --out "$OUT/train-gemm.md"
    # Where a whole T5-base step's GPU time goes: the same rows (multi-head and talking-heads at 12
    # and 48 heads; talking-heads on GPU_PROFILE_TH_PATH, default gemm) with one more step each under
    # Kineto (bench train --profile: CUPTI's time of every kernel, by phase, by the op that launched it
    # and by kernel, and the GPU's idle time; experiments/step_profile.h), and each step's timeline
    # (--trace: Chrome traces), read at once by scripts/trace_summary.py (where the GPU waited, by part
    # of the step: train-traces.md) and kept gzipped for the CPU machines (those past 8 MB in all are
    # dropped, so that the archive stays under the device tool's 16 MiB a file). Its s/step column
    # is timed after the row before was profiled (CUPTI stays attached): bench-train-gemm's is the one.
    phase profile-train 120 bash -c "
      $thx --device cuda --th-path ${GPU_PROFILE_TH_PATH:-gemm} bench train --config configs/t5/mini.yaml \
        --precision bf16 --base --base-only --base-heads 12,48 --steps 3 --profile --trace $OUT/traces \
        --out $OUT/train-profile.md || exit 1
      total=0
      for f in $OUT/traces/*.json; do
        [ -f \"\$f\" ] || continue
        python3 scripts/trace_summary.py \"\$f\" --top 8 >> $OUT/train-traces.md 2>&1; echo >> $OUT/train-traces.md
        gzip -9 \"\$f\"; size=\$(stat -c %s \"\$f.gz\")
        if [ \$((total + size)) -gt 8000000 ]; then
          echo \"dropped \$f.gz (\$size bytes): past 8 MB of traces\"; rm -f \"\$f.gz\"
        else total=\$((total + size)); fi
      done
      ls -l $OUT/traces"
    # The parts thx's own kernels compute, by ATen's composition instead (bench train --aten):
    # Adafactor (some 30 operations a group of parameters of one view, where its kernels make nine
    # launches), the loss (an fp32 copy of the logits and some fifteen passes, where its kernels read
    # them once forward and once backward) and T5's RMS norm; profiled as profile-train's rows at 12
    # heads (multi-head and talking-heads on gemm), so that its optimizer, loss and norms phases
    # stand against profile-train's, and its optimizer column against bench-train-gemm's.
    phase profile-aten-parts 60 "$thx" --device cuda --th-path gemm bench train --config configs/t5/mini.yaml \
      --precision bf16 --base --base-only --base-heads 12 --steps 3 --profile --aten adafactor,loss,rms_norm \
      --out "$OUT/train-aten-parts.md"
    # The same with ATen's softmax (four passes where gemm's row kernel makes one): what that launch saves a step.
    phase bench-train-gemm-aten 90 "$thx" --device cuda --th-path gemm-aten bench train \
      --config configs/t5/mini.yaml --precision bf16 --base --base-only --base-heads 12,24,48 \
      --out "$OUT/train-gemm-aten.md"
    # And on the tiled path with the same composition between its products, blocks of query rows
    # (nothing of size [b,h,n,m] kept; the forward made again in the backward).
    phase bench-train-tiled-gemm 90 "$thx" --device cuda --th-path tiled-gemm bench train \
      --config configs/t5/mini.yaml --precision bf16 --base --base-only --base-heads 12,24,48 \
      --out "$OUT/train-tiled-gemm.md"
    # The talking-heads rows on the folded products (cuBLAS's large products, the weights kept),
    # for their ratio to the default on the same machine.
    phase bench-train-folded 60 "$thx" --device cuda --th-path folded bench train \
      --config configs/t5/mini.yaml --precision bf16 --base --base-only --base-heads 12,48 --out "$OUT/train-folded.md"
    # What train.deterministic costs (common/determinism.h: ATen's deterministic algorithms, SDPA's
    # backward among them, cuBLAS's fixed workspace): bench-train-gemm's rows at 12 and 48 heads, each
    # timed as it is and under it in the same run, and whether a step repeats to the bit either way
    # (--deterministic-cost).
    phase bench-train-deterministic 90 "$thx" --device cuda --th-path gemm bench train \
      --config configs/t5/mini.yaml --precision bf16 --base --base-only --base-heads 12,48 \
      --deterministic-cost --out "$OUT/train-deterministic.md"
    # The talking-heads rows with ATen between the tiled path's products (the default before the
    # row kernels), for their ratio to the default on the same machine.
    phase bench-train-aten 60 "$thx" --device cuda --th-path tiled-aten bench train \
      --config configs/t5/mini.yaml --precision bf16 --base --base-only --base-heads 12,48 --out "$OUT/train-aten.md"
    # The fused kernels' launch, tuned: the same layer (bf16, n = 2048, batch 8, h = 12 and 48)
    # with its own choice, then each forced launch (thx bench attention --th-atomics, --th-tiles,
    # --th-threads): the backward's shared sums as version 2.1 added them (in order, scalar) and
    # staggered but scalar; fewer threads (256, the most, is the default); smaller tiles (two
    # blocks to a multiprocessor where they fit). A launch that does not fit is refused in one line and the next runs.
    phase tune 90 bash -c "
      for launch in '' '--th-atomics in-order' '--th-atomics staggered' '--th-threads 128' '--th-threads 64' \
          '--th-tiles 16x8' '--th-tiles 16x8,8x8' '--th-tiles 8x8'; do
        name=\$(echo \"default \$launch\" | tr -c 'a-z0-9\n' _)
        $thx --device cuda --th-path fused bench attention --precision bf16 --heads 12,48 --n 2048 --batch 8 --no-reference \$launch \
          --out $OUT/tune-\$name.md 2>&1 | tail -3
      done"
    # The mini T5, talking-heads (GPU_MINI_VARIANTS adds multi_head, whose curves agreed in the
    # second and third sessions), for 300 steps on the GPU in fp32 and bf16 and on this machine's
    # CPU in fp32: each GPU curve against the CPU's, within the bounds compare_curves.py states
    # (checkpoints removed so that the folders come back).
    phase mini-t5 50 bash -c "
      set -e
      for v in ${GPU_MINI_VARIANTS:-talking_heads}; do
        for run in cpu:fp32 cuda:fp32 cuda:bf16; do
          d=$OUT/mini-\$v-\${run%:*}-\${run#*:}
          $thx --th-path $th_path --device \${run%:*} --log-level warn pretrain --config configs/t5/mini.yaml \
            --set data.prepared=$prep \
            --set attention.variant=\$v --set train.steps=$MINI_STEPS --set train.log_every=10 \
            --set train.precision=\${run#*:} --run-dir \$d
          rm -rf \$d/checkpoints \$d/tb
        done
        python3 scripts/compare_curves.py $OUT/mini-\$v-cpu-fp32 $OUT/mini-\$v-cuda-fp32 --bound 0.005
        python3 scripts/compare_curves.py $OUT/mini-\$v-cpu-fp32 $OUT/mini-\$v-cuda-bf16 --bound 0.015
      done
      cd $OUT && tar czf mini-t5.tgz mini-*/metrics.jsonl mini-*/train.log && rm -rf mini-*/"
    # The rest of the unit suite on the CUDA build (issue 30 asks for all of it to pass there; in
    # the third session 62 of its groups crashed in remove_all, since fixed). Its trainings run on
    # the GPU (--device auto); what asserts bitwise results of its runs trains them under
    # train.deterministic there (tests/test_util.h).
    phase unit-suite 150 env GTEST_OUTPUT="xml:$OUT/unit-suite-xml/" \
      ctest --test-dir "$BUILD" -j 16 -L unit -E '^Cuda[.]' --output-on-failure
    report_tests unit-suite
    # The real tensorboard package reads a run's tb/ (its scalars equal metrics.jsonl's), after a
    # resume from step 10 as a killed run's, whose first file holds steps 15 and 20 too: each
    # step must show once (the SessionLog START, training/tensorboard.h).
    phase tensorboard 60 bash -c "
      run='$thx --device cuda --log-level warn pretrain --config configs/t5/mini.yaml --set data.prepared=$prep
        --set train.steps=20 --set train.log_every=5 --set eval.every=10 --set checkpoint.every=10
        --run-dir $OUT/tb-run'
      \$run && rm $OUT/tb-run/checkpoints/step-00000020.h5 && \$run --resume &&
      python3 tests/scripts/tb_tensorboard_check.py $OUT/tb-run"
    # Which kernel scaled_dot_product_attention picks for thx's multi-head call, and the
    # relative bias's gradient through it against float64.
    phase sdpa 20 python3 scripts/sdpa_backend.py
    # The same rows on the fused kernels (where their tests passed), for their ratio to the default.
    [ "$fused_ok" = 1 ] && phase bench-train-fused 60 "$thx" --device cuda --th-path fused bench train \
      --config configs/t5/mini.yaml --precision bf16 --base --base-only --base-heads 12,48 --out "$OUT/train-fused.md"
    # A crashed CUDA test suite, again under cuda-gdb (the machine's only debugger): where it
    # stopped, and whether one OpenMP thread changes it.
    if [ -s "$OUT/cuda-crashed.txt" ]; then
      phase cuda-debug 60 bash -c '
        set -f
        ldd '"$BUILD"'/thx_tests | grep -E "gomp|stdc|torch|c10.so|hdf5_serial.so"
        for t in $(head -2 '"$OUT"'/cuda-crashed.txt); do
          echo "== $t, OMP_NUM_THREADS=1"
          OMP_NUM_THREADS=1 timeout 20 '"$BUILD"'/thx_tests --gtest_filter="$t" >/dev/null 2>&1; echo "exit $?"
          echo "== $t under cuda-gdb"
          timeout 40 cuda-gdb -q -batch -ex "set pagination off" -ex run -ex "bt 25" -ex "x/3i \$pc" \
            -ex "info threads" --args '"$BUILD"'/thx_tests --gtest_filter="$t" 2>&1 |
            grep -vE "^\[(New|Thread .* exited)" | tail -60
        done'
    fi
    # Issue 34's optional pair, only when named (GPU_PHASES="build base-pair"): T5-base in bf16,
    # multi-head and talking-heads at 12 and 48 heads, batch 32, GPU_BASE_PAIR_STEPS steps each
    # (default 300) on the carried corpus, their metrics.jsonl back for plot_curves.py;
    # talking-heads on the session's path (GPU_TH_PATH, or what the tests left: above).
    phase base-pair 300 bash -c "
      set -e
      for run in multi_head:12 talking_heads:12 multi_head:48 talking_heads:48; do
        d=$OUT/base-\${run%:*}-h\${run#*:}
        $thx --device cuda --th-path $th_path --log-level warn pretrain --config configs/t5/base.yaml \
          --set data.prepared=$prep \
          --set attention.variant=\${run%:*} --set attention.h=\${run#*:} --set train.precision=bf16 \
          --set train.batch_size=32 --set train.steps=${GPU_BASE_PAIR_STEPS:-300} --set train.log_every=10 \
          --set eval.every=100 --set eval.examples=256 --set checkpoint.every=1000000 --run-dir \$d
        rm -rf \$d/checkpoints \$d/tb
      done"
  fi
  echo "total: $((SECONDS - deadline + ${GPU_DEADLINE_S:-560})) s" >> "$summary"
  pack_out "$OUT"
  cat "$summary"
}

# pack_out DIR: everything in DIR but summary.md, in one archive, for the device tool, which brings
# back at most 8 files of 16 MiB each, 64 MiB together, and leaves the rest there. An archive of
# more than GPU_PART_BYTES (15 MiB) comes back in parts: session.tgz.00, .01, ... (on the CPU
# machine: cat session.tgz.* > session.tgz), at most four. Should four not hold it, the largest files
# are left out, one at a time, each named in the summary, rather than losing the whole archive.
pack_out() {
  local dir=$1 part=${GPU_PART_BYTES:-15728640} archive=/tmp/gpu-session-$$.tgz big
  while :; do
    if ! (cd "$dir" && tar czf "$archive" --exclude=./summary.md .); then  # (a full disk, say)
      printf '| (archive) | - | - | tar failed: the files stay as they are; at most 8 come back |\n' \
        >> "$dir/summary.md"
      return 1
    fi
    [ "$(stat -c %s "$archive")" -gt $((4 * part)) ] || break
    big=$(cd "$dir" && find . -type f -not -name summary.md -printf '%s %p\n' | sort -rn | head -n 1 | cut -d' ' -f2-)
    [ -n "$big" ] || break
    printf '| (archive) | - | - | left out, to fit the device tool: %s, %s bytes |\n' \
      "$big" "$(stat -c %s "$dir/$big")" >> "$dir/summary.md"
    rm -f "$dir/$big"
  done
  (cd "$dir" && find . -mindepth 1 -not -name summary.md -delete)
  if [ "$(stat -c %s "$archive")" -le "$part" ]; then
    mv "$archive" "$dir/session.tgz"
  else
    split -b "$part" -d -a 2 "$archive" "$dir/session.tgz." && rm -f "$archive"
    printf '| (archive) | - | - | session.tgz in %s parts: cat session.tgz.* > session.tgz |\n' \
      "$(find "$dir" -name 'session.tgz.*' | wc -l)" >> "$dir/summary.md"
  fi
}

# pack_check: pack_out on made-up files (random bytes, which gzip cannot shrink) with parts of
# 50 kB: 170 kB come back in four parts that join to the same files; 220 kB lose the largest file
# (150 kB), named in the summary, and the rest comes back in two. Prints a line per fault.
pack_check() {
  local d faults=0
  d=$(mktemp -d /tmp/gpu-pack.XXXXXX)
  for case in "100 60 10:4:" "150 60 10:2:f150"; do
    local sizes=${case%%:*} parts left
    parts=${case#*:} && parts=${parts%%:*} && left=${case##*:}
    rm -rf "$d/out" "$d/back" && mkdir -p "$d/out/sub" "$d/back"
    echo "| phase |" > "$d/out/summary.md"
    for k in $sizes; do head -c "$((k * 1000))" /dev/urandom > "$d/out/sub/f$k"; done
    (cd "$d/out" && find sub -type f -exec md5sum {} + | sort -k 2) > "$d/sums"
    GPU_PART_BYTES=50000 pack_out "$d/out"
    local got
    got=$(find "$d/out" -name 'session.tgz*' | wc -l)
    [ "$got" = "$parts" ] || { echo "pack_check: $sizes kB: $got parts, not $parts"; faults=1; }
    cat "$d"/out/session.tgz* | tar xz -C "$d/back" ||
      { echo "pack_check: $sizes kB: the parts do not join"; faults=1; }
    [ -n "$left" ] && sed -i "/ sub\/$left\$/d" "$d/sums"
    (cd "$d/back" && find sub -type f -exec md5sum {} + | sort -k 2) | cmp -s - "$d/sums" ||
      { echo "pack_check: $sizes kB: the files that came back are not those sent"; faults=1; }
    if [ -n "$left" ] && ! grep -q "left out.*sub/$left, 150000 bytes" "$d/out/summary.md"; then
      echo "pack_check: $sizes kB: the summary does not name the file left out"; faults=1
    fi
  done
  rm -rf "$d"
  return $faults
}

# settings_check DIR: a misspelt phase, a deadline that is not a number, a misspelt path, two
# paths where one is asked for and a misspelt variant are each refused by run in one line, exit
# 2, before it writes anything. Prints a line per fault.
settings_check() {
  local out=$1/refused faults=0 setting said rc
  for setting in "GPU_PHASES=build bench-train-determinstic" "GPU_DEADLINE_S=10m" "GPU_TH_PATH=gem" \
    "GPU_TH_PATH=gemm tiled" "GPU_MINI_VARIANTS=talking_head"; do
    said=$(export "${setting?}" OUT=$out; run 2>&1)  # (${..?}: shellcheck reads it as meant)
    rc=$?
    if [ "$rc" != 2 ] || [ "$(grep -c . <<< "$said")" != 1 ] || [ -e "$out" ]; then
      echo "settings_check: $setting: exit $rc, $(grep -c . <<< "$said") lines, $out $([ -e "$out" ] ||
        echo "not ")made: $said"
      faults=1
    fi
  done
  return $faults
}

# names_check THX: TH_PATHS and VARIANTS are the --th-path values and the attention variants that
# THX accepts (read from its refusals of a name it does not know). Prints a line per difference.
names_check() {
  local thx_bin=$1 said paths variants faults=0
  said=$("$thx_bin" --th-path not-a-path --help 2>&1)
  paths=$(sed -n 's/.* not in {\([^}]*\)}.*/\1/p' <<< "$said" | tr ',' '\n' | sort | xargs)
  said=$("$thx_bin" --log-level warn pretrain --config configs/t5/mini.yaml --set attention.variant=not-a-variant \
    --dump-config 2>&1)
  variants=$(sed -n 's/.*is not a variant; allowed: //p' <<< "$said" | tr -d ' ' | tr ',' '\n' | sort | xargs)
  if [ "$paths" != "$(tr ' ' '\n' <<< "$TH_PATHS" | sort | xargs)" ]; then
    echo "names_check: TH_PATHS is '$TH_PATHS'; thx's --th-path takes '$paths'"
    faults=1
  fi
  if [ "$variants" != "$(tr ' ' '\n' <<< "$VARIANTS" | sort | xargs)" ]; then
    echo "names_check: VARIANTS is '$VARIANTS'; thx's variants are '$variants'"
    faults=1
  fi
  return $faults
}

# rehearse: here, on the CPU, after the README's build (THX, default build/thx): every phase of
# run but the build and the unit suite, against this machine's build and a corpus prepared for the
# rehearsal, all in a folder of its own that is removed after. Each CUDA command is refused here in
# one line ("no CUDA device"), and the tools only a GPU machine has (ncu, cuobjdump,
# compute-sanitizer) are missing, so those phases fail with no fault of the script's. What the
# rehearsal finds is the rest: a bash error, an unbound variable, a command not found, a Python
# traceback or usage line, and a thx error other than the device's (a command line that does not
# parse, or that a check refuses before the device is asked for). Each such line is printed, with
# its phase, and the exit code is 1; 0 when none. It also checks pack_out (pack_check), run's
# refusal of a misspelt setting (settings_check) and the lists of paths and variants it checks
# settings against (names_check). About a minute (CTest:
# gpu_session_rehearsal).
rehearse() {
  local thx_bin=${THX:-build/thx}
  [ -x "$thx_bin" ] || { echo "gpu_session.sh rehearse: no thx at $thx_bin; build first (README)" >&2; exit 2; }
  ls -d /usr/share/doc/linux-doc-*/html/_sources > /dev/null 2>&1 ||
    { echo "gpu_session.sh rehearse: skipped: no kernel documentation (linux-doc-6.1; scripts/setup.sh)"; exit 77; }
  local probe
  probe=$("$thx_bin" --device cuda bench attention --heads 2 --n 8 --batch 1 --reps 1 2>&1)
  if [[ $probe != *"no CUDA device"* ]]; then
    echo "gpu_session.sh rehearse: skipped: this thx sees a GPU; there, run the session itself (run)"
    exit 77
  fi
  local dir
  dir=$(mktemp -d /tmp/gpu-rehearsal.XXXXXX)
  trap 'rm -rf "$dir"' EXIT
  BUILD=$(dirname "$thx_bin") CARRY=$dir/carry MINI_STEPS=10
  # What thx would set and then re-execute itself for (common/runtime.h), set here: the rehearsal
  # starts thx about 50 times, and the re-execution doubled each start (1.3 s, not 0.7).
  export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE} OPENBLAS_THREAD_TIMEOUT=${OPENBLAS_THREAD_TIMEOUT:-4}
  mkdir -p "$CARRY"
  : > "$CARRY/peer_t5.py"  # (never run: every row beside it is refused first)
  THX=$thx_bin prepare_corpus > "$dir/prepare.log" 2>&1 || { cat "$dir/prepare.log" >&2; exit 1; }
  local phases=" $DEFAULT_PHASES $NAMED_PHASES "
  phases=${phases/ build / } && phases=${phases/ unit-suite / }
  # (python3: Debian's, which has torch here as the GPU machine's does)
  (export PATH="/usr/bin:$PATH" OUT=$dir/out GPU_PHASES="$phases" GPU_DEADLINE_S=3600; run > "$dir/run.log" 2>&1)
  if ! { mkdir -p "$dir/logs" && cat "$dir"/out/session.tgz* 2> /dev/null | tar xz -C "$dir/logs" 2> /dev/null; }; then
    echo "rehearsal: the session stopped before its end (no session.tgz); its output's last lines:"
    tail -n 20 "$dir/run.log"
    exit 1
  fi
  local faults=0 log
  local fault="unbound variable|syntax error|command not found|bad substitution|Traceback \(most recent|^usage: "
  fault+="|thx: error: "
  for log in "$dir"/logs/*.log; do
    if grep -nE "$fault" "$log" | grep -v "no CUDA device" | sed "s|^|$(basename "$log" .log): |" | grep .; then
      faults=1
    fi
  done
  pack_check || faults=1
  settings_check "$dir" || faults=1
  names_check "$thx_bin" || faults=1
  local ran
  ran=$(grep -c '^| [a-z]' "$dir/out/summary.md")
  echo "rehearsal: $ran phases ran; $([ $faults = 0 ] && echo "no fault of the script's" || echo "faults above")"
  [ "$ran" -ge 20 ] || { echo "rehearsal: too few phases ran"; cat "$dir/out/summary.md"; exit 1; }
  exit $faults
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  rehearse) rehearse ;;
  *)
    echo "usage: scripts/gpu_session.sh prepare | run | rehearse" >&2
    exit 2
    ;;
esac
