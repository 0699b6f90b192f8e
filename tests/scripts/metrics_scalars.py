"""The scalars a thx run's metrics.jsonl promises its TensorBoard files: {(step, tag): value}.

Shared by tb_check.py (thx's event files under a reader of our own) and tb_tensorboard_check.py
(the same files under the real tensorboard package). Tags are [task/]train/<key> for the
records with a learning rate, [task/]eval/<key...> (nested objects joined by /) otherwise;
records of a config change carry no scalars.
"""
import json
import os

import numpy as np


def flatten(prefix, obj, out):
    for k, v in obj.items():
        if isinstance(v, dict):
            flatten(f"{prefix}{k}/", v, out)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[prefix + k] = v


def expected_scalars(run):
    want = {}
    for line in open(os.path.join(run, "metrics.jsonl")):
        j = json.loads(line)
        if "config_change" in j:
            continue
        step = j.pop("step")
        j.pop("time", None)  # wall-clock seconds: the events carry their own wall_time
        task = j.pop("task", None)
        kind = "train" if "lr" in j else "eval"
        flat = {}
        flatten(f"{task + '/' if task else ''}{kind}/", j, flat)
        for tag, value in flat.items():
            want[(step, tag)] = value
    return want


def difference(got, run):
    """The first way the scalars read, {(step, tag): value}, differ from what the run's
    metrics.jsonl promises (each equal to its value as float32, none extra), or None."""
    want = expected_scalars(run)
    for key, value in want.items():
        if key not in got:
            return f"no scalar {key[1]} at step {key[0]} (metrics.jsonl has {value})"
        if np.float32(got[key]) != np.float32(value):
            return f"{key[1]} at step {key[0]}: the event file has {got[key]}, metrics.jsonl {value}"
    extra = set(got) - set(want)
    if extra:
        return f"scalars metrics.jsonl does not have: {sorted(extra)[:5]}"
    return None
