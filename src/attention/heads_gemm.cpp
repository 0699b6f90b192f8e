#include "attention/heads_gemm.h"

#include "attention/optional_tensor.h"
#include "attention/th_problem.h"
#include "attention/tiled.h"

namespace thx {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr const char* kGemmName = "gemm attention";  // in a refusal

// The problem (th_problem.h) and its steps, heads-major.
struct HeadsGemm : ThProblem {
  using ThProblem::ThProblem;

  // T [b,g,n,m] mixed across heads by P [g,g2] (fp32; rounded to T's dtype) -> [b,g2,n,m]: thx's
  // mixing kernel where the launcher has it and takes T (rows_mix: up to 12 heads), else one
  // product [g2, g] x [g, n m] an example, P^T shared by the batch (tiled.h).
  static Tensor mix(const Tensor& T, const Tensor& P, const cuda_th::RowsLauncher* kernels) {
    const Tensor mixed = rows_mix(T, P, kernels);
    return mixed.defined() ? mixed : mix_heads_aligned(T, aligned_mixing(P, T.scalar_type()));
  }
  // P's gradient from the mixing's input T and its output's gradient dT (tiled.h), in P's dtype:
  // thx's kernel where it takes them (rows_mix_grad), else projection_grad's products.
  static Tensor mix_grad(const Tensor& T, const Tensor& dT, torch::ScalarType out,
                         const cuda_th::RowsLauncher* kernels) {
    const Tensor grad = rows_mix_grad(T, dT, kernels);
    return (grad.defined() ? grad : projection_grad(T, dT)).to(out);
  }
  // X [b,n,g,d] as a heads-major copy [b,g,n,d], made once a pass: a batched product cannot take
  // the transposed view as one batch stride and would copy it at every product that reads it.
  static Tensor heads(const Tensor& X) { return X.transpose(1, 2).contiguous(); }
  static Tensor logits(const Tensor& Qh, const Tensor& Kh) { return torch::matmul(Qh, Kh.transpose(2, 3)); }
};

struct HeadsGemmFn : torch::autograd::Function<HeadsGemmFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l_in,
                        const Tensor& P_w_in, const Tensor& bias_in, const Tensor& mask_in, int64_t kernels_in) {
    const Tensor P_l = present(P_l_in), P_w = present(P_w_in);
    const HeadsGemm f(kGemmName, Q, K, V, P_l, P_w, present(bias_in), present(mask_in));
    Tensor L = HeadsGemm::logits(HeadsGemm::heads(Q), HeadsGemm::heads(K));  // J [b,h_k,n,m]
    const auto* kernels = reinterpret_cast<const cuda_th::RowsLauncher*>(static_cast<intptr_t>(kernels_in));
    if (P_l.defined()) L = f.mix(L, f.Pl, kernels);
    // The bias, the mask and the softmax: one softmax-kernel launch where given, there is a bias or a
    // mask to save passes over, and it takes L; else ATen's passes.
    Tensor W = f.bias.defined() || f.mask.defined() ? rows_softmax(L, f.bias, f.mask, kernels) : Tensor();
    if (!W.defined()) W = f.weights_from(L, {0, 1, 2, 3});
    L = Tensor();
    const Tensor U = P_w.defined() ? f.mix(W, f.Pw, kernels) : W;
    ctx->save_for_backward({Q, K, V, P_l_in, P_w_in, bias_in, mask_in, W});
    ctx->saved_data["kernels"] = kernels_in;  // (the mixing kernels, backward too)
    return torch::matmul(U, HeadsGemm::heads(V)).transpose(1, 2);  // [b,n,h_v,d_v]
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const Tensor &Q = s[0], &K = s[1], &V = s[2], &W = s[7];
    const Tensor P_l = present(s[3]), P_w = present(s[4]), bias = present(s[5]);
    const HeadsGemm f(kGemmName, Q, K, V, P_l, P_w, bias, present(s[6]));
    const auto* kernels =
        reinterpret_cast<const cuda_th::RowsLauncher*>(static_cast<intptr_t>(ctx->saved_data["kernels"].toInt()));
    const Tensor dO = HeadsGemm::heads(grads[0].to(f.dt));  // [b,h_v,n,d_v]
    const Tensor Qh = HeadsGemm::heads(Q), Kh = HeadsGemm::heads(K);
    Tensor dV, dP_w, dW;
    {  // through O = U V and U = P_w^T W (U made again)
      const Tensor U = P_w.defined() ? f.mix(W, f.Pw, kernels) : W;
      dV = torch::matmul(U.transpose(2, 3), dO).transpose(1, 2);  // [b,m,h_v,d_v]
      const Tensor dU = torch::matmul(dO, HeadsGemm::heads(V).transpose(2, 3));
      if (P_w.defined()) {
        dP_w = f.mix_grad(W, dU, s[4].scalar_type(), kernels);
        dW = f.mix(dU, f.Pw.t(), kernels);
      } else {
        dW = dU;
      }
    }
    // The softmax: dL = W (dW - sum W dW), 0 where a row had no key (W = 0).
    const Tensor dL = at::_softmax_backward_data(dW, W, -1, f.dt);
    dW = Tensor();
    Tensor dbias, dP_l, dJ = dL;
    if (bias.defined()) dbias = f.bias_grad(dL, s[5].sizes()).to(s[5].scalar_type());
    if (P_l.defined()) {  // through L = P_l^T J (J made again)
      dP_l = f.mix_grad(HeadsGemm::logits(Qh, Kh), dL, s[3].scalar_type(), kernels);
      dJ = f.mix(dL, f.Pl.t(), kernels);
    }
    const Tensor dQ = torch::matmul(dJ, Kh).transpose(1, 2);
    const Tensor dK = torch::matmul(dJ.transpose(2, 3), Qh).transpose(1, 2);
    return {dQ, dK, dV, dP_l, dP_w, dbias, Tensor(), Tensor()};
  }
};

}  // namespace

Tensor heads_gemm_attention_core(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l,
                                 const Tensor& P_w, const Tensor& bias, const Tensor& mask,
                                 const cuda_th::RowsLauncher* kernels) {
  return HeadsGemmFn::apply(Q, K, V, placeholder(P_l), placeholder(P_w), placeholder(bias), placeholder(mask),
                            static_cast<int64_t>(reinterpret_cast<intptr_t>(kernels)));
}

}  // namespace thx
