#!/usr/bin/env python3
"""Read a thx run's TensorBoard event files with the real `tensorboard` package (its
EventAccumulator, what `tensorboard --logdir` serves from) and check every scalar against the
run's metrics.jsonl. tb_check.py does the same with a reader of its own; this one needs the
package, which Debian does not ship: it runs on the GPU machine (scripts/gpu_session.sh).

Usage: tb_tensorboard_check.py RUN_DIR
Exit 0 when every numeric value of every metrics.jsonl record is a scalar of the same tag at the
same step, equal to the value as float32, no tag has two values at one step, and no other scalar
exists; 1 with the first
difference; 77 (a skip) where tensorboard is not installed.
"""
import os
import sys

try:
    from tensorboard.backend.event_processing import event_accumulator

    from metrics_scalars import difference
except ImportError as e:
    print(f"tb_tensorboard_check: skipped: {e}", file=sys.stderr)
    sys.exit(77)


def main(run):
    acc = event_accumulator.EventAccumulator(os.path.join(run, "tb"), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    got = {}
    for tag in acc.Tags()["scalars"]:
        for e in acc.Scalars(tag):
            if (e.step, tag) in got:
                return f"{tag} at step {e.step} twice ({got[(e.step, tag)]}, {e.value})"
            got[(e.step, tag)] = e.value
    if not got:
        return f"{run}/tb: tensorboard read no scalars"
    error = difference(got, run)
    if error:
        return error
    import tensorboard
    print(f"{run}: tensorboard {tensorboard.__version__} read {len(got)} scalars, all equal to metrics.jsonl")
    return None


if __name__ == "__main__":
    error = main(sys.argv[1])
    if error:
        print(f"tb_tensorboard_check: {error}", file=sys.stderr)
        sys.exit(1)
