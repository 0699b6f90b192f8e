// heads_gemm.h: the talking-heads family off the CPU as heads-major products in the operands'
// dtype (`thx --th-path gemm`).
//
// The paper's composition, each step one cuBLAS product or one ATen pass over [b,h,n,m]:
//   J = Q_k K_k^T per head             [b,h_k,n,m]   (a batched product, K = d_k)
//   L = P_l^T J per example            [b,h,n,m]     (one product [h, h_k] x [h_k, n m])
//   W = softmax(L + bias, masked)      [b,h,n,m]     (one kernel launch, or ATen's softmax)
//   U = P_w^T W per example            [b,h_v,n,m]   (one product [h_v, h] x [h, n m])
//   O = U_v V_v per head               [b,n,h_v,d_v]
// Heads-major, so no step transposes a [b,h,n,m] tensor, and the mixings are products with
// K = h_k or h whose rows are the examples' n m positions: memory-bound, on tensor cores in
// bf16. That is what the batched composition (`--th-path batched`) does in fp32, where the
// mixings run at fp32's rate off the tensor cores and every tensor is twice the size.
//
// Kept for backward: the weights W [b,h,n,m] in the operands' dtype, nothing else of that size;
// J and U are made again (one product each). The backward's products: dU = dO V^T, dV = U^T dO,
// dW = P_w dU, dL = ATen's softmax backward, dJ = P_l dL, dQ = dJ K, dK = dJ^T Q; P_w's and P_l's
// gradients are products over the n m positions ([h, n m] x [n m, h_v] per example), written
// in fp32 where LibTorch can (compat::bmm_wide) and summed over the examples in fp32.
//
// The mixings across up to 12 heads (in and out): where a launcher of thx's kernels is given
// (`--th-path gemm` on a GPU of a build with them), thx's mixing kernel and its weights' gradient
// (tiled.h, rows_mix and rows_mix_grad; cuda/th_mix_kernels.cuh: a thread a position, each value
// read once, the sums in fp32) instead of cuBLAS's products, whose inner dimension of 12 took a
// slow kernel on an H200 (benchmarks.md, the fifth GPU session); at more heads, cuBLAS's.
//
// The softmax: where a launcher of thx's kernels is given (`--th-path gemm` on a GPU of a build
// with them), there is a bias or a mask (T5's every layer) and its softmax kernels take L, one
// launch of theirs (tiled.h, rows_softmax; a warp a row): it reads L once (up to 2,048 keys) and
// writes W once, the bias added and the statistics kept in fp32. Else (`--th-path gemm-aten`, a build without
// them, or neither bias nor mask, where ATen's softmax alone is one pass each way) ATen's
// composition: the bias added in place, the mask, ATen's softmax, the rows without keys zeroed,
// up to four passes that each read and write [b,h,n,m].
//
// Numerics: J, L, W, U and their gradients are in the operands' dtype, as a product's output is;
// P_l and P_w enter the mixings' products rounded to that dtype (as autocast rounds a weight);
// the bias is added in fp32 (ATen's composition rounds the sum to L's dtype, the kernel does
// not); the softmax keeps its statistics in fp32. A row whose every key is masked gets O = 0 and
// no gradient, as on the tiled and folded paths.
#pragma once
#include <torch/torch.h>

namespace thx {
namespace cuda_th {
struct RowsLauncher;
}

// Takes and gives what folded_attention_core does (folded.h: the shapes, the mask's sense, the
// gradients); an undefined P_l or P_w is no mixing. Any device. kernels: thx's kernels' launcher
// for the softmax and the mixings (CUDA's for CUDA tensors, the tests' emulator), or null: ATen's
// operations only. The autograd node keeps it for the backward's mixings (a launcher lives as
// long as the program).
torch::Tensor heads_gemm_attention_core(const torch::Tensor& Q, const torch::Tensor& K, const torch::Tensor& V,
                                        const torch::Tensor& P_l, const torch::Tensor& P_w, const torch::Tensor& bias,
                                        const torch::Tensor& mask, const cuda_th::RowsLauncher* kernels = nullptr);

}  // namespace thx
