// th_rows_args.h: what the talking-heads row kernels (th_rows_kernels.cuh) take, in plain C++ so
// that the host code preparing a launch (attention/tiled.cpp) needs no CUDA header and no emulator.
//
// The row kernels are the tiled path's (tiled.h) element-wise work on the GPU: for one query row
// of one example they take the per-head products J = Q K^T of every head and key (from cuBLAS)
// and do everything between the two products in one pass over them: the logits' mixing by P_l,
// bias and mask, the softmax over the keys (fp32), the weights' mixing by P_w, written once in the
// products' dtype for U V; backward, the same recomputed from J and the forward's LSE, with dU =
// dO V^T, to dJ (for dQ and dK), U (for dV), and P_l's and P_w's gradients: up to 32 heads each
// block's partial sums of them (rows_sum_projections), at more the fp32 W and dL that ATen sums
// them from; dL in fp32 where the bias needs it. ATen's composition of the same steps makes
// about a dozen passes over fp32 [b,h,rows,m] tensors forward and three dozen backward, and mixes
// heads with cuBLAS products whose inner dimension is the number of heads.
#pragma once
#include <cstdint>

#include "attention/cuda/th_flash_args.h"
#include "common/bf16_bits.h"
#include "common/host_device.h"

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

// One launch over the query rows [0, rows) of a block of rows: grid (b, ceil(rows /
// rows_per_block)), the examples fastest, each block striding over its rows, its threads over the
// keys. Planes are contiguous
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
  // Backward, where P_l or P_w and rows_sum_projections: each block's sums over its rows' keys of
  // J dL^T ([h_k][h], with P_l) then W dU^T ([h][h_v], with P_w), one row of rows_partial_sums
  // floats a block (in the grid's order, x fastest).
  float* dP = nullptr;
  int b = 0, h_k = 0, h = 0, h_v = 0, rows = 0, m = 0, rows_per_block = 1;
};

// Whether the backward with heads bucket H sums the projections' gradients itself. Up to 32 heads:
// there the kernels are bound by memory, and the sums replace two fp32 planes and ATen's products
// over them. Not at 48 and 64, where the staged keys would take 136 KB of shared memory or more
// (one block a multiprocessor), the sums add about half again to kernels already bound by their
// fp32 mixings, and at 64 the registers spilled. (A choice from counts, not yet from a GPU.)
constexpr int kRowSumsMaxHeads = 32;  // (a constant, which device code may read; a host function it may not call)
constexpr bool rows_sum_projections(int H) { return H <= kRowSumsMaxHeads; }

// The floats of a block's partial sums of the projections' gradients: J dL^T [h_k][h] with P_l,
// then W dU^T [h][h_v] with P_w (on the host for the launch, on the device for the kernel).
THX_HOST_DEVICE
inline int64_t rows_partial_sums(int h_k, int h, int h_v, bool P_l, bool P_w) {
  return (P_l ? int64_t(h_k) * h : 0) + (P_w ? int64_t(h) * h_v : 0);
}
// The floats of the backward's staged keys: a row of threads + 1 floats (+ 1: a bank apart) per
// head of J and dL (with P_l) and of W and dU (with P_w).
inline int64_t rows_stage_floats(int h_k, int h, int h_v, bool P_l, bool P_w, int threads) {
  return ((P_l ? h_k + h : 0) + (P_w ? h + h_v : 0)) * int64_t(threads + 1);
}
// Bytes of shared memory a row kernel needs with heads bucket H and `threads` per block: the
// mixings' matrices (P_l as [h_k][H], P_w transposed as [h_v][H], zero past h), the row's LSE and
// D [H], and each thread's own statistics: forward a running max and sum per head ([H][threads]
// each); backward a partial D per head ([H][threads]), sharing its place with the staged keys,
// and the block's partial sums of the projections' gradients.
inline int64_t rows_shared_bytes(int H, int h_k, int h, int h_v, bool P_l, bool P_w, int threads, bool backward) {
  const bool sums = backward && rows_sum_projections(H);
  const int64_t slots = int64_t(H) * threads, stage = sums ? rows_stage_floats(h_k, h, h_v, P_l, P_w, threads) : 0;
  const int64_t floats = (P_l ? int64_t(h_k) * H : 0) + (P_w ? int64_t(h_v) * H : 0) + 2 * H +
                         (backward ? (slots > stage ? slots : stage) : 2 * slots) +
                         (sums ? rows_partial_sums(h_k, h, h_v, P_l, P_w) : 0);
  return floats * 4;
}

