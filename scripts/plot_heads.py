#!/usr/bin/python3
"""plot_heads.py: held-out ln(PPL) against the head count, one line per attention variant.

    /usr/bin/python3 scripts/plot_heads.py SWEEP [SWEEP ...] --out heads.png
        [--metric ln_ppl|mlm|sop] [--title TEXT] [--summary FILE]

The paper's Table 1 and Table 5 trend as a figure: for each variant and head count h of the
seeded sweeps given (their --out directories, or a results file in the same format, .jsonl;
several are pooled, e.g. a sweep of 12 and 48 heads with one of 24), the mean of the metric over the seeds, with error bars of one sample
standard deviation, against h on a log scale, each tick labelled with h and d_k. --summary
writes the points as a Markdown table (variant, h, d_k, seeds, mean, σ). A cell with one seed
has no error bar. Rows come from each sweep's results.jsonl (`thx sweep` writes it); runs of the
same name in two sweeps both count (a sweep directory given twice counts once). Bad input is one line on stderr and
exit 2. Needs Debian's python3-matplotlib.
"""
import json
import math
import os

from oneline import Parser, fail

NAMES = {"multi_head": "multi-head", "talking_heads": "talking-heads", "project_logits": "logits only",
         "project_weights": "weights only", "general_bilinear": "general bilinear",
         "dynamic_projections": "dynamic projections"}
METRICS = {"ln_ppl": "held-out ln(PPL)", "mlm": "held-out MLM accuracy (%)", "sop": "held-out SOP accuracy (%)"}


def read_rows(sweep, metric):
    path = sweep if sweep.endswith(".jsonl") else os.path.join(sweep, "results.jsonl")
    if not os.path.isfile(path):
        fail(f"{path}: not found" + ("" if path == sweep else f" (is {sweep} the --out of `thx sweep`?)") +
             (" (a directory, not a results file)" if os.path.isdir(path) else ""))
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                a = r["attention"]["encoder_self"]
                row = {"name": r["name"], "model": r.get("model", ""), "variant": a["variant"],
                       "h": int(a["h"]), "d_k": a["d_k"], "seed": r["seed"], "value": r.get(metric)}
            except (ValueError, KeyError, TypeError) as e:
                fail(f"{path}:{n}: not a results row of `thx sweep` ({type(e).__name__}: {e})")
            if row["value"] is not None and not isinstance(row["value"], (int, float)):
                fail(f"{path}:{n}: {metric} is {row['value']!r}, not a number")
            rows.append(row)
    return path, rows


def mean_sd(xs):
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, sd


def main():
    ap = Parser(description=__doc__.split("\n")[0])
    ap.add_argument("sweeps", nargs="+", metavar="sweep",
                    help="the --out directory of `thx sweep`, or a results .jsonl; several pool")
    ap.add_argument("--out", required=True, help="PNG file to write")
    ap.add_argument("--metric", default="ln_ppl", help=f"one of {', '.join(METRICS)} (default ln_ppl)")
    ap.add_argument("--title", default="", help="the figure's title (default: the sweeps' names)")
    ap.add_argument("--summary", help="also write the plotted points as a Markdown table here")
    args = ap.parse_args()
    if args.metric not in METRICS:
        fail(f"--metric {args.metric}: unknown; allowed: {', '.join(METRICS)}")
    for out in filter(None, (args.out, args.summary)):
        out_dir = os.path.dirname(os.path.abspath(out))
        if not os.path.isdir(out_dir):
            fail(f"{out}: directory {out_dir} does not exist")
    runs, models = {}, {}
    for sweep in args.sweeps:
        if not sweep.endswith(".jsonl") and not os.path.isdir(sweep):
            fail(f"{sweep}: not a directory (give the --out of `thx sweep`, or its results .jsonl)")
        path, rows = read_rows(sweep, args.metric)
        for r in rows:
            if r["value"] is None:
                continue  # a run without this metric (a T5 run has no MLM accuracy)
            runs.setdefault((os.path.realpath(sweep), r["name"]), r)  # a sweep given twice counts once
            models.setdefault(r["model"], path)
    if not runs:
        fail(f"no run of {', '.join(args.sweeps)} has {args.metric} (finished runs only; "
             f"T5 runs have ln_ppl alone)")
    if len(models) > 1:
        fail("the sweeps mix models (" + ", ".join(f"{m or '?'} in {p}" for m, p in models.items()) +
             "); plot one model at a time")
    cells = {}
    for r in runs.values():
        cells.setdefault((r["variant"], r["h"]), []).append(r)
    d_k = {}
    for (variant, h), rs in cells.items():
        d_k.setdefault(h, rs[0]["d_k"])

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    lines = []
    for variant in sorted({v for v, _ in cells}, key=lambda v: list(NAMES).index(v) if v in NAMES else 99):
        hs = sorted(h for v, h in cells if v == variant)
        points = [(h, *mean_sd([r["value"] for r in cells[(variant, h)]]), len(cells[(variant, h)])) for h in hs]
        ax.errorbar([p[0] for p in points], [p[1] for p in points], yerr=[p[2] for p in points],
                    marker="o", capsize=4, label=NAMES.get(variant, variant))
        lines += [(variant, *p) for p in points]
    hs = sorted(d_k)
    ax.set_xscale("log", base=2)
    ax.set_xticks(hs)
    ax.set_xticklabels([f"{h}\n(d_k {d_k[h]})" for h in hs])
    ax.minorticks_off()
    ax.set_xlabel("heads h")
    ax.set_ylabel(METRICS[args.metric] + ", mean ± seed σ")
    ax.set_title(args.title or " + ".join(os.path.splitext(os.path.basename(os.path.normpath(s)))[0] for s in args.sweeps))
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    if args.summary:
        with open(args.summary, "w") as f:
            f.write(f"| variant | h | d_k | seeds | {METRICS[args.metric]} mean | seed σ |\n")
            f.write("|---|---:|---:|---:|---:|---:|\n")
            for variant, h, m, sd, n in lines:
                f.write(f"| {NAMES.get(variant, variant)} | {h} | {d_k[h]} | {n} | {m:.4f} | "
                        f"{sd:.4f} |\n" if n > 1 else
                        f"| {NAMES.get(variant, variant)} | {h} | {d_k[h]} | 1 | {m:.4f} | — |\n")
    print(f"wrote {args.out}" + (f" and {args.summary}" if args.summary else ""))


main()
