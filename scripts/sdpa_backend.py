#!/usr/bin/env python3
"""Which kernel PyTorch's scaled_dot_product_attention picks for thx's multi-head attention on a GPU,
and whether T5's learned relative bias gets its gradient through it.

    python3 scripts/sdpa_backend.py     (on a GPU machine, with PyTorch 2; gpu_session.sh runs it)

thx calls at::scaled_dot_product_attention(q, k, v, bias, 0.0, false, 1.0) with q, k, v
[b,h,n,d] in the compute dtype and the relative bias [1,h,n,m] (fp32 parameter, cast to the
compute dtype) as the additive mask (src/attention/fused.cpp). This builds the same call at
T5-base's shapes (batch 32, 12 heads of 64, encoder 512 x 512 and decoder 114 x 114 with the
causal mask folded into the bias), asks torch._fused_sdp_choice for the backend, and compares
the output and the bias's gradient with the math backend in float64: within bf16's rounding,
2^-8 relative to the largest value, times 4 for the few roundings in a chain.
Exit 0 when every case is within its bound, 1 otherwise, 77 where there is no GPU.
"""
import sys

import torch
import torch.nn.functional as F


def backend_name(code):
    try:
        return torch._C._SDPBackend(code).name
    except (AttributeError, ValueError, TypeError):
        return str(code)


def case(name, b, h, n, m, d, causal):
    torch.manual_seed(0)
    dev = "cuda"
    q, k, v = (torch.randn(b, h, x, d, device=dev) * 0.3 for x in (n, m, m))
    bias = torch.randn(1, h, n, m, device=dev, requires_grad=True)
    mask_add = torch.zeros(n, m, device=dev)
    if causal:
        mask_add = torch.full((n, m), float("-inf"), device=dev).triu(1)
    out = {}
    for label, dtype in (("bf16", torch.bfloat16), ("ref", torch.float64)):
        bias.grad = None
        qq, kk, vv = (t.to(dtype).requires_grad_() for t in (q, k, v))
        add = (bias + mask_add).to(dtype)
        if label == "bf16":
            choice = torch._fused_sdp_choice(qq, kk, vv, add, 0.0, False, scale=1.0)
            o = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=add, scale=1.0)
        else:
            w = torch.softmax(qq @ kk.transpose(-1, -2) + add, -1)
            o = w @ vv
        g = torch.randn(o.shape, device=dev, generator=torch.Generator(device=dev).manual_seed(1)).to(dtype)
        (o * g).sum().backward()
        out[label] = (o.double().detach(), bias.grad.double().clone())
    ok = True
    for what, i in (("output", 0), ("bias gradient", 1)):
        got, ref = out["bf16"][i], out["ref"][i]
        err = (got - ref).abs().max().item()
        bound = 4 * 2 ** -8 * ref.abs().max().item()
        ok &= err <= bound
        print(f"{name}: {what} max |bf16 - float64| {err:.3e}, bound {bound:.3e}: {'within' if err <= bound else 'OUTSIDE'}")
    print(f"{name}: backend {backend_name(choice)} (torch._fused_sdp_choice = {choice}), "
          f"bias gradient finite: {bool(torch.isfinite(out['bf16'][1]).all())}")
    return ok


def main():
    if not torch.cuda.is_available():
        print("sdpa_backend: skipped: no GPU", file=sys.stderr)
        return 77
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    ok = case("T5-base encoder self-attention", 32, 12, 512, 512, 64, False)
    ok &= case("T5-base decoder self-attention", 32, 12, 114, 114, 64, True)
    ok &= case("48 heads of 16", 32, 48, 512, 512, 16, False)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
