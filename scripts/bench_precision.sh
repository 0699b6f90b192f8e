#!/usr/bin/env bash
# bench_precision.sh: the bf16-against-fp32 benchmarks (docs/benchmarks.md) on this machine, one
# Markdown report each into $OUT (default runs/bench_precision), every ratio from one run:
#
#   1. train-mini-base.md  thx bench train at the mini size (configs/t5/mini.yaml) beside the
#                          PyTorch peer in fp32 and under CPU autocast (--bf16), and the base
#                          size (T5 12+12 layers, d_model 768, batch 8, 512/114, h = 12, 24, 48,
#                          MH and TH; the peer in bf16 at h = 12 and 48): step time, % of each
#                          precision's own matmul peak, peak RSS, a profile of each row by phase;
#   2. train-d768.md       d_model 768, 2+2 layers, batch 8, 256/64, 12 heads, with the peer;
#   3. attention.md        one attention layer, fp32 and bf16, h = 6 ... 48;
#   4. attention-avx2.md   the same with the AVX2 row kernels (THX_KERNELS=avx2), where this
#                          CPU would pick AVX-512: what the 512-bit build is worth here.
#
# About 50 minutes on 2 cores (the base fp32 steps take 15-30 s each). Run it on a quiet
# machine: the reports name the CPU and its bf16 flags; bf16 needs AMX-BF16 or AVX512-BF16.
# Usage: scripts/bench_precision.sh [PEER] (default ../shared/bench/peer_t5.py)
set -euo pipefail
cd "$(dirname "$0")/.."
THX=${THX:-build/thx}
OUT=${OUT:-runs/bench_precision}
PEER=${1:-../shared/bench/peer_t5.py}
[ -f "$PEER" ] || { echo "bench_precision: $PEER: no peer script" >&2; exit 2; }
mkdir -p "$OUT"
log() { echo "[bench_precision $(date -u +%T)] $*" >&2; }

log "1/4 mini and base, both precisions, with the peer and profiles"
"$THX" bench train --config configs/t5/mini.yaml --precision both --peer "$PEER" --steps 5 --base --profile \
  --out "$OUT/train-mini-base.md" > /dev/null
log "2/4 d_model 768, 2+2 layers"
"$THX" bench train --config configs/t5/mini.yaml --set model.d_model=768 --set model.d_ff=3072 \
  --set attention.h=12 --set data.inputs_length=256 --set data.targets_length=64 --set train.batch_size=8 \
  --precision both --peer "$PEER" --steps 5 --profile --out "$OUT/train-d768.md" > /dev/null
log "3/4 one attention layer"
"$THX" bench attention --precision both --reps 5 --out "$OUT/attention.md" > /dev/null
if grep -qw avx512f /proc/cpuinfo; then
  log "4/4 one attention layer with the AVX2 row kernels"
  THX_KERNELS=avx2 "$THX" bench attention --precision both --reps 5 --no-reference \
    --out "$OUT/attention-avx2.md" > /dev/null
fi
log "done: $OUT"
