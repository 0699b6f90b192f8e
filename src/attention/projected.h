// projected.h: the shared computation of multi-head attention (section 3.3), talking-heads
// attention (section 4), its logits-only and weights-only hybrids (Tables 3 and 6) and its
// dynamic projections (Appendix A).
//
// These variants differ only in which parameters exist; the computation is written once,
// here, and each variant's own file registers its parameters and states its algorithm:
//
//   Q[b,h_k,n,d_k] = X P_q          K[b,h_k,m,d_k] = M P_k        V[b,h_v,m,d_v] = M P_v
//                    (+ bias_q)                       (+ bias_k)                       (+ bias_v)
//   J[b,h_k,n,m]   = Q K^T                                          dot products
//   L[b,h,n,m]     = J·P_l (+ J·R_Xl[n] + J·R_Ml[m])  + bias        logits   (J when no P_l)
//   W[b,h,n,m]     = softmax_m(L, mask)                             weights
//   U[b,h_v,n,m]   = W·P_w (+ W·R_Xw[n] + W·R_Mw[m]), dropout      (W when no P_w)
//   O[b,h_v,n,d_v] = U V                                            Y[b,n,d_Y] = O P_o (+ bias_o)
//
// The static variants run on the fused core (fused.h), in the [b, n, heads, .] layout the
// projections produce, with no transposed copies. The dynamic projections and attention
// dropout (fine-tuning) take an ATen path in heads-major layout [b, heads, n, m].
// There is no 1/sqrt(d_k) at run time: as the paper says, it is folded into P_q's init.
#pragma once
#include "attention/attention.h"

namespace thx {

class ProjectedAttention : public Attention {
 public:
  torch::Tensor forward(const torch::Tensor& X, const torch::Tensor& M,
                        const torch::Tensor& bias = {}, const torch::Tensor& mask = {}) override;
  torch::Tensor forward_cached(const torch::Tensor& X, const torch::Tensor& M,
                               AttentionCache& cache, const torch::Tensor& bias = {},
                               const torch::Tensor& mask = {}) override;

  // Paper names and shapes; undefined where the variant lacks them.
  torch::Tensor P_q, P_k, P_v, P_o;  // [d_X,d_k,h_k] [d_M,d_k,h_k] [d_M,d_v,h_v] [d_Y,d_v,h_v]
  torch::Tensor P_l, P_w;            // [h_k,h] [h,h_v]
  torch::Tensor P_Xl, P_Ml;          // [d_X,h_k,h] [d_M,h_k,h]
  torch::Tensor P_Xw, P_Mw;          // [d_X,h,h_v] [d_M,h,h_v]
  torch::Tensor bias_q, bias_k, bias_v, bias_o;  // [d_k,h_k] [d_k,h_k] [d_v,h_v] [d_Y], if biases

 protected:
  // Registers and initializes (Mesh TensorFlow's normal stds) every parameter `dims` calls for.
  explicit ProjectedAttention(const AttentionDims& dims);

 private:
  struct Memory {
    torch::Tensor K, V;        // [b,m,h_k,d_k] [b,m,h_v,d_v]
    torch::Tensor R_Ml, R_Mw;  // [b,m,h_k,h] [b,m,h,h_v], when dynamic
  };
  Memory project_memory(const torch::Tensor& M);
  torch::Tensor attend(const torch::Tensor& X, const Memory& mem, const torch::Tensor& bias,
                       const torch::Tensor& mask);
};

}  // namespace thx
