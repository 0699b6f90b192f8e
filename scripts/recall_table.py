#!/usr/bin/python3
"""recall_table.py: the associative-recall sweep (configs/mini/recall.yaml) as tables and a plot.

    /usr/bin/python3 scripts/recall_table.py [SWEEP_DIR ...] [PLOT.png] [--variants V,V,...]

SWEEP_DIR (default runs/recall-mini) is the --out of `thx sweep`: its results.jsonl gives each
run's final held-out recall accuracy, and each run's metrics.jsonl its held-out curve (one
evaluation every eval.every steps). Several sweeps of the same task and budget (say, one at
multiplier 1 and one at 0.1 and 10) make one table; sweeps that differ in the task, d_model or
steps are refused. --variants keeps only those attention variants. Printed, in Markdown:
  1. final accuracy, h x variant, mean +- seed sigma (sample standard deviation) over seeds;
  2. the first evaluated step at which held-out accuracy reached 90%, per run ("-": never);
  3. for the variants with P_l or P_w, how far they moved from their initialization
     (||P - P_0|| / ||P_0||, mean over layers) and the last step's update relative to them.
PLOT.png (default SWEEP_DIR/recall.png): final accuracy against d_k, one line per variant,
seed sigma as error bars, chance and the answer-with-some-value plateau marked.
Runs with optimizer.mixing_lr_multiplier other than 1 (read from each run's run.yaml) are
columns and lines of their own ("talking-heads, P lr x10").
"""
import json
import math
import os
import re
import sys

from oneline import Parser, fail

SOLVED = 0.90
ORDER = ["multi_head", "project_logits", "project_weights", "talking_heads"]
NAMES = {"multi_head": "multi-head", "project_logits": "logits only",
         "project_weights": "weights only", "talking_heads": "talking-heads"}

parser = Parser(description="the associative-recall sweeps as tables and a plot")
parser.add_argument("paths", nargs="*", help="sweep directories, then optionally PLOT.png")
parser.add_argument("--variants", help="comma-separated attention variants to keep (default: all)")
args = parser.parse_args()
dirs = [p for p in args.paths if not p.endswith(".png")] or ["runs/recall-mini"]
plots = [p for p in args.paths if p.endswith(".png")]
if len(plots) > 1:
    fail(f"one plot file, not {len(plots)}: {', '.join(plots)}")
plot = plots[0] if plots else os.path.join(dirs[0], "recall.png")
keep = set(args.variants.split(",")) if args.variants else None
if keep and not keep <= set(ORDER):
    fail(f"--variants: {', '.join(sorted(keep - set(ORDER)))} unknown; allowed: {', '.join(ORDER)}")

runs = []
for out in dirs:
    path = os.path.join(out, "results.jsonl")
    if not os.path.exists(path):
        fail(f"{path}: not found (is {out} the --out of a finished `thx sweep`?)")
    mine = [dict(json.loads(l), _dir=out) for l in open(path) if l.strip()]
    if not mine:
        fail(f"{path}: no finished runs")
    runs += [r for r in mine if keep is None or r["attention"]["encoder_self"]["variant"] in keep]
if not runs:
    fail(f"no runs of {args.variants} in {', '.join(dirs)}")


def run_yaml(r):
    return open(os.path.join(r["_dir"], r["name"], "run.yaml")).read()


def setting_of(r):
    """What must agree for runs to share a table: the task, the width and the budget."""
    recall = run_yaml(r).split("recall:")[1]
    task = {k: int(re.search(rf"^\s+{k}:\s*(\d+)", recall, re.M).group(1)) for k in ("vocab_size", "pairs")}
    return task["vocab_size"], task["pairs"], r["d_model"], r["steps"]


settings = {}
for r in runs:
    settings.setdefault(setting_of(r), r["_dir"])
if len(settings) > 1:
    fail("these sweeps differ in (vocab_size, pairs, d_model, steps): " +
             "; ".join(f"{d}: {s}" for s, d in settings.items()))


def attn(r):
    return r["attention"]["encoder_self"]


def multiplier(r):
    """optimizer.mixing_lr_multiplier of the run (1 when its run.yaml predates the key)."""
    m = re.search(r"^\s*mixing_lr_multiplier:\s*(\S+)", run_yaml(r), re.M)
    return float(m.group(1)) if m else 1.0


def label(col):
    v, mult = col
    return NAMES[v] + ("" if mult == 1 else ", P frozen" if mult == 0 else f", P lr ×{mult:g}")


