#!/usr/bin/env python3
"""ninja_replay.py: how long a finished Ninja build would take on N cores, and what bounds it.

    scripts/ninja_replay.py BUILD_DIR [--workers 16] [--chain] [--targets T ...]

Reads BUILD_DIR/build.ninja (the edges and their inputs) and BUILD_DIR/.ninja_log (each step's
logged duration; the last entry of an output wins) and replays the build: every edge starts when
its inputs are done and a worker is free, in build.ninja's order, as Ninja picks them. Prints the
replayed wall time and the sum of the steps, the two bounds on it (the longest chain, with a
worker for every step; the steps' sum over the workers); with --chain, the chain of steps that
ends last (what a faster or split step would shorten). The durations are what the logged build measured:
a build run with more jobs than cores logs each step slower than it runs alone. gpu_session.sh
brings a GPU build's log and build.ninja back (build-ninja.tgz). With --targets, only the steps
those outputs need (what `cmake --build DIR --target T ...` would run). Standard library only.
"""
import argparse
import heapq
import os
import sys


def edges_of(build_ninja):
    """[(outputs, inputs)] for every `build` line (explicit, implicit and order-only inputs)."""
    text = open(build_ninja).read().replace("$\n", "")
    edges = []
    for line in text.split("\n"):
        if not line.startswith("build "):
            continue
        line = line[6:].replace("$$", "\2").replace("$ ", "\0").replace("$:", "\1")
        lhs, rhs = line.split(":", 1)
        unescape = lambda p: p.replace("\0", " ").replace("\1", ":").replace("\2", "$")
        outs = [unescape(o) for o in lhs.replace("|", " ").split()]
        ins = [unescape(p) for p in rhs.split()[1:] if p not in ("|", "||", "|@")]
        edges.append((outs, ins))
    return edges


def durations_of(ninja_log):
    """{output: seconds} from a .ninja_log (v5: start ms, end ms, mtime, output, hash)."""
    out = {}
    for line in open(ninja_log):
        if line.startswith("#"):
            continue
        fields = line.rstrip("\n").split("\t")
        if len(fields) >= 4:
            out[fields[3]] = (int(fields[1]) - int(fields[0])) / 1000
    return out


def needed_by(edges, targets):
    """The edges (in their order) that building `targets` runs, or the first target no edge makes."""
    producer = {o: i for i, (outs, _) in enumerate(edges) for o in outs}
    todo, keep = [], set()
    for t in targets:
        if t not in producer:
            return None, t
        todo.append(producer[t])
    while todo:
        e = todo.pop()
        if e in keep:
            continue
        keep.add(e)
        todo += [producer[i] for i in edges[e][1] if i in producer]
    return [edges[e] for e in sorted(keep)], None


def replay(edges, seconds, workers):
    """(finish time of each edge, the edge each waited for last) on `workers` workers."""
    producer = {o: i for i, (outs, _) in enumerate(edges) for o in outs}
    deps = [sorted({producer[i] for i in ins if i in producer}) for _, ins in edges]
    finish, last, started, running, t, free = {}, {}, set(), [], 0.0, workers
    while len(finish) < len(edges):
        moved = True
        while moved:  # start what is ready, zero-length edges at once
            moved = False
            for e in range(len(edges)):
                if e in started or any(x not in finish for x in deps[e]):
                    continue
                if seconds[e] > 0 and free == 0:
                    continue
                started.add(e)
                last[e] = max(deps[e], key=lambda x: finish[x], default=None)
                if seconds[e] == 0:
                    finish[e] = t
                    moved = True
                else:
                    heapq.heappush(running, (t + seconds[e], e))
                    free -= 1
        if not running:
            break  # (an edge whose inputs no edge makes: nothing more can start)
        t, e = heapq.heappop(running)
        finish[e], free = t, free + 1
    return finish, last


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build_dir")
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--chain", action="store_true", help="print the chain of steps that ends last")
    ap.add_argument("--targets", nargs="+", metavar="T", help="only the steps these outputs need")
    a = ap.parse_args()
    for name in ("build.ninja", ".ninja_log"):
        if not os.path.isfile(os.path.join(a.build_dir, name)):
            print(f"ninja_replay: {os.path.join(a.build_dir, name)}: no such file (a finished Ninja build's "
                  "folder has build.ninja and .ninja_log)", file=sys.stderr)
            sys.exit(2)
    if a.workers < 1:
        print(f"ninja_replay: --workers {a.workers}: at least 1", file=sys.stderr)
        sys.exit(2)
    edges = edges_of(os.path.join(a.build_dir, "build.ninja"))
    if a.targets:
        edges, unknown = needed_by(edges, a.targets)
        if unknown is not None:
            print(f"ninja_replay: --targets {unknown}: no step of {os.path.join(a.build_dir, 'build.ninja')} "
                  "makes it (an output as build.ninja names it: thx, thx_tests, ...)", file=sys.stderr)
            sys.exit(2)
    logged = durations_of(os.path.join(a.build_dir, ".ninja_log"))
    prefix = os.path.abspath(a.build_dir) + "/"
    key = lambda o: o[len(prefix):] if o.startswith(prefix) else o
    seconds = [max([logged.get(key(o), 0.0) for o in outs] + [0.0]) for outs, _ in edges]
    finish, last = replay(edges, seconds, a.workers)
    if len(finish) < len(edges):
        sys.exit(f"ninja_replay: {len(edges) - len(finish)} edges never became ready in {a.build_dir}")
    end = max(finish, key=finish.get)
    print(f"{a.workers} workers: {finish[end]:.1f} s (the steps sum to {sum(seconds):.1f} s)")
    unlimited, _ = replay(edges, seconds, len(edges))
    print(f"bounds: {max(unlimited.values()):.1f} s with a worker for every step, "
          f"{sum(seconds) / a.workers:.1f} s of steps per worker")
    if a.chain:
        e = end
        while e is not None:
            if seconds[e] > 0:
                print(f"  {finish[e]:7.1f} s  {seconds[e]:6.1f} s  {edges[e][0][0]}")
            e = last[e]


if __name__ == "__main__":
    main()
