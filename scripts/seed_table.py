#!/usr/bin/python3
"""seed_table.py: two attention variants of a seeded sweep, head count by head count, in seed σ.

    /usr/bin/python3 scripts/seed_table.py SWEEP_DIR [--base multi_head] [--vs talking_heads] [--by-step]

SWEEP_DIR is the --out of `thx sweep` (say runs/table5-mini-relative-seeds). Its results.jsonl
gives each run's held-out MLM ln(PPL), MLM accuracy and SOP accuracy; each run's
finetune/**/<task>.json (written by `thx finetune`, as `thx table` reads them) its dev scores.
For every head count that has runs of both variants it prints, in Markdown:
  1. mean ± seed σ (sample standard deviation) of each metric for both variants, the difference
     (vs − base), and that difference in units of sqrt(σ_base² + σ_vs²) (as `thx claims`
     measures margins), signed so that positive means `vs` is better (ln(PPL) lower, scores
     higher);
  2. every seed's value.
A metric is left out for a head count unless every run there has it. With --by-step it prints
instead how the held-out ln(PPL) gap grew during training: from each run's metrics.jsonl (its
evaluations, every eval.every steps), the difference and its size in σ at every step that all
runs of a head count evaluated, one column per head count. Bad input is one line on stderr and
exit 2.
"""
import glob
import json
import math
import os
import sys

from oneline import Parser, fail

NAMES = {"multi_head": "multi-head", "talking_heads": "talking-heads", "project_logits": "logits only",
         "project_weights": "weights only"}
SHORT = {"multi_head": "MH", "talking_heads": "TH", "project_logits": "PL", "project_weights": "PW"}
# (label, how to read it from a run, decimals, whether lower is better)
METRICS = [("held-out MLM ln(PPL)", lambda r: r.get("ln_ppl"), 3, True),
           ("MLM accuracy (%)", lambda r: r.get("mlm"), 2, False),
           ("SOP accuracy (%)", lambda r: r.get("sop"), 2, False)]
MINUS = "\u2212"


def num(x, decimals, signed=False):
    s = f"{x:+.{decimals}f}" if signed else f"{x:.{decimals}f}"
    return s.replace("-", MINUS)


def mean_pm(m, sd, decimals):
    """mean ± σ; one seed has no σ: its value alone."""
    return num(m, decimals) if math.isnan(sd) else f"{num(m, decimals)} ± {num(sd, decimals)}"


def mean_sd(xs):
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else float("nan")
    return m, sd


def eval_curve(sweep, run):
    """{step: held-out ln(PPL)} from a run's metrics.jsonl: its evaluation lines."""
    path = os.path.join(sweep, run["name"], "metrics.jsonl")
    if not os.path.isfile(path):
        fail(f"{path}: not found (--by-step reads each run's evaluations)")
    curve = {}
    for n, line in enumerate(open(path), 1):
        try:
            row = json.loads(line) if line.strip() else {}
        except ValueError as e:
            fail(f"{path}:{n}: not JSON ({e})")
        if isinstance(row, dict) and isinstance(row.get("ln_ppl"), (int, float)) and "step" in row:
            curve[row["step"]] = row["ln_ppl"]
    return curve


def print_by_step(sweep, runs, heads, base, vs):
    """One row per evaluated step, one column per head count: vs − base and its size in σ."""
    columns = []
    for h in heads:
        group = {var: [eval_curve(sweep, r) for r in runs if r["_h"] == h and r["_variant"] == var]
                 for var in (base, vs)}
        steps = set.intersection(*(set(c) for cs in group.values() for c in cs))
        d_k = next(r["_d_k"] for r in runs if r["_h"] == h)
        columns.append((f"{h} heads (d_k {d_k})", group, steps))
    steps = sorted(set.union(*(s for _, _, s in columns)))
    if not steps:
        fail(f"{sweep}: no step was evaluated by every run of a head count")
    print(f"#### Held-out ln(PPL), {SHORT[vs]} {MINUS} {SHORT[base]} by step (in σ; {SHORT[vs]} better > 0)\n")
    print("| step | " + " | ".join(name for name, _, _ in columns) + " |")
    print("|---:|" + "---:|" * len(columns))
    for step in steps:
        cells = []
        for _, group, have in columns:
            if step not in have:
                cells.append("")
                continue
            (mb, sb), (mv, sv) = (mean_sd([c[step] for c in group[var]]) for var in (base, vs))
            sigma = math.sqrt(sb ** 2 + sv ** 2)
            size = num((mb - mv) / sigma, 1) + "σ" if sigma > 0 else "—"
            cells.append(f"{num(mv - mb, 3, signed=True)} ({size})")
        print(f"| {step} | " + " | ".join(cells) + " |")


parser = Parser(description="two variants of a seeded sweep, in seed sigma")
parser.add_argument("sweep", help="the --out directory of `thx sweep`")
parser.add_argument("--base", default="multi_head", help="the variant compared against (default multi_head)")
parser.add_argument("--vs", default="talking_heads", help="the variant compared (default talking_heads)")
parser.add_argument("--by-step", action="store_true",
                    help="the held-out ln(PPL) difference at every evaluated step, head count by head count")
