#!/usr/bin/env bash
# bench_data_parallel.sh: thx data parallel on this machine, three ways, at the mini T5
# (configs/t5/mini.yaml) and at T5-base size (configs/t5/base.yaml): one process of 2 threads,
# 2 ranks of 1 thread under torchrun (Gloo on loopback), and 2 ranks of 1 thread with
# grad_accum 2. Prints one table row per way from the last record of each run's metrics.jsonl
# (a window that leaves out the first steps): tokens/s, s/step, and per step the gradient
# all-reduce's time, the part of it after backward (not hidden), and its megabytes.
# Then scripts/dp_projection.py projects the base model's step onto 8, 64 and 512 GPUs.
#
# Data: the quickstart's prepared kernel documentation (data/prepared/quickstart; made by
# scripts/prepare_data.sh if missing). Usage: scripts/bench_data_parallel.sh [mini|base|all]
set -euo pipefail
cd "$(dirname "$0")/.."
THX=${THX:-build/thx}
OUT=${OUT:-runs/bench_dp}
WHICH=${1:-all}
PREP=data/prepared/quickstart
export OMP_WAIT_POLICY=PASSIVE OPENBLAS_THREAD_TIMEOUT=4

[ -f "$PREP/manifest.json" ] || THX="$THX" scripts/prepare_data.sh quickstart

# size -> config, steps, log_every, batch
declare -A CONFIG=([mini]=configs/t5/mini.yaml [base]=configs/t5/base.yaml)
declare -A STEPS=([mini]=40 [base]=4)
declare -A BATCH=([mini]=16 [base]=4)

row() {  # size way run_dir
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
size, way, run = sys.argv[1:4]
recs = [json.loads(l) for l in open(run + "/metrics.jsonl") if '"loss"' in l]
r = recs[-1]
ar = r.get("allreduce_s")
cell = lambda v, f: (f % v) if v is not None else "-"
print(f"| {size} | {way} | {r['tokens_per_s']:.0f} | {r['step_time_s']:.3f} | "
      f"{cell(r.get('backward_s'), '%.3f')} | {cell(ar, '%.3f')} | {cell(r.get('allreduce_exposed_s'), '%.3f')} | "
      f"{cell(100 * ar / r['step_time_s'] if ar is not None else None, '%.1f%%')} | "
      f"{cell(r.get('allreduce_mb'), '%.1f')} |")
PY
}

echo "| size | way | tokens/s | s/step | backward s | all-reduce s | after backward s | all-reduce / step | MB / step |"
echo "|---|---|--:|--:|--:|--:|--:|--:|--:|"
for size in mini base; do
  [ "$WHICH" = all ] || [ "$WHICH" = "$size" ] || continue
  steps=${STEPS[$size]}
  common=(pretrain --config "${CONFIG[$size]}" --set data.prepared="$PREP" --set train.steps="$steps"
          --set train.log_every=$((steps / 2)) --set train.batch_size="${BATCH[$size]}" --set eval.examples=8
          --set eval.batch_size=8 --set eval.every=100000 --set checkpoint.every=100000 --set checkpoint.keep=1)
  rm -rf "${OUT:?}/$size"
  "$THX" --log-level warn --threads 2 "${common[@]}" --run-dir "$OUT/$size/1x2" > /dev/null
  row "$size" "1 process x 2 threads" "$OUT/$size/1x2"
  for accum in 1 2; do
    torchrun --standalone --nproc_per_node 2 --redirects 2 --tee 2 --no_python "$THX" --log-level warn --threads 1 \
      "${common[@]}" --set train.grad_accum=$accum --run-dir "$OUT/$size/2x1-accum$accum" > /dev/null 2>&1
    row "$size" "2 ranks x 1 thread, grad_accum $accum" "$OUT/$size/2x1-accum$accum"
  done
done
