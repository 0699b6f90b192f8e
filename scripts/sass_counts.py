#!/usr/bin/env python3
"""sass_counts.py: read gpu_session.sh's ncu-source output (sass-counts-NAME.csv[.gz], Nsight
Compute's source page as CSV: one row per SASS instruction) on a machine without a GPU.

    scripts/sass_counts.py sass-counts-flash-forward.csv.gz [--top 25]

Prints, for the launch profiled: the instructions executed (warp-level) in all, the opcodes that
took most of them and of the stall samples, and the single instructions with the most stall
samples, each with its address and source line. Columns are found by name (Nsight Compute's
names vary by version): the first column whose name holds "Instructions Executed" (not
"Thread"), and the first whose name holds "Stall Sampling (All". Standard library only.
"""
import argparse
import collections
import csv
import gzip
import re
import sys


def fail(message):
    print(f"sass_counts.py: {message}", file=sys.stderr)
    sys.exit(2)


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def column(header, want, avoid=None):
    for i, name in enumerate(header):
        if want in name and (avoid is None or avoid not in name):
            return i
    return None


def opcode(source):
    words = source.split()
    if words and words[0].startswith("@"):  # a predicate: @P0, @!PT
        words = words[1:]
    return re.sub(r"[;,]$", "", words[0]) if words else "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    if args.top < 1:
        fail(f"--top {args.top}: allowed: 1 or more")
    opener = gzip.open if args.csv.endswith(".gz") else open
    try:
        with opener(args.csv, "rt", newline="") as f:
            rows = [r for r in csv.reader(f) if r]
    except (OSError, csv.Error, UnicodeDecodeError) as e:
        fail(f"{args.csv}: {e}")
    start = next((i for i, r in enumerate(rows) if "Source" in r), None)
    if start is None:
        fail(f"{args.csv}: no header row with a 'Source' column (is it ncu's --page source --csv?)")
    header, body = rows[start], rows[start + 1:]
    src, addr = header.index("Source"), column(header, "Address")
    executed = column(header, "Instructions Executed", avoid="Thread")
    stalls = column(header, "Stall Sampling (All")
    if executed is None:
        fail(f"{args.csv}: no 'Instructions Executed' column; columns: {', '.join(header)}")
    by_op = collections.defaultdict(lambda: [0.0, 0.0, 0])
    lines = []
    for r in body:
        if len(r) <= max(src, executed):
            continue
        e = number(r[executed])
        s = number(r[stalls]) if stalls is not None and stalls < len(r) else 0.0
        op = by_op[opcode(r[src])]
        op[0] += e
        op[1] += s
        op[2] += 1
        lines.append((s, e, r[addr] if addr is not None else "", r[src].strip()))
    total_e = sum(v[0] for v in by_op.values()) or 1.0
    total_s = sum(v[1] for v in by_op.values()) or 1.0
    print(f"{args.csv}: {len(lines)} SASS instructions, {total_e:,.0f} executed (warp-level)"
          + (f", {total_s:,.0f} stall samples" if stalls is not None else ", no stall column"))
    print(f"\n{'opcode':<24}{'in code':>9}{'executed':>16}{'share':>8}{'stalls':>12}{'share':>8}")
    for name, (e, s, n) in sorted(by_op.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"{name:<24}{n:>9}{e:>16,.0f}{100 * e / total_e:>7.1f}%{s:>12,.0f}{100 * s / total_s:>7.1f}%")
    if stalls is not None:
        print("\nthe instructions with the most stall samples:")
        for s, e, a, text in sorted(lines, key=lambda x: -x[0])[:args.top]:
            print(f"{a:>10} {s:>10,.0f} stalls {e:>14,.0f} executed  {text}")


if __name__ == "__main__":
    main()
