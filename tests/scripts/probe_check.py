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

import h5py
import numpy as np
import torch

torch.set_default_dtype(torch.float64)


def t(ds):
    return torch.tensor(np.asarray(ds), dtype=torch.float64)


def reference(f, X, M, p):
    variant = f.attrs["variant"]
    if isinstance(variant, bytes):
        variant = variant.decode()
    b, n, m = X.shape[0], X.shape[1], M.shape[1]
    bias = t(f["inputs/bias"]) if "inputs/bias" in f else None
    mask = None
    if "inputs/mask" in f:
        raw = torch.tensor(np.asarray(f["inputs/mask"])).bool()
        mask = raw.view(b, 1, m, 1) if raw.shape == (b, m) else raw.view(1, n, m, 1)

    def logits_extras(L):  # L [b,n,m,h]
        if bias is not None:
            L = L + bias.permute(0, 2, 3, 1)
        if mask is not None:
            L = torch.where(mask, L, torch.tensor(-1e9))
        return L

    if variant == "general_bilinear":
        L = logits_extras(torch.einsum("bnx,bmy,xyh->bnmh", X, M, p["P"]))
        W = torch.softmax(L, dim=2)
        return torch.einsum("bnmh,bmy,yzh->bnz", W, M, p["Q"])
    Q = torch.einsum("bnx,xkh->bnkh", X, p["P_q"])
    K = torch.einsum("bmx,xkh->bmkh", M, p["P_k"])
    V = torch.einsum("bmx,xvh->bmvh", M, p["P_v"])
    J = torch.einsum("bnkh,bmkh->bnmh", Q, K)
    L = torch.einsum("bnmh,hg->bnmg", J, p["P_l"]) if "P_l" in p else J
    if "P_Xl" in p:
        L = L + torch.einsum("bnmh,bnhg->bnmg", J, torch.einsum("bnx,xhg->bnhg", X, p["P_Xl"]))
    if "P_Ml" in p:
        L = L + torch.einsum("bnmh,bmhg->bnmg", J, torch.einsum("bmx,xhg->bmhg", M, p["P_Ml"]))
    W = torch.softmax(logits_extras(L), dim=2)
    U = torch.einsum("bnmg,gv->bnmv", W, p["P_w"]) if "P_w" in p else W
    if "P_Xw" in p:
        U = U + torch.einsum("bnmg,bngv->bnmv", W, torch.einsum("bnx,xgv->bngv", X, p["P_Xw"]))
    if "P_Mw" in p:
        U = U + torch.einsum("bnmg,bmgv->bnmv", W, torch.einsum("bmx,xgv->bmgv", M, p["P_Mw"]))
    O = torch.einsum("bnmv,bmev->bnev", U, V)
    return torch.einsum("bnev,yev->bny", O, p["P_o"])


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
    ok = all(r[0] for r in results)
    worst = max(r[1] for r in results)
    print(f"{'ok ' if ok else 'BAD'} {path}: {dims}: {len(results)} tensors, max error {worst:.2g}")
    return ok


if __name__ == "__main__":
    results = [check(p) for p in sys.argv[1:]]
    sys.exit(0 if results and all(results) else 1)
