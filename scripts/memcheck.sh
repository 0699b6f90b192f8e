#!/usr/bin/env bash
# memcheck.sh: thx's CPU path under Valgrind's memcheck, the field's tool for reads of memory that
# nothing wrote (on whose values a branch, a conversion or a write to a file depends), reads and
# writes outside a block, and frees of the wrong thing. The test suite has the quick cousins
# (PerturbedMalloc.*: the binary under glibc's MALLOC_PERTURB_; *.ReadNoMemoryNothingWrote:
# tensors in NaN); this runs the real thing, some 200 times slower, so it is not part of the suite.
#
#   scripts/setup.sh --memcheck && scripts/memcheck.sh      (about 10 minutes; one core)
#
# Under memcheck: `thx prepare` on 300 KB of the kernel's documentation; a mini T5 with
# talking-heads (2 + 2 layers, d_model 128, batch 4, dropout 0.1) for 2 steps with a held-out
# evaluation and a checkpoint; and its resume for a third step from that checkpoint. The
# SentencePiece model is trained first, outside memcheck (another project's trainer). Each run's
# report is in $OUT (default runs/memcheck): NAME.log, and the summary in summary.md. Exit 1 if
# memcheck reported anything in any run (scripts/memcheck.supp lists what is not thx's).
# Valgrind's CPU has no AVX-512: LibTorch and thx's own kernels take their AVX2 forms under it.
set -euo pipefail
cd "$(dirname "$0")/.."
THX=${THX:-build/thx}
OUT=${OUT:-runs/memcheck}
[ $# -eq 0 ] || { echo "memcheck.sh: takes no arguments (THX= and OUT= in the environment), not '$*'" >&2; exit 2; }
# $OUT is made anew: refuse one that holds anything but an earlier memcheck's report.
if [ -e "$OUT" ] && [ -n "$(ls -A "$OUT" 2>/dev/null)" ] && [ ! -f "$OUT/summary.md" ]; then
  echo "memcheck.sh: OUT=$OUT holds other files than an earlier memcheck's; name an empty or new folder" >&2
  exit 2
fi
command -v valgrind >/dev/null || { echo "memcheck.sh: valgrind not found; run scripts/setup.sh --memcheck" >&2; exit 2; }
[ -x "$THX" ] || { echo "memcheck.sh: $THX not found; build thx first (README)" >&2; exit 2; }
docs=$(ls -d /usr/share/doc/linux-doc-*/html/_sources 2>/dev/null | head -n 1)
[ -n "$docs" ] || { echo "memcheck.sh: the kernel's documentation (linux-doc) is missing; run scripts/setup.sh" >&2; exit 2; }
rm -rf "$OUT" && mkdir -p "$OUT"
# thx re-executes itself to set its thread pools' environment unless it is set, and Valgrind
# cannot follow that exec: set it here.
export OMP_WAIT_POLICY=PASSIVE OPENBLAS_THREAD_TIMEOUT=4

printf '| run | seconds | errors | exit |\n|---|---:|---:|---:|\n' > "$OUT/summary.md"  # (first: marks $OUT as ours)
"$THX" --log-level warn spm-train --input "$docs/admin-guide" --format text_files --pieces 8000 --out "$OUT/spm"

failed=0
# check NAME ARGS...: thx ARGS under memcheck, its report in $OUT/NAME.log.
check() {
  local name=$1 t0=$SECONDS rc=0
  shift
  valgrind --error-exitcode=99 --num-callers=30 --suppressions=scripts/memcheck.supp \
    --log-file="$OUT/$name.log" "$THX" --threads 1 --device cpu --log-level warn "$@" > "$OUT/$name.out" 2>&1 || rc=$?
  local errors
  errors=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' "$OUT/$name.log" | tail -n 1)
  printf '| %s | %s | %s | %s |\n' "$name" "$((SECONDS - t0))" "${errors:-?}" "$rc" >> "$OUT/summary.md"
  echo "[memcheck] $name: ${errors:-?} errors, exit $rc, $((SECONDS - t0)) s"
  [ "$rc" -eq 0 ] && [ "${errors:-1}" -eq 0 ] || failed=1
}

check prepare prepare --input "$docs/admin-guide/mm" --format text_files --tokenizer "$OUT/spm.model" \
  --heldout-fraction 0.1 --out "$OUT/prepared"
mini="--config configs/t5/mini.yaml --set data.prepared=$OUT/prepared --set attention.variant=talking_heads"
mini+=" --set model.dropout=0.1 --set train.batch_size=4 --set checkpoint.every=2 --set eval.every=2"
mini+=" --set eval.examples=16 --run-dir $OUT/run"
# shellcheck disable=SC2086
check pretrain pretrain $mini --set train.steps=2
# shellcheck disable=SC2086
check resume pretrain $mini --set train.steps=3 --resume --allow-config-change train.steps
cat "$OUT/summary.md"
exit $failed
