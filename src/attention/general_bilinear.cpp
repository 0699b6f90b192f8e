#include "attention/general_bilinear.h"

#include <cmath>

#include "attention/fused.h"
#include "common/precision.h"

namespace thx {

using torch::Tensor;

GeneralBilinearAttention::GeneralBilinearAttention(const AttentionDims& dims) : Attention(dims) {
  TORCH_CHECK(dims.name() == "general_bilinear" && !dims.any_dynamic(),
              "GeneralBilinearAttention: dims are not general_bilinear: ", dims.summary());
  P = register_parameter("P", torch::empty({dims.d_X, dims.d_M, dims.h}));
  Q = register_parameter("Q", torch::empty({dims.d_M, dims.d_Y, dims.h}));
  init_normal(P, 1.0 / std::sqrt(double(dims.d_X) * dims.d_M));
  init_normal(Q, 1.0 / std::sqrt(double(dims.h) * dims.d_M));
}

Tensor GeneralBilinearAttention::forward(const Tensor& X, const Tensor& M, const Tensor& bias,
                                         const Tensor& mask) {
  const auto& d = dims_;
  TORCH_CHECK(X.dim() == 3 && X.size(2) == d.d_X, "attention: X must be [b,n,", d.d_X, "], got ",
              X.sizes());
  TORCH_CHECK(M.dim() == 3 && M.size(2) == d.d_M, "attention: M must be [b,m,", d.d_M, "], got ",
              M.sizes());
  const int64_t b = X.size(0), n = X.size(1), m = M.size(1), h = d.h;
  // Rows-major throughout: [b, n, h, .], so that no tensor is transposed.
  // Products in the compute dtype (common/precision.h); heads_softmax runs in fp32 inside.
  const Tensor Mc = to_compute(M);
  Tensor XP = torch::matmul(to_compute(X), to_compute(P).permute({0, 2, 1}).reshape({d.d_X, h * d.d_M}))
                  .view({b, n * h, d.d_M});                                         // [b,n*h,d_M]
  Tensor L = torch::bmm(XP, Mc.transpose(1, 2)).view({b, n, h, m});               // [b,n,h,m]
  Tensor W = heads_softmax(L, {}, {}, bias, mask);                                  // [b,n,h,m]
  if (d.dropout > 0 && is_training()) W = torch::dropout(W, d.dropout, true);
  Tensor WM = torch::bmm(W.reshape({b, n * h, m}), Mc).view({b, n, h * d.d_M});     // [b,n,h*d_M]
  return torch::matmul(WM, to_compute(Q).permute({2, 0, 1}).reshape({h * d.d_M, d.d_Y}));  // [b,n,d_Y]
}

Tensor GeneralBilinearAttention::forward_cached(const Tensor& X, const Tensor& M,
                                                AttentionCache& cache, const Tensor& bias,
                                                const Tensor& mask) {
  auto& c = cache.memory;
  if (!(cache.fixed && c.count("M"))) c["M"] = c.count("M") ? torch::cat({c["M"], M}, 1) : M;
  return forward(X, c["M"], bias, mask);
}

}  // namespace thx
