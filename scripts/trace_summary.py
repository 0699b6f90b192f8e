#!/usr/bin/env python3
"""trace_summary.py: read a step's timeline from `thx bench train --profile --trace DIR` (Kineto's
Chrome trace, .json or .json.gz) on a machine without a GPU or a browser.

    scripts/trace_summary.py TRACE.json.gz [--top 10] [--gap-us 20]

Prints where the GPU was busy and where it waited, by part of the step (the scopes thx::forward,
thx::backward, thx::optimizer that bench train's profiled step runs in; a kernel belongs to the
part whose scope was open on the CPU when it was launched, on any thread):
- the step's span on the GPU (first kernel's start to last one's end), the kernels' time summed and
  as a union (kernels on two streams overlap), and the idle rest;
- for each part: its kernels, their GPU time, the idle time before them (the GPU waiting for their
  launch), and the median delay from a launch on the CPU to the kernel's start (near 0: the CPU
  feeds the GPU just in time, it is launch-bound; large: work is queued ahead);
- the longest gaps: where in the step, how long, the kernel that came after each and the op that
  launched it (what the GPU waited for).
Kineto links a kernel to its launch by "correlation" and a launch to its op by "External id".
Standard library only. Bad input: one line, exit 2.
"""
import gzip
import json
import statistics
from decimal import Decimal

from oneline import Parser, fail  # one line, exit 2, as thx

DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH = ("cuda_runtime", "cuda_driver")
PARTS = ("thx::forward", "thx::backward", "thx::optimizer")


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt") as f:
            trace = json.load(f, parse_float=Decimal)
    except (OSError, ValueError, EOFError) as e:
        fail(f"{path}: {e}")
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list):
        fail(f"{path}: no traceEvents list (is it a Chrome trace from --trace?)")
    spans = [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e]
    # Times in microseconds since the first span: Kineto writes them since 1970 to the nanosecond
    # (16 digits and 3 decimals), more than a float keeps, so they are read exactly and rebased.
    for e in spans:
        if not all(isinstance(e.get(k, 0), (int, Decimal)) and not isinstance(e.get(k, 0), bool)
                   for k in ("ts", "dur")):
            fail(f"{path}: an event's ts or dur is not a number: {str(e)[:100]}")
    first = min((e["ts"] for e in spans), default=0)
    for e in spans:
        e["ts"], e["dur"] = float(e["ts"] - first), float(e.get("dur", 0))
    return spans


def short(name, width=60):
    name = name[5:] if name.startswith("void ") else name
    name = name.replace("(anonymous namespace)", "{anon}")
    depth = 0
    for i, ch in enumerate(name):
        depth += (ch == "<") - (ch == ">")
        if ch == "(" and depth == 0 and i > 0:
            name = name[:i].rstrip()
            break
    return name if len(name) <= width else name[:width - 3] + "..."


def main():
    ap = Parser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--gap-us", type=float, default=20.0)
    args = ap.parse_args()
    if args.top < 1:
        fail(f"--top {args.top}: allowed: 1 or more")
    if args.gap_us < 0:
        fail(f"--gap-us {args.gap_us}: allowed: 0 or more")
    events = load(args.trace)
    cat = lambda e: str(e.get("cat", "")).lower()
    args_of = lambda e: e.get("args") or {}
    device = sorted((e for e in events if cat(e) in DEVICE), key=lambda e: float(e["ts"]))
    if not device:
        fail(f"{args.trace}: no kernel, copy or fill on a GPU in it")
    launches = {args_of(e).get("correlation"): e for e in events if cat(e) in LAUNCH}
    ops = {args_of(e).get("External id"): e["name"] for e in events if cat(e) == "cpu_op"}
    scopes = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), e["name"])
              for e in events if cat(e) == "user_annotation" and e.get("name") in PARTS]

    def part_of(ts):
        inside = [s for s in scopes if s[0] <= ts <= s[1]]
        return min(inside, key=lambda s: s[1] - s[0])[2].split("::")[1] if inside else "(outside the parts)"

    rows = {}
    gaps = []
    first, end, busy, summed = float(device[0]["ts"]), float(device[0]["ts"]), 0.0, 0.0
    for e in device:
        ts, dur = float(e["ts"]), float(e.get("dur", 0))
        launch = launches.get(args_of(e).get("correlation"))
        part = part_of(float(launch["ts"])) if launch else "(no launch found)"
        op = ops.get(args_of(launch).get("External id"), "?") if launch else "?"
        row = rows.setdefault(part, {"n": 0, "gpu": 0.0, "idle": 0.0, "delays": []})
        idle = max(0.0, ts - end)
        if idle > 0:
            gaps.append((idle, ts - first, e["name"], op, part))
        row["n"] += 1
        row["gpu"] += dur
        row["idle"] += idle
        if launch:
            row["delays"].append(ts - float(launch["ts"]))
        busy += max(0.0, ts + dur - max(ts, end))
        summed += dur
        end = max(end, ts + dur)
    span = end - first
    print(f"{args.trace}: {len(device)} kernels, copies and fills over {span / 1e3:.3f} ms on the GPU; "
          f"their time summed {summed / 1e3:.3f} ms, as a union {busy / 1e3:.3f} ms; "
          f"idle {(span - busy) / 1e3:.3f} ms ({100 * (span - busy) / max(span, 1e-9):.0f}%)")
    print("\n| part | kernels | GPU ms | idle ms before them | median launch-to-start us |")
    print("|---|---:|---:|---:|---:|")
    order = [p.split("::")[1] for p in PARTS]
    for part in sorted(rows, key=lambda p: order.index(p) if p in order else len(order)):
        r = rows[part]
        delay = f"{statistics.median(r['delays']):.1f}" if r["delays"] else "-"
        print(f"| {part} | {r['n']} | {r['gpu'] / 1e3:.3f} | {r['idle'] / 1e3:.3f} | {delay} |")
    long_gaps = sorted((g for g in gaps if g[0] >= args.gap_us), key=lambda g: -g[0])
    print(f"\n{len(long_gaps)} gaps of {args.gap_us:g} us or more, {sum(g[0] for g in long_gaps) / 1e3:.3f} ms; "
          f"the longest (the kernel after each, and the op that launched it):")
    print("\n| at ms | gap us | part | next kernel | its op |")
    print("|---:|---:|---|---|---|")
    for idle, at, name, op, part in long_gaps[:args.top]:
        print(f"| {at / 1e3:.3f} | {idle:.1f} | {part} | {short(name)} | {op} |")


if __name__ == "__main__":
    main()
