#include "attention/tiled.h"

#include <algorithm>
#include <limits>

namespace thx {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Tensor as_fp32(const Tensor& t) { return t.scalar_type() == torch::kFloat64 ? t : t.to(torch::kFloat32); }
Tensor placeholder(const Tensor& t) { return t.defined() ? t : torch::empty({0}); }
Tensor present(const Tensor& t) { return t.numel() > 0 ? t : Tensor(); }

// t (broadcastable to [b,h,n,m]) as 4 dims, and its rows [i0, i0+ni) where it has rows.
Tensor four(const Tensor& t) {
  Tensor r = t;
  while (r.defined() && r.dim() < 4) r = r.unsqueeze(0);
  return r;
}
Tensor rows(const Tensor& t, int64_t i0, int64_t ni) { return t.size(2) == 1 ? t : t.narrow(2, i0, ni); }

// sum_b A[b] B[b]^T over [b, g, I*m] x [b, g2, I*m] -> [g, g2]: a projection's gradient.
Tensor projection_grad(const Tensor& A, const Tensor& B) {
  const int64_t b = A.size(0), im = A.size(2) * A.size(3);
  return torch::matmul(A.reshape({b, A.size(1), im}), B.reshape({b, B.size(1), im}).transpose(1, 2)).sum(0);
}

// The problem in heads-major views: Qh [b,h_k,n,d_k], Kh [b,h_k,m,d_k], Vh [b,h_v,m,d_v].
struct Problem {
  Tensor Qh, Kh, Vh, P_l, P_w, bias, mask;  // P_l, P_w, bias fp32 (or fp64); bias and mask 4-d
  int64_t block;