// Where the bf16 tensor-core row kernels (th_rows_tc_kernels.cuh) keep things in shared memory,
// in bytes from its start (-1: absent), for `warps` warps a block and heads bucket H; `bytes` in
// all. Forward: P_l^T and P_w^T as bf16 [out][in] with rows of H + 8 (ldmatrix's rows a bank
// group apart), each warp's statistics per head [warps][H] (two planes), the row's LSE and D [H],
// a chunk's keys of J staged as bf16 [H][16 warps + 8] (with P_l; two such buffers: the next
// chunk's keys are copied into one while the other is read), and the keys' outputs staged the
// same way on their way to global memory (su: U, and in the backward then dJ). Backward: also
// P_l and P_w, dU staged as J (with P_w, two buffers), and with the projections' sums (sums) the
// chunk's dL (with P_l) and W (with P_w) staged beside them, and the partial sums as 16 x 8 tiles
// of fp32 [tile][32 lanes][4] (H / 16 x H / 8 tiles each of J dL^T and W dU^T). Every offset is a
// multiple of 16.
struct RowsTcLayout {
  int64_t pl_t, pl, pw_t, pw, slot0, slot1, lse, d, sj, sdl, sw, sdu, su, acc, bytes;
};
THX_HOST_DEVICE
inline RowsTcLayout rows_tc_layout(int H, int warps, bool P_l, bool P_w, bool backward, bool sums) {
  RowsTcLayout L;
  int64_t at = 0;
  auto take = [&](bool present, int64_t bytes) {
    const int64_t here = present ? at : -1;
    at += present ? bytes : 0;
    return here;
  };
  const int64_t matrix = int64_t(H) * (H + 8) * 2, stage = int64_t(H) * (16 * warps + 8) * 2;
  const int64_t tiles = ((P_l ? 1 : 0) + (P_w ? 1 : 0)) * int64_t(H / 16) * (H / 8);
  L.pl_t = take(P_l, matrix), L.pl = take(P_l && backward, matrix);
  L.pw_t = take(P_w, matrix), L.pw = take(P_w && backward, matrix);
  L.slot0 = take(true, int64_t(warps) * H * 4), L.slot1 = take(true, int64_t(warps) * H * 4);
  L.lse = take(true, H * 4), L.d = take(true, H * 4);
  const bool staged = backward && sums;
  L.sj = take(P_l, 2 * stage), L.sdu = take(P_w && backward, 2 * stage);  // (two buffers: each_chunk)
  L.sdl = take(staged && P_l, stage), L.sw = take(staged && P_w, stage);
  L.su = take(true, stage);
  L.acc = take(staged, tiles * 128 * 4);
  L.bytes = at;
  return L;
}

// The most heads the tensor-core row kernels take (buckets 16, 32, 48); more take the FMAs. At 64
// their backward spilled registers at 255 a thread (nvcc 13, sm_90).
constexpr int kRowTcHeadsMax = 48;
// Whether the tensor-core row kernels' 32-bit offsets within an example hold (their example's and
// row's starts are 64-bit): a plane's heads x rows x m, and from a row's start of the bias and the
// mask (strides as RowsArgs has them, 0 where they broadcast) (h - 1) x the head stride + (m - 1) x
// the key stride. Else the FMAs, whose offsets are 64-bit.
inline bool rows_tc_offsets_fit(int64_t heads, int64_t rows, int64_t m, int64_t h, const int64_t (&bias)[4],
                                const int64_t (&mask)[4]) {
  constexpr int64_t kMax = (int64_t{1} << 31) - 1;
  auto from_row = [&](const int64_t (&s)[4]) { return (h - 1) * s[1] + (m - 1) * s[3] <= kMax; };
  return heads * rows * m <= kMax && from_row(bias) && from_row(mask);
}

// The heads-major path's softmax (th_softmax_kernels.cuh): a warp a row of [b,h,n,m], four a
// block, and how many keys a lane keeps in registers for rows of m keys, taken in pairs or one at
// a time: the smallest bucket that holds a row (16, then 64 in pairs or 32 one at a time, each a
// kernel of its own), or 0 past the largest (L then read twice). (One at a time, 64 keys a lane
// spilled 80 bytes: nvcc 13, sm_90.)
constexpr int kSoftmaxThreads = 128;
inline int softmax_cache(int64_t m, bool pairs) {
  const int most = pairs ? 64 : 32;
  return m <= 16 * 32 ? 16 : m <= int64_t(most) * 32 ? most : 0;
}

