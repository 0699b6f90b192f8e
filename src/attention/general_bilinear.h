// general_bilinear.h: general bilinear multihead attention, GBMA (section 6).
//
//   L[n,m,h] = X[n,d_X] · M[m,d_M] · P[d_X,d_M,h]        W[n,m,h] = softmax_m(L)
//   Y[n,d_Y] = W[n,m,h] · M[m,d_M] · Q[d_M,d_Y,h]
//
// Multi-head and talking-heads attention are GBMA with P and Q factored (the tests prove it).
// Computed as XP[n,h,d_M] = X P, then L = XP·M, and WM[n,h,d_M] = W·M, then Y = WM·Q:
// 2·h·n·d_X·d_M-ish multiplies, which is why the paper calls it impractical.
//
// Initialization (a choice of ours; Mesh TensorFlow never trained GBMA at this scale): normal
// with std (d_X·d_M)^-1/2 for P and (h·d_M)^-1/2 for Q. With unit-variance inputs this gives
// logits of variance 1, as P_q's folded scaling does for multi-head, and outputs of variance
// at most 1, as P_o's std does.
#pragma once
#include "attention/attention.h"

namespace thx {

class GeneralBilinearAttention : public Attention {
 public:
  explicit GeneralBilinearAttention(const AttentionDims& dims);

  torch::Tensor forward(const torch::Tensor& X, const torch::Tensor& M,
                        const torch::Tensor& bias = {}, const torch::Tensor& mask = {}) override;
  torch::Tensor forward_cached(const torch::Tensor& X, const torch::Tensor& M,
                               AttentionCache& cache, const torch::Tensor& bias = {},
                               const torch::Tensor& mask = {}) override;

  torch::Tensor P;  // [d_X,d_M,h]
  torch::Tensor Q;  // [d_M,d_Y,h]
};

}  // namespace thx