  // J (fp32, [b,h_k,I,m]) and the logits L [b,h,I,m] of rows [i0, i0+ni).
  Tensor logits(int64_t i0, int64_t ni, Tensor* J_out) const {
    Tensor J = as_fp32(torch::matmul(Qh.narrow(2, i0, ni), Kh.transpose(2, 3)));
    Tensor L = P_l.defined() ? mix_heads(J, P_l) : J;
    if (J_out) *J_out = J;
    if (bias.defined()) L = P_l.defined() ? L.add_(rows(bias, i0, ni)) : L + rows(bias, i0, ni);
    if (mask.defined()) L.masked_fill_(rows(mask, i0, ni).logical_not(), -std::numeric_limits<double>::infinity());
    return L;
  }
  // The weights W = softmax(L) of rows [i0, i0+ni) over the keys, by ATen's softmax, one kernel
  // (logsumexp, then exp(L - LSE) in place, made about ten passes over [b,h,I,m]); the backward
  // recomputes them the same way, so nothing is kept. A row with every key masked gets 0 (softmax:
  // NaN).
  Tensor weights(const Tensor& L, int64_t i0, int64_t ni) const {
    Tensor W = at::_softmax(L, -1, false);
    if (mask.defined()) W.masked_fill_(rows(mask, i0, ni).any(-1, true).logical_not(), 0.);
    return W;
  }
};

Problem problem(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l, const Tensor& P_w,
                const Tensor& bias, const Tensor& mask, int64_t block_rows) {
  TORCH_CHECK(Q.dim() == 4 && K.dim() == 4 && V.dim() == 4, "tiled attention: Q, K, V must be [b,n,heads,dim]");
  // Heads-major copies, once: a batched product cannot take [b,n,h,d] transposed as one batch
  // stride, and would copy it again for every block.
  Problem p{Q.transpose(1, 2).contiguous(), K.transpose(1, 2).contiguous(), V.transpose(1, 2).contiguous(),
            P_l.defined() ? as_fp32(P_l) : P_l,
            P_w.defined() ? as_fp32(P_w) : P_w, bias.defined() ? four(as_fp32(bias)) : bias, four(mask), block_rows};
  const int64_t n = Q.size(1), m = K.size(1);
  if (p.block <= 0) {
    const int64_t heads = std::max({Q.size(2), V.size(2), P_l.defined() ? P_l.size(1) : int64_t{1}});
    const int64_t per_row = std::max<int64_t>(1, Q.size(0) * heads * m * 4);
    p.block = std::max<int64_t>(16, (int64_t{512} << 20) / per_row);
  }
  p.block = std::min(p.block, std::max<int64_t>(n, 1));
  return p;
}

struct TiledFn : torch::autograd::Function<TiledFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l_in,
                        const Tensor& P_w_in, const Tensor& bias_in, const Tensor& mask_in, int64_t block_rows) {
    const Tensor P_l = present(P_l_in), P_w = present(P_w_in), bias = present(bias_in), mask = present(mask_in);
    const Problem p = problem(Q, K, V, P_l, P_w, bias, mask, block_rows);
    const int64_t b = Q.size(0), n = Q.size(1);
    Tensor O = torch::empty({b, V.size(2), n, V.size(3)}, V.options());  // [b,h_v,n,d_v]
    for (int64_t i0 = 0; i0 < n; i0 += p.block) {
      const int64_t ni = std::min(p.block, n - i0);
      const Tensor W = p.weights(p.logits(i0, ni, nullptr), i0, ni);  // [b,h,I,m]
      const Tensor U = P_w.defined() ? mix_heads(W, P_w) : W;
      O.narrow(2, i0, ni).copy_(torch::matmul(U.to(V.scalar_type()), p.Vh));
    }
    ctx->save_for_backward({Q, K, V, P_l_in, P_w_in, bias_in, mask_in});
    ctx->saved_data["block"] = p.block;
    return O.transpose(1, 2);  // [b,n,h_v,d_v]
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const Tensor &Q = s[0], &K = s[1], &V = s[2];
    const Tensor P_l = present(s[3]), P_w = present(s[4]), bias = present(s[5]), mask = present(s[6]);
    const Problem p = problem(Q, K, V, P_l, P_w, bias, mask, ctx->saved_data["block"].toInt());
    const Tensor dOh = grads[0].transpose(1, 2).contiguous();  // [b,h_v,n,d_v]
    const int64_t n = Q.size(1);
    const auto wide = Q.options().dtype(p.Qh.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32);
    Tensor dQh = torch::empty_like(p.Qh, at::MemoryFormat::Contiguous);
    Tensor dKh = torch::zeros(p.Kh.sizes(), wide), dVh = torch::zeros(p.Vh.sizes(), wide);
    Tensor dP_l = P_l.defined() ? torch::zeros_like(p.P_l) : Tensor(), dP_w = P_w.defined() ? torch::zeros_like(p.P_w) : Tensor();
    Tensor dbias = bias.defined() ? torch::zeros_like(p.bias) : Tensor();
    for (int64_t i0 = 0; i0 < n; i0 += p.block) {
      const int64_t ni = std::min(p.block, n - i0);
      Tensor J;
      const Tensor W = p.weights(p.logits(i0, ni, &J), i0, ni);  // [b,h,I,m]
      const Tensor U = P_w.defined() ? mix_heads(W, P_w) : W;                                 // [b,h_v,I,m]
      const Tensor dOi = dOh.narrow(2, i0, ni);
      dVh.add_(torch::matmul(U.to(V.scalar_type()).transpose(2, 3), dOi));
      const Tensor dU = as_fp32(torch::matmul(dOi, p.Vh.transpose(2, 3)));  // [b,h_v,I,m]
      if (P_w.defined()) dP_w.add_(projection_grad(W, dU));
      const Tensor dW = P_w.defined() ? mix_heads(dU, p.P_w.t()) : dU;                     // [b,h,I,m]
      const Tensor dL = at::_softmax_backward_data(dW, W, -1, W.scalar_type());    // W * (dW - sum W dW)
      if (bias.defined()) {
        Tensor share = dL;  // summed over the dims the bias broadcasts along
        for (int64_t d : {0, 1, 3})
          if (p.bias.size(d) == 1) share = share.sum(d, true);
        if (p.bias.size(2) == 1) dbias.add_(share.sum(2, true));
        else dbias.narrow(2, i0, ni).add_(share);
      }
      if (P_l.defined()) dP_l.add_(projection_grad(J, dL));
      const Tensor dJ = (P_l.defined() ? mix_heads(dL, p.P_l.t()) : dL).to(Q.scalar_type());  // [b,h_k,I,m]
      dQh.narrow(2, i0, ni).copy_(torch::matmul(dJ, p.Kh));
      dKh.add_(torch::matmul(dJ.transpose(2, 3), p.Qh.narrow(2, i0, ni)));
    }
    if (dbias.defined()) dbias = dbias.sum_to_size(s[5].sizes()).to(s[5].scalar_type());
    return {dQh.transpose(1, 2), dKh.to(K.scalar_type()).transpose(1, 2), dVh.to(V.scalar_type()).transpose(1, 2),
            P_l.defined() ? dP_l.to(s[3].scalar_type()) : Tensor(), P_w.defined() ? dP_w.to(s[4].scalar_type()) : Tensor(),
            dbias, Tensor(), Tensor()};
  }
};

}  // namespace

Tensor mix_heads(const Tensor& T, const Tensor& P) {
  const int64_t b = T.size(0), g = T.size(1), i = T.size(2), m = T.size(3);
  return torch::matmul(P.t(), T.reshape({b, g, i * m})).view({b, P.size(1), i, m});
}

Tensor tiled_attention_core(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l, const Tensor& P_w,
                            const Tensor& bias, const Tensor& mask, int64_t block_rows) {
  return TiledFn::apply(Q, K, V, placeholder(P_l), placeholder(P_w), placeholder(bias), placeholder(mask), block_rows);
}

}  // namespace thx
