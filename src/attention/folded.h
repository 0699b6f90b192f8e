// folded.h: the talking-heads family off the CPU as large products (`thx --th-path folded`).
//
// A mixing across heads is linear, so it folds into the product beside it:
//   L[n,h,m] = sum_k P_l[k,h] Q_k[n].K_k[m] = Q'[n,h,:].K[m,:],  Q'[n,h,(k,d)] = P_l[k,h] Q[n,k,d]
//   O[n,(v,e)] = sum_{h,m} W[n,h,m] P_w[h,v] V[m,v,e] = W[n,(h,m)] . V'[(h,m),(v,e)],
//                V'[(h,m),(v,e)] = P_w[h,v] V[m,v,e]
// Each example's logits are then one product [n h, h_k d_k] x [h_k d_k, m] (K's heads side by side
// as one matrix, as they leave the projection) and its output one [n, h m] x [h m, h_v d_v]; the
// backward is four more such products. Every multiply runs in cuBLAS's large GEMMs, with no
// per-element loop of thx's own: h_k d_k / (d_k + h) times the multiplies of the mixed products
// (12x at T5-base's 48 heads of 16), traded for the per-element work that bounds the row and
// flash kernels (docs/fused_talking_heads.md, "The folded path").
//
// Kept for backward: the weights W [b,n,h,m] in the operands' dtype, nothing else of that size;
// Q' and V' ([b,n,h,h_k d_k] and [b,h,m,h_v d_v], O(n)) are made again. Numerics: Q' and V' are
// products made in fp32 and rounded once to the operands' dtype; the logits and weights are in
// that dtype, as a product's output is (the bias added in fp32, rounded once), the softmax's
// statistics in fp32 (ATen's); the gradients' sums over the folded dim are batched products in
// that dtype too, P_l's and P_w's then summed over the examples in fp32 (fp64 for fp64). A row
// whose every key is masked gets O = 0 and no gradient, as on the tiled path.
#pragma once
#include <torch/torch.h>

namespace thx {

// Q [b,n,h_k,d_k], K [b,m,h_k,d_k], V [b,m,h_v,d_v], P_l [h_k,h], P_w [h,h_v] (either may be
// undefined: the identity, at h times the multiplies), bias broadcastable to [b,h,n,m], mask bool
// broadcastable to [b,h,n,m] (true: attend) -> O [b,n,h_v,d_v], differentiable in Q, K, V, P_l,
// P_w and the bias. Any device; ATen's operations only.
torch::Tensor folded_attention_core(const torch::Tensor& Q, const torch::Tensor& K, const torch::Tensor& V,
                                    const torch::Tensor& P_l, const torch::Tensor& P_w, const torch::Tensor& bias,
                                    const torch::Tensor& mask);

}  // namespace thx
