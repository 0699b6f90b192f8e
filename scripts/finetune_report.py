#!/usr/bin/python3
"""Markdown table of fine-tuning results: one row per task, one column per model directory.

    scripts/finetune_report.py DIR_A DIR_B [...]

Each DIR holds `thx finetune` outputs (<task>.json, at any depth). A task's cell is its best
evaluation (the reported number); with two directories a last column gives B - A of the mean
of the task's metrics (SQuAD: F1), the number each run selected its best evaluation by.
"""
import json
import os
import sys

ORDER = ["sst2", "rte", "mrpc", "cola", "stsb", "squad11", "squad20", "race", "mnli"]
SHOWN = {"squad11": ["exact_match", "f1"], "squad20": ["exact_match", "f1"]}


def results(d):
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            if not f.endswith(".json"):
                continue
            try:
                j = json.load(open(os.path.join(root, f)))
            except ValueError:
                continue
            if isinstance(j, dict) and "task" in j and "metrics" in j and "history" in j:
                out[j["task"]] = j
    return out


def selection(m):
    if "f1" in m and "exact_match" in m:
        return m["f1"]
    return sum(m.values()) / len(m)


def main(dirs):
    runs = [results(d) for d in dirs]
    tasks = [t for t in ORDER if any(t in r for r in runs)]
    tasks += sorted({t for r in runs for t in r} - set(tasks))
    head = ["task", "dev examples"] + [os.path.basename(os.path.normpath(d)) for d in dirs]
    if len(dirs) == 2:
        head.append("B - A")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + "|")
    for t in tasks:
        cells, n = [], ""
        for r in runs:
            if t not in r:
                cells.append("—")
                continue
            m = r[t]["metrics"]
            keys = SHOWN.get(t, sorted(k for k in m if k not in ("threshold",)))
            cells.append(", ".join(f"{k} {m[k]:.2f}" for k in keys) + f" (step {r[t]['step']})")
            n = str(r[t]["examples"])
        row = [t, n] + cells
        if len(dirs) == 2:
            a, b = (runs[i].get(t) for i in (0, 1))
            row.append(f"{selection(b['metrics']) - selection(a['metrics']):+.2f}" if a and b else "")
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