args = parser.parse_args()
for v in (args.base, args.vs):
    if v not in NAMES:
        fail(f"unknown variant {v}; allowed: {', '.join(NAMES)}")
path = os.path.join(args.sweep, "results.jsonl")
if not os.path.exists(path):
    fail(f"{path}: not found (is {args.sweep} the --out of `thx sweep`?)")
runs = []
for n, line in enumerate(open(path), 1):
    if not line.strip():
        continue
    try:
        r = json.loads(line)
        r["_variant"], r["_h"] = r["attention"]["encoder_self"]["variant"], r["attention"]["encoder_self"]["h"]
        r["_d_k"], r["_seed"] = r["attention"]["encoder_self"]["d_k"], r["seed"]
    except (ValueError, KeyError, TypeError) as e:
        fail(f"{path}:{n}: not a results row of `thx sweep` ({type(e).__name__}: {e})")
    runs.append(r)

# Downstream dev scores: each task's file under <run>/finetune, its headline metric.
tasks = {}
for r in runs:
    r["_tasks"] = {}
    for f in sorted(glob.glob(os.path.join(args.sweep, r["name"], "finetune", "**", "*.json"), recursive=True)):
        task = os.path.splitext(os.path.basename(f))[0]
        try:
            data = json.load(open(f))
        except ValueError as e:
            fail(f"{f}: not JSON ({e})")
        scores = data.get("metrics") if isinstance(data, dict) else None
        # A fine-tuning still running has only a best-so-far ("finished": false): no score yet.
        if isinstance(scores, dict) and len(scores) == 1 and data.get("finished", True) is not False:
            (name, value), = scores.items()
            r["_tasks"][task] = value
            tasks[task] = name
# A T5 sweep's runs have no MLM accuracy: their ln(PPL) is span corruption's, not MLM's.
if not any(r.get("mlm") is not None for r in runs):
    METRICS = [("held-out ln(PPL) (span corruption)", lambda r: r.get("ln_ppl"), 3, True)]
metrics = METRICS + [(f"{t} dev {name}", (lambda t: lambda r: r["_tasks"].get(t))(t), 2, False)
                     for t, name in sorted(tasks.items())]

heads = sorted({r["_h"] for r in runs if r["_variant"] == args.base} & {r["_h"] for r in runs if r["_variant"] == args.vs})
if not heads:
    fail(f"{path}: no head count has runs of both {args.base} and {args.vs}")
if args.by_step:
    print_by_step(args.sweep, runs, heads, args.base, args.vs)
    sys.exit(0)
vs, base = SHORT[args.vs], SHORT[args.base]
for h in heads:
    group = {var: sorted((r for r in runs if r["_h"] == h and r["_variant"] == var), key=lambda r: r["_seed"])
             for var in (args.base, args.vs)}
    seeds = sorted({r["_seed"] for rs in group.values() for r in rs})
    d_k = group[args.base][0]["_d_k"]
    have = {var: ", ".join(str(r["_seed"]) for r in rs) for var, rs in group.items()}
    which = (f"seeds {have[args.base]}" if have[args.base] == have[args.vs] else
             f"{NAMES[args.base]} seeds {have[args.base]}, {NAMES[args.vs]} seeds {have[args.vs]}")
    print(f"#### {h} heads (d_k {d_k}), {which}\n")
    print(f"| | {NAMES[args.base]} | {NAMES[args.vs]} | {vs} {MINUS} {base} | in σ ({vs} better > 0) |")
    print("|---|---:|---:|---:|---:|")
    per_seed = []
    for label, get, dec, lower in metrics:
        values = {var: [get(r) for r in rs] for var, rs in group.items()}
        if any(x is None for xs in values.values() for x in xs):
            continue
        (mb, sb), (mv, sv) = mean_sd(values[args.base]), mean_sd(values[args.vs])
        diff = mv - mb
        sigma = math.sqrt(sb ** 2 + sv ** 2)
        better = -diff if lower else diff
        in_sigma = num(better / sigma, 1) if sigma > 0 else "—"
        print(f"| {label} | {mean_pm(mb, sb, dec)} | {mean_pm(mv, sv, dec)} | "
              f"{num(diff, dec, signed=True)} | {in_sigma} |")
        for var in (args.base, args.vs):
            by_seed = {r["_seed"]: num(x, dec) for r, x in zip(group[var], values[var])}
            per_seed.append((f"{label}, {NAMES[var]}", [by_seed.get(s, "") for s in seeds]))
    print(f"\nPer seed ({', '.join(str(s) for s in seeds)}):\n")
    print("| | " + " | ".join(f"seed {s}" for s in seeds) + " |")
    print("|---|" + "---:|" * len(seeds))
    for label, xs in per_seed:
        print(f"| {label} | " + " | ".join(xs) + " |")
    print()
