#!/usr/bin/python3
"""Check a `thx attention-probe` file against the paper, outside of thx.

Reads the inputs and parameters from the HDF5 file, recomputes Y and every gradient of
sum(Y * G) in float64 with the paper's pseudocode (numpy-style einsum in PyTorch, autograd for
the gradients), and compares with what thx wrote in float32.

Tolerance: max error <= 2e-6 + 2e-5 * max|reference| (thx works in fp32; the reference in
fp64). Exit code 0 if every tensor matches, 1 otherwise.

usage: probe_check.py probe.h5 [probe.h5 ...]
"""
import sys

import os

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paper_reference  # noqa: E402

torch.set_default_dtype(torch.float64)


def t(ds):
    return torch.tensor(np.asarray(ds), dtype=torch.float64)


def reference(f, X, M, p):
    b, n, m = X.shape[0], X.shape[1], M.shape[1]
    bias = t(f["inputs/bias"]) if "inputs/bias" in f else None
    mask = None
    if "inputs/mask" in f:
        raw = torch.tensor(np.asarray(f["inputs/mask"])).bool()
        mask = raw.view(b, 1, 1, m) if raw.shape == (b, m) else raw.view(1, 1, n, m)
    return paper_reference.attention(X, M, p, bias, mask)


def close(name, got, want):
    err = float(np.max(np.abs(got - want))) if got.size else 0.0
    tol = 2e-6 + 2e-5 * float(np.max(np.abs(want))) if want.size else 2e-6
    ok = err <= tol
    if not ok:
        print(f"  MISMATCH {name}: max error {err:.3g} > {tol:.3g}")
    return ok, err


def check(path):
    with h5py.File(path, "r") as f:
        X = t(f["inputs/X"]).requires_grad_(True)
        M = t(f["inputs/M"]).requires_grad_(True)
        G = t(f["inputs/G"])
        p = {k: t(v).requires_grad_(True) for k, v in f["params"].items()}
        Y = reference(f, X, M, p)
        (Y * G).sum().backward()
        results = [close("Y", np.asarray(f["outputs/Y"]), Y.detach().numpy())]
        for k, v in p.items():
            results.append(close("grad " + k, np.asarray(f["grads/" + k]), v.grad.numpy()))
        results.append(close("grad X", np.asarray(f["input_grads/X"]), X.grad.numpy()))
        results.append(close("grad M", np.asarray(f["input_grads/M"]), M.grad.numpy()))
        dims = f.attrs["dims"]
        if isinstance(dims, bytes):
            dims = dims.decode()
    ok = all(r[0] for r in results)
    worst = max(r[1] for r in results)
    print(f"{'ok ' if ok else 'BAD'} {path}: {dims}: {len(results)} tensors, max error {worst:.2g}")
    return ok


if __name__ == "__main__":
    results = [check(p) for p in sys.argv[1:]]
    sys.exit(0 if results and all(results) else 1)
