"""The paper's attention pseudocode and T5 v1.0, in float64 PyTorch (Debian's python3-torch),
written from the definitions, for checking files that thx wrote. Not thx code: an
independent second implementation.

Attention parameters are read by their paper names; the layout is the paper's (heads last).
bias is [b,h,n,m] (or broadcastable), mask boolean broadcastable to [b,h,n,m].
"""
import math

import torch


def _extras(L, bias, mask):  # L [b,n,m,h]
    if bias is not None:
        L = L + bias.permute(0, 2, 3, 1)
    if mask is not None:
        L = torch.where(mask.permute(0, 2, 3, 1), L, torch.tensor(-1e9, dtype=L.dtype))
    return L


def attention(X, M, p, bias=None, mask=None):
    """Any variant of the paper, chosen by which parameters exist."""
    if "P" in p:  # section 6, general bilinear
        L = _extras(torch.einsum("bnx,bmy,xyh->bnmh", X, M, p["P"]), bias, mask)
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
    W = torch.softmax(_extras(L, bias, mask), dim=2)
    U = torch.einsum("bnmg,gv->bnmv", W, p["P_w"]) if "P_w" in p else W
    if "P_Xw" in p:
        U = U + torch.einsum("bnmg,bngv->bnmv", W, torch.einsum("bnx,xgv->bngv", X, p["P_Xw"]))
    if "P_Mw" in p:
        U = U + torch.einsum("bnmg,bmgv->bnmv", W, torch.einsum("bmx,xgv->bmgv", M, p["P_Mw"]))
    O = torch.einsum("bnmv,bmev->bnev", U, V)
    return torch.einsum("bnev,yev->bny", O, p["P_o"])


def bucket(rel, bidirectional, num_buckets=32, max_distance=128):
    """T5's relative position bucket for rel = memory - query, in Python floats."""
    ret, n = 0, -rel
    if bidirectional:
        num_buckets //= 2
        ret += num_buckets if n < 0 else 0
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    large = max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact)
                            * (num_buckets - max_exact))
    return ret + min(large, num_buckets - 1)


def rms_norm(x, scale):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * scale


def t5(params, inputs, decoder_inputs, targets, d_model, vocab, z_loss, buckets, max_distance):
    """T5 v1.0 forward: returns (logits, loss, nll). params by module path ('/')."""
    def sub(prefix):
        return {k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)}

    def stack(name, x, self_mask, memory, memory_mask, bidirectional):
        L = x.shape[1]
        table = params[name + "/relative_attention_bias"]  # [h, buckets]
        idx = torch.tensor([[bucket(j - i, bidirectional, buckets, max_distance) for j in range(L)]
                            for i in range(L)])
        bias = table[:, idx].unsqueeze(0)  # [1,h,L,L]
        i = 0
        while (name + "/layers/%d/norm_self/scale" % i) in params:
            p = sub(name + "/layers/%d/" % i)
            h = rms_norm(x, p["norm_self/scale"])
            x = x + attention(h, h, sub(name + "/layers/%d/self_attention/" % i), bias, self_mask)
            if memory is not None:
                h = rms_norm(x, p["norm_cross/scale"])
                x = x + attention(h, memory, sub(name + "/layers/%d/cross_attention/" % i), None,
                                  memory_mask)
            h = rms_norm(x, p["norm_ff/scale"])
            x = x + torch.relu(h @ p["ff/wi"]) @ p["ff/wo"]
            i += 1
        return rms_norm(x, params[name + "/final_norm/scale"])

    E = params["shared"]
    enc_mask = (inputs != 0)[:, None, None, :]
    enc = stack("encoder", E[inputs], enc_mask, None, None, True)
    t = decoder_inputs.shape[1]
    causal = torch.tril(torch.ones(t, t, dtype=torch.bool))[None, None]
    dec = stack("decoder", E[decoder_inputs], causal, enc, enc_mask, False)
    logits = (dec * d_model ** -0.5) @ E[:vocab].T
    lse = torch.logsumexp(logits, -1)
    ce = lse - logits.gather(-1, targets[..., None])[..., 0]
    w = (targets != 0).to(logits.dtype)
    nll = (ce * w).sum() / w.sum()
    loss = nll + z_loss * (lse * lse * w).sum() / w.sum()
    return logits, loss, nll
