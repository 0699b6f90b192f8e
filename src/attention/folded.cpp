#include "attention/folded.h"

#include <vector>

#include "attention/optional_tensor.h"
#include "attention/th_problem.h"
#include "common/torch_compat.h"

namespace thx {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr const char* kFoldedName = "folded attention";  // in a refusal

// The problem (th_problem.h) and its folded operands, in [b,n,h,m] order.
struct Folded : ThProblem {
  using ThProblem::ThProblem;

  // Q' [b, n h, h_k d_k] in the operands' dtype: Q'[n,h,k,d] = P_l[k,h] Q[n,k,d], each product
  // made in fp32 and rounded once (a product of a bf16 and an fp32 needs no more).
  Tensor queries(const Tensor& Q) const {
    Tensor out = torch::empty({b, n, h, hk, dk}, Q.options());
    at::mul_out(out, Q.unsqueeze(2), Pl.t().reshape({1, 1, h, hk, 1}));
    return out.view({b, n * h, hk * dk});
  }
  // V' [b, h m, h_v d_v] in the operands' dtype: V'[h,m,v,e] = P_w[h,v] V[m,v,e].
  Tensor values(const Tensor& V) const {
    Tensor out = torch::empty({b, h, m, hv, dv}, V.options());
    at::mul_out(out, V.unsqueeze(1), Pw.reshape({1, h, 1, hv, 1}));
    return out.view({b, h * m, hv * dv});
  }
  Tensor keys(const Tensor& K) const { return K.reshape({b, m, hk * dk}); }

  // The weights W [b,n,h,m] in the operands' dtype from the folded logits (the same).
  Tensor weights(const Tensor& Q, const Tensor& K) const {
    return weights_from(torch::bmm(queries(Q), keys(K).transpose(1, 2)).view({b, n, h, m}), {0, 2, 1, 3});
  }
};

struct FoldedFn : torch::autograd::Function<FoldedFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l_in,
                        const Tensor& P_w_in, const Tensor& bias_in, const Tensor& mask_in) {
    const Folded f(kFoldedName, Q, K, V, present(P_l_in), present(P_w_in), present(bias_in), present(mask_in));
    const Tensor W = f.weights(Q, K);  // [b,n,h,m]
    const Tensor O = torch::bmm(W.view({f.b, f.n, f.h * f.m}), f.values(V));
    ctx->save_for_backward({Q, K, V, P_l_in, P_w_in, bias_in, mask_in, W});
    return O.view({f.b, f.n, f.hv, f.dv});
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const Tensor &Q = s[0], &K = s[1], &V = s[2], &W = s[7];
    const Tensor P_l = present(s[3]), P_w = present(s[4]), bias = present(s[5]);
    const Folded f(kFoldedName, Q, K, V, P_l, P_w, bias, present(s[6]));
    const Tensor dO = grads[0].to(f.dt).reshape({f.b, f.n, f.hv * f.dv});
    // The sums over the folded dim come from the transposed products dV'^T and dQ'^T, whose rows
    // are then [heads, keys] or [(d, rows), heads] matrices a batch: each sum is one batched
    // product with a vector a matrix, one pass over them and nothing of their size made again.
    // dP_l's and dP_w's products are written in fp32 where LibTorch can (compat::bmm_wide: bf16
    // operands on CUDA with LibTorch 2.8+), so that their sums over (b, e, m) and (b, d, n) are
    // rounded once, to fp32; elsewhere each batch's sum is rounded to the operands' dtype first.
    Tensor dV, dP_w, dWc;
    {  // through O = W V': dW = dO V'^T, dV'^T = dO^T W, then V' = P_w V
      dWc = torch::bmm(dO, f.values(V).transpose(1, 2));  // [b, n, h m]
      const Tensor dVt = torch::bmm(dO.transpose(1, 2), W.view({f.b, f.n, f.h * f.m}))
                             .view({f.b * f.hv * f.dv, f.h, f.m});  // dV'^T[(b,v,e), h, m]
      // dV[b,m,v,e] = sum_h P_w[h,v] dV'^T[b,v,e,h,m]
      const Tensor pw = f.Pw.t().to(f.dt).reshape({1, f.hv, 1, 1, f.h}).expand({f.b, f.hv, f.dv, 1, f.h});
      dV = torch::bmm(pw.reshape({-1, 1, f.h}), dVt).view({f.b, f.hv, f.dv, f.m}).permute({0, 3, 1, 2}).contiguous();
      if (P_w.defined()) {  // dP_w[h,v] = sum_{b,e,m} dV'^T[b,v,e,h,m] V[b,m,v,e]
        const Tensor Vt = V.permute({0, 2, 3, 1}).contiguous().view({-1, f.m, 1});
        dP_w = compat::bmm_wide(dVt, Vt, f.ct).view({f.b, f.hv, f.dv, f.h}).sum(std::vector<int64_t>{0, 2});
        dP_w = dP_w.t().to(s[4].scalar_type());
      }
    }
    // The softmax: dL = W (dW - sum W dW), 0 where a row had no key (W = 0).
    const Tensor dL = at::_softmax_backward_data(dWc.view({f.b, f.n, f.h, f.m}), W, -1, f.dt);
    dWc = Tensor();
    Tensor dbias;
    if (bias.defined()) dbias = f.bias_grad(dL.permute({0, 2, 1, 3}), s[5].sizes()).to(s[5].scalar_type());
    const Tensor dLd = dL.view({f.b, f.n * f.h, f.m});
    // Through L = Q' K^T: dK = dL^T Q', dQ'^T = K^T dL^T, then Q' = P_l Q.
    const Tensor dK = torch::bmm(dLd.transpose(1, 2), f.queries(Q)).view({f.b, f.m, f.hk, f.dk});
    const Tensor dQt = torch::bmm(f.keys(K).transpose(1, 2), dLd.transpose(1, 2))
                           .view({f.b * f.hk, f.dk * f.n, f.h});  // dQ'^T[(b,k), (d,n), h]
    // dQ[b,n,k,d] = sum_h P_l[k,h] dQ'^T[b,k,d,n,h]
    const Tensor pl = f.Pl.to(f.dt).reshape({1, f.hk, f.h, 1}).expand({f.b, f.hk, f.h, 1});
    const Tensor dQ =
        torch::bmm(dQt, pl.reshape({-1, f.h, 1})).view({f.b, f.hk, f.dk, f.n}).permute({0, 3, 1, 2}).contiguous();
    Tensor dP_l;
    if (P_l.defined()) {  // dP_l[k,h] = sum_{b,d,n} Q[b,n,k,d] dQ'^T[b,k,d,n,h]
      const Tensor Qt = Q.permute({0, 2, 3, 1}).contiguous().view({-1, 1, f.dk * f.n});
      dP_l = compat::bmm_wide(Qt, dQt, f.ct).view({f.b, f.hk, f.h}).sum(0).to(s[3].scalar_type());
    }
    return {dQ, dK, dV, dP_l, dP_w, dbias, Tensor()};
  }
};

}  // namespace

Tensor folded_attention_core(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l, const Tensor& P_w,
                             const Tensor& bias, const Tensor& mask) {
  return FoldedFn::apply(Q, K, V, placeholder(P_l), placeholder(P_w), placeholder(bias), placeholder(mask));
}

}  // namespace thx
