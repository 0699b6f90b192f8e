#!/usr/bin/python3
"""Training loss and held-out ln(PPL) curves of every run of a sweep, from their metrics.

    /usr/bin/python3 scripts/plot_curves.py runs/table1-mini --out curves.png [--runs REGEX]
    /usr/bin/python3 scripts/plot_curves.py runs/a runs/b --out both.png   # overlaid
    /usr/bin/python3 scripts/plot_curves.py runs/my-run --out run.png      # one run directory

Reads <sweep>/<run>/metrics.jsonl (written by `thx pretrain`), or a run directory's own. One colour per configuration
(the run name without its seed), one line per seed; with several sweeps (the fp32 and the bf16
runs of one grid, say), one line style per sweep, named in the legend. --runs keeps the runs
whose names match (a Python regular expression, e.g. '^h12-' for part of a sweep still
running). Bad arguments: one line on stderr, exit 2. Needs Debian's python3-matplotlib.
"""
import json
import os
import re
import sys

from oneline import Parser, fail

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_metrics(path):
    train, held = [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            try:
                j = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill
            if "ln_ppl" in j:
                held.append((j["step"], j["ln_ppl"]))
            elif "loss" in j:
                train.append((j["step"], j["loss"]))
    return train, held


def main():
    ap = Parser(description=__doc__.split("\n")[0])
    ap.add_argument("sweeps", nargs="+", metavar="sweep",
                    help="sweep directory (runs/<name>), or one run's directory; several overlay")
    ap.add_argument("--out", required=True, help="PNG file to write")
    ap.add_argument("--runs", help="only the runs whose names match this regular expression")
    args = ap.parse_args()
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir):
        fail(f"--out {args.out}: directory {out_dir} does not exist")
    pattern = None
    if args.runs:
        try:
            pattern = re.compile(args.runs)
        except re.error as e:
            fail(f"--runs {args.runs}: not a regular expression ({e})")
    runs = []  # (sweep as given, run name, its metrics.jsonl)
    for sweep in args.sweeps:
        if not os.path.isdir(sweep):
            fail(f"{sweep}: no such sweep directory")
        if os.path.isfile(os.path.join(sweep, "metrics.jsonl")):  # a run directory itself
            runs.append((sweep, os.path.basename(os.path.normpath(sweep)), os.path.join(sweep, "metrics.jsonl")))
            continue
        mine = sorted(d for d in os.listdir(sweep) if os.path.isfile(os.path.join(sweep, d, "metrics.jsonl")))
        if pattern:
            mine = [r for r in mine if pattern.search(r)]
        if not mine:
            fail(f"{sweep}: no run" + (f" matching --runs {args.runs}" if args.runs else "") + " has a metrics.jsonl yet")
        runs += [(sweep, r, os.path.join(sweep, r, "metrics.jsonl")) for r in mine]
    names = {sw: os.path.basename(os.path.normpath(sw)) for sw in args.sweeps}
    styles = {sw: ["-", "--", ":", "-."][i % 4] for i, sw in enumerate(args.sweeps)}
    several = len(args.sweeps) > 1
    groups = sorted({re.sub(r"-s\d+$", "", r) for _, r, _ in runs})
    colours = {g: plt.cm.tab10(i % 10) if len(groups) <= 10 else plt.cm.tab20(i % 20)
               for i, g in enumerate(groups)}
    fig, (ax_loss, ax_ppl) = plt.subplots(1, 2, figsize=(13, 5))
    labelled = set()
    for sweep, r, metrics in runs:
        train, held = read_metrics(metrics)
        g = re.sub(r"-s\d+$", "", r)
        key = (sweep, g) if several else g
        label = (f"{names[sweep]}: {g}" if several else g) if key not in labelled else None
        labelled.add(key)
        if train:
            ax_loss.plot(*zip(*train), color=colours[g], ls=styles[sweep], lw=1, alpha=0.8, label=label)
        if held:
            ax_ppl.plot(*zip(*held), color=colours[g], ls=styles[sweep], lw=1.2, marker="o", ms=3, alpha=0.8)
    ax_loss.set(title="training loss (cross-entropy + z-loss)", xlabel="step", ylabel="loss")
    ax_ppl.set(title="held-out ln(PPL)", xlabel="step", ylabel="ln(PPL)")
    for ax in (ax_loss, ax_ppl):
        ax.grid(alpha=0.3)
    ax_loss.legend(fontsize=7, ncol=2)
    fig.suptitle(f"{' vs '.join(names[sw] for sw in args.sweeps)}: {len(runs)} runs")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out} ({len(runs)} runs" + (f", {len(args.sweeps)} sweeps)" if several else ")"))


if __name__ == "__main__":
    main()
