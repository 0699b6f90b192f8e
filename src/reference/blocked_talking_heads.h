// blocked_talking_heads.h: the algorithm a fused ("flash-style") talking-heads kernel runs,
// written plainly in ATen over blocks of query rows and of keys, forward and backward, so that
// a GPU kernel has an exact model to be tested against and the algorithm itself is proven
// first (docs/fused_talking_heads.md derives it). Nothing of size n x m per head outlives
// one (query block, key block) tile: what the forward keeps for the backward is LSE [b,h,n].
//
// Shapes (the attention core's, attention/fused.h): Q [b,n,h_k,d_k], K [b,m,h_k,d_k],
// V [b,m,h_v,d_v], P_l [h_k,h], P_w [h,h_v] (either may be undefined: then h_k = h, resp.
// h = h_v, and that mixing is the identity: project_weights, project_logits, multi-head), bias
// broadcastable to [b,h,n,m] (added to the logits after P_l, as T5's and BERT's relative
// biases are), mask bool broadcastable to [b,h,n,m] (true: attend).
//
//   J = Q·K per head_k;  L = P_l^T J + bias (masked: -inf);  W = softmax_m(L);
//   U = P_w^T W;  O = U·V per head_v.
//
// Forward, per block of query rows, two passes over the key blocks:
//   1. J, L of the tile -> an online max and sum per (row, softmax head)  -> LSE [b,h,n];
//   2. J, L again -> W = exp(L - LSE) -> U -> O += U·V.
// Backward, per block of query rows, two passes:
//   A. W and dW = P_w dU, dU = dO·V^T  ->  D = sum_m W * dW  [b,h,n]: the softmax's
//      row term, which for talking-heads is no function of O and dO alone (it is for
//      multi-head: flash-attention's rowsum(dO * O));
//   B. everything again -> dL = W * (dW - D), and the sums into dQ, dK, dV, dP_l, dP_w and the
//      bias's gradient (each tile's share added in place: no atomics here, per-block partials
//      on a GPU).
// A row whose every key is masked gets O = 0 and no gradient (LSE = -inf; the einsum
// reference gives NaN there).
#pragma once
#include <torch/torch.h>

namespace thx::blocked {

struct Forward {
  torch::Tensor O;    // [b,n,h_v,d_v]
  torch::Tensor lse;  // [b,h,n] logsumexp of each softmax head's logits
};

struct Grads {
  torch::Tensor dQ, dK, dV;  // as Q, K, V
  torch::Tensor dP_l, dP_w;  // as P_l, P_w (undefined where they are)
  torch::Tensor dbias;       // as bias (its broadcast dims summed), undefined without one
};

Forward forward(const torch::Tensor& Q, const torch::Tensor& K, const torch::Tensor& V, const torch::Tensor& P_l,
                const torch::Tensor& P_w, const torch::Tensor& bias, const torch::Tensor& mask, int64_t block_n,
                int64_t block_m);

Grads backward(const torch::Tensor& Q, const torch::Tensor& K, const torch::Tensor& V, const torch::Tensor& P_l,
               const torch::Tensor& P_w, const torch::Tensor& bias, const torch::Tensor& mask,
               const torch::Tensor& lse, const torch::Tensor& dO, int64_t block_n, int64_t block_m);

}  // namespace thx::blocked
