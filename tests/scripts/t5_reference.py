#!/usr/bin/python3
"""Recompute a T5 forward and backward pass that thx wrote, outside of thx.

usage: t5_reference.py in.h5 out.h5
in.h5: /params/<path>, /batch/{inputs,decoder_inputs,targets}, attributes d_model, vocab_size,
z_loss, relative_buckets, relative_max_distance. out.h5: /logits, /loss, /nll (float64) and
/grads/<path> of the loss. Exit code 77 when Debian's python3 lacks torch, numpy or h5py.
"""
import os
import sys

try:
    import h5py
    import numpy as np
    import torch
except ImportError:
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paper_reference  # noqa: E402

torch.set_default_dtype(torch.float64)


def main(src, dst):
    with h5py.File(src, "r") as f:
        params = {}

        def collect(name, obj):
            if isinstance(obj, h5py.Dataset):
                params[name] = torch.tensor(np.asarray(obj), dtype=torch.float64, requires_grad=True)
        f["params"].visititems(collect)
        batch = {k: torch.tensor(np.asarray(f["batch/" + k]), dtype=torch.long)
                 for k in ("inputs", "decoder_inputs", "targets")}
        a = {k: float(f.attrs[k]) for k in ("d_model", "vocab_size", "z_loss", "relative_buckets",
                                            "relative_max_distance")}
    logits, loss, nll = paper_reference.t5(
        params, batch["inputs"], batch["decoder_inputs"], batch["targets"], a["d_model"],
        int(a["vocab_size"]), a["z_loss"], int(a["relative_buckets"]), int(a["relative_max_distance"]))
    loss.backward()
    with h5py.File(dst, "w") as f:
        f["logits"] = logits.detach().numpy()
        f["loss"] = loss.item()
        f["nll"] = nll.item()
        for k, v in params.items():
            if v.grad is not None:
                f["grads/" + k] = v.grad.numpy()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
