#!/usr/bin/python3
"""Figure 1 of the paper from a checkpoint: P_l, P_w and P_l x P_w of every talking-heads layer.

    /usr/bin/python3 scripts/plot_figure1.py runs/x/checkpoints/step-00001500.h5 --out fig1.png

Each matrix is drawn as a heatmap normalized to [-1, 1] (divided by its largest magnitude),
one row of panels per layer. The text summary (printed, and written with --summary) gives for
each matrix, as section 7.4 does, the determinant and the smallest eigenvalue magnitude when it
is square, and its singular values otherwise (h_k != h or h != h_v). Layers are found by the
checkpoint's parameter paths (.../P_l [h_k, h] and .../P_w [h, h_v]) in T5, BERT and ALBERT
checkpoints; an ALBERT group (encoder/groups/g/attention) is one row, shared by its layers.
Logits-only and weights-only layers show the one matrix they have. Needs Debian's
python3-matplotlib and h5py.
"""
import argparse
import os
import sys

import h5py
import numpy as np
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def layer_key(path):
    # T5: encoder/layers/3/self_attention -> (0, 3, 0): encoder before decoder, self before
    # cross. BERT: encoder/layers/3/attention. ALBERT: encoder/groups/0/attention, one set of
    # matrices shared by every layer of the group.
    parts = path.split("/")
    stack = 0 if parts[0] == "encoder" else 1
    return stack, int(parts[2]), 1 if parts[3] == "cross_attention" else 0


def describe(name, m):
    m = np.asarray(m, dtype=np.float64)
    if m.shape[0] == m.shape[1]:
        eig = np.linalg.eigvals(m)
        return (f"{name} {m.shape[0]}x{m.shape[1]}: det {np.linalg.det(m):.4g}, "
                f"smallest |eigenvalue| {np.abs(eig).min():.4g}")
    s = np.linalg.svd(m, compute_uv=False)
    return f"{name} {m.shape[0]}x{m.shape[1]}: singular values " + " ".join(f"{x:.3g}" for x in s)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint", help="a thx checkpoint (HDF5)")
    ap.add_argument("--out", required=True, help="PNG file to write")
    ap.add_argument("--summary", help="also write the text summary here")
    ap.add_argument("--layers", default="", help="only layers whose path contains this text")
    args = ap.parse_args()
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir):
        sys.exit(f"{os.path.basename(__file__)}: --out {args.out}: directory {out_dir} does not exist")
    try:
        f = h5py.File(args.checkpoint, "r")
    except OSError as e:
        sys.exit(f"plot_figure1: {args.checkpoint}: not a readable HDF5 checkpoint ({e})")
    if "params" not in f:
        sys.exit(f"plot_figure1: {args.checkpoint}: no /params group; is it a thx checkpoint?")
    layers = {}
    def visit(name, obj):
        if isinstance(obj, h5py.Dataset) and name.rsplit("/", 1)[-1] in ("P_l", "P_w"):
            layer, which = name.rsplit("/", 1)
            if args.layers in layer:
                layers.setdefault(layer, {})[which] = obj[()]
    f["params"].visititems(visit)
    if not layers:
        sys.exit(f"plot_figure1: {args.checkpoint}: no talking-heads layer (no P_l or P_w parameter)")
    order = sorted(layers, key=layer_key)
    fig, axes = plt.subplots(len(order), 3, figsize=(9, 3 * len(order)), squeeze=False)
    lines = [f"Figure 1 summary of {args.checkpoint}"]
    for row, layer in zip(axes, order):
        mats = layers[layer]
        panels = [("P_l", mats.get("P_l")), ("P_w", mats.get("P_w")),
                  ("P_l x P_w", mats["P_l"] @ mats["P_w"] if "P_l" in mats and "P_w" in mats else None)]
        lines.append(layer)
        for ax, (name, m) in zip(row, panels):
            ax.set_xticks([]), ax.set_yticks([])
            if m is None:
                ax.axis("off")
                continue
            scale = np.abs(m).max() or 1.0
            ax.imshow(m / scale, cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
            ax.set_title(f"{layer}\n{name} {m.shape[0]}x{m.shape[1]}", fontsize=7)
            lines.append("  " + describe(name, m))
    fig.tight_layout()
    fig.savefig(args.out, dpi=100)
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.summary:
        with open(args.summary, "w") as s:
            s.write(text)
    print(f"wrote {args.out} ({len(order)} layers)")


if __name__ == "__main__":
    main()
