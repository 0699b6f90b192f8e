// th_rows_args.h: what the talking-heads row kernels (th_rows_kernels.cuh) take, in plain C++ so
// that the host code preparing a launch (attention/tiled.cpp) needs no CUDA header and no emulator.
//
// The row kernels are the tiled path's (tiled.h) element-wise work on the GPU: for one query row
// of one example they take the per-head products J = Q K^T of every head and key (from cuBLAS)
// and do everything between the two products in one pass over them: the logits' mixing by P_l,
// bias and mask, the softmax over the keys (fp32), the weights' mixing by P_w, written once in the
// products' dtype for U V; backward, the same recomputed from J and the forward's LSE, with dU =
// dO V^T, to dJ (for dQ and dK), U (for dV) and, in fp32, W (for P_w's gradient) and dL (for P_l's
// and the bias's). ATen's composition of the same steps makes about a dozen passes over fp32
// [b,h,rows,m] tensors forward and three dozen backward, and mixes heads with cuBLAS products
// whose inner dimension is the number of heads.
#pragma once
#include <cstdint>

#include "common/bf16_bits.h"

namespace thx::cuda_th {

// The most heads (h_k, h or h_v) the row kernels take; each thread keeps a vector of this many
// in registers, so they are built for a few sizes (kRowHeads) and a problem takes the smallest
// that holds its heads.
constexpr int kRowHeadsMax = 64;
constexpr int kRowHeads[] = {16, 32, 48, 64};
inline int row_heads_bucket(int heads) {
  for (int H : kRowHeads)
    if (heads <= H) return H;
  return 0;
}

// One launch over the query rows [0, rows) of a block of rows: grid (ceil(rows / rows_per_block),
// b), each block striding over its rows, its threads over the keys. Planes are contiguous
// [b, heads, rows, m]; the bias and the mask are read through strides (0 where they broadcast)
// from their element at (example 0, head 0, the launch's first row, key 0). lse is [b, h, lse_n],
// from column lse_row0 on. Optional pointers are null where absent.
template <typename T>
struct RowsArgs {
  const T* J = nullptr;    // [b, h_k, rows, m]
  const T* dU = nullptr;   // backward: [b, h_v, rows, m] (dO V^T)
  const float* P_l = nullptr;  // [h_k, h] or null: L = J (h_k == h)
  const float* P_w = nullptr;  // [h, h_v] or null: U = W (h_v == h)
  const float* bias = nullptr;
  int64_t bias_stride[4] = {0, 0, 0, 0};
  const uint8_t* mask = nullptr;  // nonzero: attend
  int64_t mask_stride[4] = {0, 0, 0, 0};
  float* lse = nullptr;  // forward writes it, backward reads it; -inf for a row with no key
  int64_t lse_n = 0, lse_row0 = 0;
  T* U = nullptr;        // [b, h_v, rows, m]: forward and backward write it
  T* dJ = nullptr;       // backward: [b, h_k, rows, m]
  float* W = nullptr;    // backward, optional: [b, h, rows, m] fp32
  float* dL = nullptr;   // backward, optional: [b, h, rows, m] fp32
  int b = 0, h_k = 0, h = 0, h_v = 0, rows = 0, m = 0, rows_per_block = 1;
};

// Bytes of shared memory a row kernel needs with heads bucket H and `threads` per block: the
// mixings' matrices (P_l as [h_k][H], P_w transposed as [h_v][H], zero past h), the row's LSE and
// D [H], and each thread's own statistics: forward a running max and sum per head, backward a
// partial D per head ([H][threads] each).
inline int64_t rows_shared_bytes(int H, int h_k, int h_v, bool P_l, bool P_w, int threads, bool backward) {
  const int64_t floats = (P_l ? int64_t(h_k) * H : 0) + (P_w ? int64_t(h_v) * H : 0) + 2 * H +
                         (backward ? 1 : 2) * int64_t(H) * threads;
  return floats * 4;
}

// How the row kernels run: CUDA's (th_rows.cu) or the CPU emulator's (the tests).
struct RowsLauncher {
  int threads;  // per block, a multiple of 32
  // A block takes 4 rows in turn (so that its copies of P_l and P_w serve more keys) where the
  // launch has at least this many (examples x rows), else one.
  int64_t group_rows_from;
  void (*forward_f32)(const RowsArgs<float>&, int H, unsigned grid_x, unsigned grid_y, int threads, int64_t bytes);
  void (*forward_bf16)(const RowsArgs<thx_bf16>&, int H, unsigned grid_x, unsigned grid_y, int threads,
                       int64_t bytes);
  void (*backward_f32)(const RowsArgs<float>&, int H, unsigned grid_x, unsigned grid_y, int threads, int64_t bytes);
  void (*backward_bf16)(const RowsArgs<thx_bf16>&, int H, unsigned grid_x, unsigned grid_y, int threads,
                        int64_t bytes);
};

}  // namespace thx::cuda_th

namespace thx {
// CUDA's launcher where thx was built with its CUDA kernels (THX_CUDA_KERNELS), else null.
const cuda_th::RowsLauncher* cuda_th_rows_launcher();
}  // namespace thx
