#!/usr/bin/python3
"""Whether two runs of one configuration trained alike: the same run on the GPU and on the CPU, say.

    python3 scripts/compare_curves.py REFERENCE_RUN RUN --bound 0.005

Reads each run directory's metrics.jsonl (written by `thx pretrain`) and compares the training
loss at every step both logged: the largest |loss - reference loss| / reference loss must be at
most --bound. Prints one line: the steps compared, the largest relative and absolute
differences and where, and both runs' last held-out ln(PPL). Exit 0 within the bound, 1 outside
it, 2 for bad input (one line on stderr). Runs only on Python's standard library, so that the
GPU machine's python3 runs it too.

What bound to state: the two runs' differences start at the last bits of the first step's sums
and grow as training amplifies them (each step's update depends on the last), so the bound is
on the whole curve, chosen from the precision: fp32 against fp32, 0.5%; bf16 (8 bits of
mantissa: 2^-8 = 0.39% per rounding) against fp32, 1.5%.
"""
import json
import math
import os
import sys

from oneline import Parser, fail


def read(run):
    path = os.path.join(run, "metrics.jsonl")
    if not os.path.isfile(path):
        fail(f"{path}: no such file (a run directory of thx pretrain?)")
    loss, held = {}, None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            try:
                d = json.loads(line)
            except ValueError:
                fail(f"{path}:{n}: not JSON")
            if "loss" in d and "step" in d:
                loss[int(d["step"])] = float(d["loss"])
            if "ln_ppl" in d:
                held = float(d["ln_ppl"])
    if not loss:
        fail(f"{path}: no training loss records")
    return loss, held


def main():
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("reference")
    p.add_argument("run")
    p.add_argument("--bound", type=float, required=True, help="largest relative loss difference allowed")
    a = p.parse_args()
    if not a.bound > 0:
        fail(f"--bound {a.bound}: must be positive")
    ref, ref_held = read(a.reference)
    run, run_held = read(a.run)
    steps = sorted(set(ref) & set(run))
    if not steps:
        fail(f"{a.reference} and {a.run} logged no step in common")
    bad = [s for s in steps if not (math.isfinite(run[s]) and math.isfinite(ref[s]))]
    if bad:  # a diverged curve is outside any bound, not a comparison
        print(f"{a.run} vs {a.reference}: a non-finite loss at step {bad[0]}: OUTSIDE")
        return 1
    rel = max(steps, key=lambda s: abs(run[s] - ref[s]) / max(abs(ref[s]), 1e-12))
    worst_abs = max(steps, key=lambda s: abs(run[s] - ref[s]))
    r = abs(run[rel] - ref[rel]) / max(abs(ref[rel]), 1e-12)
    fmt = lambda v: "-" if v is None else f"{v:.4f}"
    ok = r <= a.bound
    print(f"{a.run} vs {a.reference}: {len(steps)} steps to {steps[-1]}, largest loss difference {100 * r:.3f}% "
          f"(step {rel}), {abs(run[worst_abs] - ref[worst_abs]):.4f} absolute (step {worst_abs}); held-out ln(PPL) "
          f"{fmt(run_held)} vs {fmt(ref_held)}; bound {100 * a.bound:.2f}%: {'within' if ok else 'OUTSIDE'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