// The heads-major path's mixings across few heads (th_mix_kernels.cuh), where cuBLAS's products
// with so short an inner dimension take slow kernels (benchmarks.md, the fifth GPU session). A
// mixing: out[b] = P^T A[b], A [b,g,N] and out [b,g2,N] (N = n m, an example's positions); its
// weights' gradient: each block's sum of A[b,k,p] B[b,o,p] over its positions, partial [b,
// blocks an example, g, g2] in fp32, summed by the host. One size of registers (kMixHeadsMax in
// and out); a block of kMixThreads takes kMixGroups groups of kMixThreads positions (pairs: twice
// as many) in the mixing, and kMixGradSteps in the gradient.
constexpr int kMixHeadsMax = 12;
constexpr int kMixThreads = 256;
constexpr int kMixGroups = 2;
constexpr int kMixGradSteps = 16;
template <typename T>
struct MixArgs {
  const T* A = nullptr;      // [b, g, N]: the mixing's input
  const T* B = nullptr;      // the gradient's: the mixing's output's gradient [b, g2, N]
  T* out = nullptr;          // the mixing's: [b, g2, N]
  const float* P = nullptr;  // the mixing's: P [g, g2], each value one of T's (as autocast rounds a weight)
  float* partial = nullptr;  // the gradient's: [b, gridDim.x, g, g2]
  int g = 0, g2 = 0;
  int64_t N = 0;
};

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
  // bf16 with the mixings and the projections' gradients on tensor cores (th_rows_tc_kernels.cuh,
  // shared memory by rows_tc_layout), or null: bf16 takes the fp32 FMAs above.
  void (*forward_bf16_tc)(const RowsArgs<thx_bf16>&, int H, unsigned grid_x, unsigned grid_y, int threads,
                          int64_t bytes) = nullptr;
  void (*backward_bf16_tc)(const RowsArgs<thx_bf16>&, int H, unsigned grid_x, unsigned grid_y, int threads,
                           int64_t bytes) = nullptr;
  // The forward as one flash-style kernel (th_flash_kernels.cuh) for the bf16 problems it takes
  // (flash_unsupported, with flash_shared_limit: the bytes of shared memory a block may have), or
  // null: the forward takes blocks of rows.
  void (*flash_forward)(const FlashArgs<thx_bf16>&, int H, int DV, unsigned grid_x, unsigned grid_y,
                        int64_t bytes) = nullptr;
  int64_t flash_shared_limit = 0;
  // The backward of a flash forward as flash-style kernels (th_flash_backward.cuh; pass D, then G)
  // for the problems they take (flash_back_unsupported), or null: the row kernels' backward.
  void (*flash_backward)(const FlashBackArgs<thx_bf16>&, int H, int D, bool grads, unsigned grid_x, unsigned grid_y,
                         int64_t bytes) = nullptr;
  // The heads-major path's softmax alone (rows_softmax, tiled.h), a warp a row
  // (th_softmax_kernels.cuh): `cache` keys a lane kept (softmax_cache), keys taken in pairs or
  // one at a time, grid_x blocks of kSoftmaxThreads. Or null: rows_softmax leaves it to ATen.
  void (*softmax_f32)(const RowsArgs<float>&, int cache, bool pairs, unsigned grid_x) = nullptr;
  void (*softmax_bf16)(const RowsArgs<thx_bf16>&, int cache, bool pairs, unsigned grid_x) = nullptr;
  // The heads-major path's mixings across up to kMixHeadsMax heads (rows_mix, rows_mix_grad;
  // th_mix_kernels.cuh): the mixing (grad false) or its weights' gradient (true), positions in
  // pairs or one at a time, grid (grid_x, b) of kMixThreads. Or null: cuBLAS's products.
  void (*mix_f32)(const MixArgs<float>&, bool grad, bool pairs, unsigned grid_x, unsigned grid_y) = nullptr;
  void (*mix_bf16)(const MixArgs<thx_bf16>&, bool grad, bool pairs, unsigned grid_x, unsigned grid_y) = nullptr;
};

}  // namespace thx::cuda_th

namespace thx {
// CUDA's launcher where thx was built with its CUDA kernels (THX_CUDA_KERNELS), else null; bf16
// with its mixings on tensor cores, or (tensor_cores false: `thx --th-path tiled-fma`, `thx bench
// attention --fma`) as fp32 FMAs; with the flash kernels forward and backward (flash, with tensor
// cores: `thx --th-path flash`). Each has the softmax kernels and the mixings across few heads.
const cuda_th::RowsLauncher* cuda_th_rows_launcher(bool tensor_cores = true, bool flash = false);
}  // namespace thx

namespace thx::cuda_th {
// CUDA's launches behind that launcher (th_launch.cuh), each group of kernels in a .cu file of its
// own so that nvcc compiles them side by side: the FMA row kernels (fp32 th_rows.cu, bf16
// th_rows_bf16.cu), those on tensor cores (th_rows_tc.cu), the flash kernels
// (th_flash_forward.cu, th_flash_backward.cu), the softmax (th_softmax.cu) and the mixings
// across few heads (th_mix.cu).
template <typename T, bool Backward>
void launch_rows(const RowsArgs<T>& a, int H, unsigned grid_x, unsigned grid_y, int threads, int64_t bytes);
template <bool Backward>
void launch_rows_tc(const RowsArgs<thx_bf16>& a, int H, unsigned grid_x, unsigned grid_y, int threads, int64_t bytes);
void launch_flash_forward(const FlashArgs<thx_bf16>& a, int H, int DV, unsigned grid_x, unsigned grid_y,
                          int64_t bytes);
void launch_flash_backward(const FlashBackArgs<thx_bf16>& a, int H, int D, bool grads, unsigned grid_x,
                           unsigned grid_y, int64_t bytes);
template <typename T>
void launch_softmax(const RowsArgs<T>& a, int cache, bool pairs, unsigned grid_x);
template <typename T>
void launch_mix(const MixArgs<T>& a, bool grad, bool pairs, unsigned grid_x, unsigned grid_y);
}  // namespace thx::cuda_th
