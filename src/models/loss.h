// loss.h: token cross-entropy plus T5's z-loss, fused.
//
// For logits x [N,V], targets t [N] (0 = padding, weight 0):
//   lse_i = log sum_j exp(x_ij)
//   nll_sum  = sum_i w_i (lse_i - x_i,t_i)
//   loss_sum = nll_sum + z * sum_i w_i lse_i^2
// Backward: dx_ij = w_i [ (g_loss + g_nll)(p_ij - [j = t_i]) + 2 z g_loss lse_i p_ij ], with
// p = softmax(x). Unfused, ATen's logsumexp, gather and their backward passes make several
// passes over the [N,V] logits and allocate as many temporaries; here there is one pass
// forward (per row, in parallel) and one backward. fp32 or bf16 logits on the CPU (a bf16 row
// is converted to fp32 before anything is summed; the gradient comes back in bf16), and on a GPU
// where thx was built with its CUDA kernels (loss_cuda.h: a block a row, the same math); other
// tensors, and every tensor under `bench train --aten loss` (common/runtime.h), take the ATen
// composition (loss_reference, also fp32 inside), which tests compare against.
#pragma once
#include <torch/torch.h>

namespace thx {

struct LossSums {
  torch::Tensor loss_sum, nll_sum;  // scalars
  torch::Tensor lse;                // [N], no gradient
};

LossSums cross_entropy_z_loss(const torch::Tensor& logits, const torch::Tensor& targets, double z);
LossSums cross_entropy_z_loss_reference(const torch::Tensor& logits, const torch::Tensor& targets, double z);

}  // namespace thx
