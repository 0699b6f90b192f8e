#!/usr/bin/python3
"""dp_projection.py: project thx's data-parallel T5-base step onto 8, 64 and 512 GPUs on NCCL.

Inputs (measured here): the run directory of a T5-base data-parallel run written by
scripts/bench_data_parallel.sh (runs/bench_dp/base/2x1-accum1): the bytes its gradient
all-reduce moves per step (metrics.jsonl) and, from its checkpoint, the parameter count and
the size of Adafactor's state. Everything else is a stated assumption, printed with the tables.

Usage: /usr/bin/python3 scripts/dp_projection.py [RUN_DIR]
"""
import glob
import math
import json
import sys

import h5py

run = sys.argv[1] if len(sys.argv) > 1 else "runs/bench_dp/base/2x1-accum1"
rec = [json.loads(l) for l in open(run + "/metrics.jsonl") if '"allreduce_mb"' in l][-1]
grad_bytes = rec["allreduce_mb"] * 1e6
ckpt = sorted(glob.glob(run + "/checkpoints/step-*.h5"))[-1]
params = state = 0
with h5py.File(ckpt, "r") as f:
    def count(group):
        total = [0, 0]
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                total[0] += obj.size
                total[1] += obj.size * obj.dtype.itemsize
        f[group].visititems(visit)
        return total
    params, param_bytes = count("params")
    _, state = count("optimizer")

# ---- assumptions (sources in docs/benchmarks.md) ----------------------------------------
PEAK = 989e12          # H100 SXM dense BF16 tensor-core peak, FLOP/s (NVIDIA H100 datasheet)
MFU = 0.40             # assumed fraction of peak a T5-base step reaches on one GPU
NVLINK = 450e9         # H100 NVLink 4: 900 GB/s bidirectional, 450 GB/s each way, per GPU
IB = 8 * 50e9          # 8 x 400 Gb/s InfiniBand NDR per 8-GPU node (one NIC per GPU, as DGX
                       # H100): NCCL's rings cross nodes on all 8 rails, 400 GB/s per node
ALPHA_NVLINK, ALPHA_IB = 2e-6, 5e-6   # assumed latency of one step of a collective
GPUS_PER_NODE = 8
TOKENS = 512 + 114     # inputs + targets per example (the paper's T5 runs)
BWD = 2.0 / 3.0        # backward's share of a step's FLOPs (2x the forward)

# Step FLOPs of an encoder-decoder: encoder tokens meet the encoder's half of the weights,
# decoder tokens the decoder's half; 6 FLOPs per weight per token (forward 2, backward 4).
def step_flops(examples):
    return 6 * (params / 2) * (512 + 114) * examples

buckets = rec["allreduce_buckets"]

# Ring all-reduce moves 2(N-1)/N of the bytes through the slowest link; the latency is paid per
# bucket, and taken as log-depth (NCCL's tree algorithm at scale), not the ring's 2(N-1) steps.
def allreduce_s(n):
    bw, alpha = (NVLINK, ALPHA_NVLINK) if n <= GPUS_PER_NODE else (IB, ALPHA_IB)
    return 2 * (n - 1) / n * grad_bytes / bw + buckets * 2 * math.log2(n) * alpha

def row(n, global_batch):
    per_gpu = global_batch / n
    compute = step_flops(global_batch) / n / (PEAK * MFU)
    comm = allreduce_s(n)
    serial = compute + comm                       # no overlap
    hidden = compute + max(0.0, comm - BWD * compute)  # all of it under backward when it fits
    return (f"| {n} | {global_batch} | {per_gpu:g} | {compute * 1e3:.1f} | {comm * 1e3:.1f} | "
            f"{serial * 1e3:.1f} ({compute / serial:.0%}) | {hidden * 1e3:.1f} ({compute / hidden:.0%}) |")

print(f"T5-base ({buckets:.0f} buckets per step): {params / 1e6:.1f} M parameters ({param_bytes / 1e6:.0f} MB fp32); gradient all-reduce "
      f"{grad_bytes / 1e6:.0f} MB per step (measured); Adafactor state {state / 1e6:.2f} MB "
      f"({state / param_bytes:.2%} of the parameters' bytes; AdamW's would be {2 * param_bytes / 1e6:.0f} MB)")
print()
head = ("| GPUs | global batch | per GPU | compute ms | all-reduce ms | step ms, no overlap (efficiency) | "
        "step ms, overlapped with backward (efficiency) |\n|--:|--:|--:|--:|--:|--:|--:|")
print("Strong scaling, the paper's batch of 128 (512 GPUs would hold a quarter example each: not possible):")
print(head)
for n in (8, 64):
    print(row(n, 128))
print()
print("Weak scaling, 16 examples per GPU:")
print(head)
for n in (8, 64, 512):
    print(row(n, 16 * n))
print()
mem = 80e9 * 0.5  # half of an 80 GB H100 for weights, gradients and optimizer state
per_param_ada = 8 + state / params   # fp32 weights + fp32 gradients + Adafactor's state
print(f"Memory per parameter: fp32 weights 4 B + gradients 4 B + Adafactor {state / params:.3f} B = "
      f"{per_param_ada:.2f} B; with AdamW 16 B. Half of an 80 GB GPU holds {mem / per_param_ada / 1e9:.1f} B "
      f"parameters with Adafactor, {mem / 16 / 1e9:.1f} B with AdamW.")