def curve(r):
    """[(step, accuracy)] of the run's held-out evaluations."""
    pts = []
    for line in open(os.path.join(r["_dir"], r["name"], "metrics.jsonl")):
        m = json.loads(line)
        if "mlm_accuracy" in m:
            pts.append((m["step"], m["mlm_accuracy"]))
    return pts


def mean_sd(xs):
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else float("nan")
    return m, sd


cells, first, moved = {}, {}, {}
for r in runs:
    a = attn(r)
    key = ((a["variant"], multiplier(r)), a["h"])
    cells.setdefault(key, []).append(r["mlm"] / 100)
    pts = curve(r)
    first.setdefault(key, []).append(next((s for s, acc in pts if acc >= SOLVED), None))
    for k in ("P_l_drift", "P_w_drift", "P_l_update", "P_w_update"):
        if k in r:
            moved.setdefault(key, {}).setdefault(k, []).append(r[k])

variants = sorted({k[0] for k in cells}, key=lambda c: (ORDER.index(c[0]), c[1]))
hs = sorted({k[1] for k in cells})
d_model = runs[0]["d_model"]
seeds = sorted({r["seed"] for r in runs})
vocab_size, pairs, _, _ = next(iter(settings))
n_values = vocab_size - 2 - (vocab_size - 2) // 2  # data/recall.h
chance = 1 / n_values
some_value = (1 + (pairs - 1) / n_values) / pairs  # a uniform pick among the example's values
steps = runs[0]["steps"]

print(f"### Held-out recall accuracy after {steps} steps, mean ± seed σ (seeds {seeds}; {pairs} pairs, chance {100 * chance:.1f}%)\n")
print("| h | d_k | " + " | ".join(label(v) for v in variants) + " |")
print("|---:|---:|" + "---:|" * len(variants))
for h in hs:
    row = []
    for v in variants:
        xs = cells.get((v, h))
        if not xs:
            row.append("")
            continue
        m, sd = mean_sd(xs)
        row.append(f"{100 * m:.1f} ± {100 * sd:.1f}" + (f" (n={len(xs)})" if len(xs) != len(seeds) else ""))
    print(f"| {h} | {d_model // h} | " + " | ".join(row) + " |")

print(f"\n### First evaluated step with held-out accuracy ≥ {SOLVED:.0%}, per seed (-: not within {steps})\n")
print("| h | " + " | ".join(label(v) for v in variants) + " |")
print("|---:|" + "---|" * len(variants))
for h in hs:
    row = [" ".join("-" if s is None else str(s) for s in first.get((v, h), [])) for v in variants]
    print(f"| {h} | " + " | ".join(row) + " |")

if moved:
    print("\n### How far P_l and P_w moved: ||P - P_0|| / ||P_0|| at the end, and the last update / ||P||, mean over seeds\n")
    print("| variant | h | P_l drift | P_w drift | P_l update | P_w update |")
    print("|---|---:|---:|---:|---:|---:|")
    for v in variants:
        for h in hs:
            m = moved.get((v, h))
            if not m:
                continue
            f = lambda k: f"{mean_sd(m[k])[0]:.3g}" if k in m else ""
            print(f"| {label(v)} | {h} | {f('P_l_drift')} | {f('P_w_drift')} | {f('P_l_update')} | {f('P_w_update')} |")

import matplotlib  # noqa: E402  (only the plot needs it)
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(6, 4))
for v in variants:
    pts = [(d_model // h, *mean_sd(cells[(v, h)])) for h in hs if (v, h) in cells]
    ax.errorbar([p[0] for p in pts], [100 * p[1] for p in pts], yerr=[100 * (p[2] if p[2] == p[2] else 0) for p in pts],
                marker="o", capsize=3, label=label(v))
ax.axhline(100 * chance, color="grey", ls=":", lw=1, label="chance")
ax.axhline(100 * some_value, color="grey", ls="--", lw=1, label="a random value of the example")
ax.set_xscale("log", base=2)
ax.set_xlabel("d_k = d_model / h (h = " + ", ".join(str(h) for h in reversed(hs)) + ")")
ax.set_ylabel(f"held-out recall accuracy after {steps} steps (%)")
ax.set_ylim(0, 102)
ax.legend(fontsize=8)
ax.set_title(f"MQAR, {pairs} pairs of {n_values} values, {runs[0]['model']} d_model {d_model}, {len(seeds)} seeds")
fig.tight_layout()
fig.savefig(plot, dpi=120)
print(f"\n(plot: {plot})")
