// tiled.h: the talking-heads family's attention core off the CPU (the GPU's default path): the
// algorithm of reference/blocked_talking_heads.h (docs/fused_talking_heads.md) over blocks of
// query rows with every key at once, so each block's softmax is whole and needs no online
// rescaling. The products (Q K^T, U V and their gradients) are ATen's (cuBLAS); what lies between
// them, per block of rows, is either ATen's composition (mixings as batched products, ATen's
// softmax; nothing kept for backward but the inputs) or, where a RowsLauncher is given and takes
// the problem, thx's row kernels (cuda/th_rows_args.h: one pass over J forward, two backward,
// keeping the rows' LSE [b,h,n]). Nothing of size [b,h,n,m] outlives one block. The batched ATen
// composition (attention_core_reference) keeps fp32 J and W of every layer for backward: on an
// H100 a bf16 T5-base step at 48 heads did not fit 80 GB at batch 32.
//
// Numerics as attention_core_reference: the per-head products (Q·K, U·V and their gradients)
// in the operands' dtype, the logits, mixings, softmax and every gradient sum in fp32; a
// block's rows are computed exactly as the whole tensor's would be. A row whose every key is
// masked gets O = 0 and no gradient (the reference: NaN).
#pragma once
#include <torch/torch.h>

#include <string>

namespace thx {
namespace cuda_th {
struct RowsLauncher;
}

// [b,g,I,m] mixed across heads by P [g,g2] -> [b,g2,I,m]: P^T times T[b] seen as [g, I*m], one
// batched product with the heads as its inner dim (no permuted copy of T; shared with fused.cpp).
torch::Tensor mix_heads(const torch::Tensor& T, const torch::Tensor& P);
// The same in T's dtype (the heads-major and narrow tiled paths' mixings): one batched product
// with Pt = aligned_mixing(P, T's dtype) shared by the batch.
torch::Tensor mix_heads_aligned(const torch::Tensor& T, const torch::Tensor& Pt);
// P [g,g2] as mix_heads_aligned takes it: P^T [g2,g] rounded to `dtype`, laid out for cuBLAS with
// its leading dimension padded to a multiple of 8 elements (16 bytes in bf16), so that at 12 heads
// (24-byte rows) the product may still take cuBLAS's kernels that need 16-byte alignment. The
// padding is NaN and never read (a product that read it would show it in every test). Made once a
// problem where a path mixes many blocks (tiled.cpp), not once a block.
torch::Tensor aligned_mixing(const torch::Tensor& P, torch::ScalarType dtype);
// A mixing's gradient from its input A [b,g,I,m] and its output's gradient B [b,g2,I,m]: sum_b
// A[b] B[b]^T over the I m positions -> [g, g2], in A's dtype for fp32 and fp64, else in fp32
// with each example's product written in fp32 (compat::bmm_wide: no sum rounded to bf16).
torch::Tensor projection_grad(const torch::Tensor& A, const torch::Tensor& B);

// Q [b,n,h_k,d_k], K [b,m,h_k,d_k], V [b,m,h_v,d_v], P_l [h_k,h], P_w [h,h_v] (either may be
// undefined), bias broadcastable to [b,h,n,m], mask bool broadcastable to [b,h,n,m] -> O
// [b,n,h_v,d_v], differentiable in Q, K, V, P_l, P_w and bias. block_rows 0: as many query rows
// as keep one [b, heads, rows, m] fp32 tensor within 512 MiB. kernels: the row kernels' launcher
// (CUDA's, cuda_th_rows_launcher(), for CUDA tensors; the tests', the CPU emulator), used where
// tiled_rows_unsupported says "", else ATen's composition; the autograd node keeps its address for
// the backward, so it must outlive that (CUDA's is static). narrow: ATen's composition in the
// operands' dtype (`--th-path tiled-gemm`: for bf16 the mixings are bf16 products on tensor cores,
// P_l and P_w rounded to bf16, and every [b,h,I,m] tensor half the size; the softmax's statistics
// and the bias's and mixings' gradient sums stay fp32), not in fp32 as the numerics below say;
// with kernels, their softmax kernels take the bias, mask and softmax alone where there is a bias or
// a mask (one launch a block, rows_softmax below: the sum of L and the bias not rounded to L's
// dtype), the mixings staying cuBLAS's products.
torch::Tensor tiled_attention_core(const torch::Tensor& Q, const torch::Tensor& K, const torch::Tensor& V,
                                   const torch::Tensor& P_l, const torch::Tensor& P_w, const torch::Tensor& bias,
                                   const torch::Tensor& mask, int64_t block_rows = 0,
                                   const cuda_th::RowsLauncher* kernels = nullptr, bool narrow = false);

// W = softmax over the keys of L [b,h,n,m] + bias (broadcastable, added in fp32), masked (bool,
// broadcastable; true: attend), in L's dtype, by the launcher's softmax kernels
// (cuda/th_softmax_kernels.cuh: a warp a row): one launch, which reads L once (twice for rows of
// more than 2,048 keys) and writes W once, the softmax's statistics in fp32; a row with no key
// gets 0. (ATen's composition of the same adds the bias, masks, takes the softmax and zeroes such
// rows: four passes that each read and write [b,h,n,m].) Undefined where `kernels` is null or has
// no softmax kernels, L is not a contiguous, non-empty fp32 or bf16 tensor, or the mask not bool;
// a bias or mask that does not broadcast to L is refused in one line. The heads-major path's
// softmax (heads_gemm.h), and the narrow tiled path's with kernels.
torch::Tensor rows_softmax(const torch::Tensor& L, const torch::Tensor& bias, const torch::Tensor& mask,
                           const cuda_th::RowsLauncher* kernels);

// T [b,g,n,m] mixed across heads by P [g,g2] -> [b,g2,n,m] in T's dtype (P's values rounded to it,
// the sums in fp32), by the launcher's mixing kernel (cuda/th_mix_kernels.cuh: a thread a position
// or a pair, reading each value once): what mix_heads_aligned gives, without cuBLAS's products
// whose inner dimension, g, is short. Undefined where `kernels` is null or has no mixing kernels,
// T is not a contiguous, non-empty fp32 or bf16 tensor, g or g2 is over cuda_th::kMixHeadsMax, or
// b over 65,535 (a grid's y).
torch::Tensor rows_mix(const torch::Tensor& T, const torch::Tensor& P, const cuda_th::RowsLauncher* kernels);
// The mixing's weights' gradient from its input A [b,g,n,m] and its output's gradient B
// [b,g2,n,m], as projection_grad gives it (fp32), by the launcher's kernel: per-block partial sums
// in fp32, then one sum of them (no atomics: the same bits at every run). Undefined where rows_mix
// would be for A (or B is not A's dtype, contiguous and shaped alike).
torch::Tensor rows_mix_grad(const torch::Tensor& A, const torch::Tensor& B, const cuda_th::RowsLauncher* kernels);

// Why the row kernels do not take this problem, or "" where they do: Q, K, V of one dtype, fp32
// or bf16; at most cuda_th::kRowHeadsMax heads of each kind; a bool mask.
std::string tiled_rows_unsupported(const torch::Tensor& Q, const torch::Tensor& K, const torch::Tensor& V,
                                   const torch::Tensor& P_l, const torch::Tensor& mask);

}  // namespace thx
