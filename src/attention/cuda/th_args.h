// th_args.h: what the fused talking-heads kernels (th_kernels.cuh) take, in plain C++ so that the
// host code that prepares a launch (th_fused.cpp) needs no CUDA header and no emulator.
#pragma once
#include <cstdint>

#include "common/bf16_bits.h"
#include "common/host_device.h"

namespace thx::cuda_th {

// Bytes per element of what the kernels keep in shared memory and may keep narrower than fp32:
//  - in: the block's rows and the tile's keys (Q, dO; K, V), in the inputs' dtype;
//  - j: the planes J and dJ, and u: U and dU; 2 (bf16) where a plane's values are only ever
//    tensor-core operands, which round them to bf16 when they are read: with P_l (J, dJ) and
//    with P_w (U, dU) on tensor cores. Storing them rounded changes no number, and halves them.
// Everything else (L and W, dW and dL, the output and dQ sums, the statistics) is fp32.
// pad (version 2.4): the bf16 planes J and dU, and the bf16 copies of P_l and P_w, hold their
// heads up to a multiple of 16, the extra ones zero, so that the mixings' products (whose k, and
// for the mixings' gradients m or n, is a number of heads) read whole 16x16 blocks of them by
// ldmatrix instead of pairs at 12 or 24 heads; the zeros stand where the products' pair loads put
// zeros, so no number changes. Only where it costs no tile size and no block a multiprocessor
// (th_fused.cpp's args).
struct Widths {
  int in = 4, j = 4, u = 4;
  int threads = 0;  // on tensor cores, the threads per block (else 0): see sums_in_registers
  bool pad = false;
};
// Heads as a padded plane or copy holds them: up to a multiple of 16 where `pad` (on the host for
// the layout, on the device for the kernels).
THX_HOST_DEVICE
inline int padded_heads(int heads, bool pad) { return pad ? (heads + 15) / 16 * 16 : heads; }

// Whether a kernel keeps its block's row sums [R, heads * dim] (the forward's O: h_v, d_v; the
// backward's dQ: h_k, d_k) in the warps' registers (th_kernels.cuh) instead of shared memory: on
// tensor cores (threads > 0), where each warp's share of their 16x8 tiles, which warps take in
// pairs along a row (cuda_mma.h's TileGrid), is at most the kernel's limit: 12 tiles (48
// registers a thread) in the forward, compiled for 128 registers, and 16 (64) in the backward.
// At d_model 768 and 256 threads both hold 12.
constexpr int kForwardOutputTiles = 12, kBackwardOutputTiles = 16;
// The most threads a block of the kernels is launched with (they are compiled to fit it:
// th_kernels.cuh's launch bounds, which give the backward up to 255 registers a thread and the
// forward 128, two blocks to a multiprocessor where shared memory allows).
constexpr int kMaxThreads = 256;
// The blocks a multiprocessor the kernels are compiled for at kMaxThreads (their launch bounds):
// two forwards (128 registers a thread), one backward (up to 255).
constexpr int kForwardBlocksPerSM = 2, kBackwardBlocksPerSM = 1;
inline bool sums_in_registers(int threads, int R, int heads, int dim, bool backward) {
  if (threads < 32) return false;
  const int pairs = heads * ((R + 15) / 16) * (((dim + 7) / 8 + 1) / 2), warps = threads / 32;
  return 2 * ((pairs + warps - 1) / warps) <= (backward ? kBackwardOutputTiles : kForwardOutputTiles);
}

// Where a kernel's tiles sit in shared memory: byte offsets from its start, each a multiple of 16
// (the alignment of an aligned word load; th_kernels.cuh), and the total. Forward: q, k, v, j, l,
// u, o, m, s. Backward: q, dq, dout, k, v, j, dj, l, dw, u, du, m (LSE), s (D). No o or dq where
// those sums are in registers. Both: pl, plt and pw, pwt, bf16 copies of P_l and P_w and of their
// transposes, where the planes J and U are bf16 (j, u == 2: the mixings are tensor-core operands
// only; th_kernels.cuh's mixing).
struct Layout {
  int64_t q = 0, dq = 0, dout = 0, k = 0, v = 0, j = 0, dj = 0, l = 0, dw = 0, u = 0, du = 0, o = 0, m = 0, s = 0;
  int64_t pl = 0, plt = 0, pw = 0, pwt = 0;
  int64_t bytes = 0;
};

// How the backward adds the sums that several blocks share: dK and dV (every block of query rows
// of an example adds to every key) and dbias where it broadcasts over examples. On a GPU these
// are fp32 atomics resolved in L2, where one address taken by many blocks at once serialises
// them (docs/fused_talking_heads.md, "Version 2.2"):
//  - kInOrder: every block takes pass B's key tiles in order, so the blocks running at once add to
//    the same keys; one scalar atomic an element (version 2.1);
//  - kStaggered: block (x, y) starts pass B at key tile (x + y) mod tiles, so that they do not;
//  - kVector: staggered, and four adjacent sums as one vector reduction (sm_90's
//    red.global.add.v4.f32, common/cuda_compat.h's thx_atomic_add4) where 16-byte aligned.
// Each element still gets one addition from each block, so only their order differs: on the CPU
// emulator, which runs the blocks one at a time, dK, dV and dbias are bit-equal across the three;
// dQ is summed over pass B's tiles in the order they come, so staggering changes its rounding.
enum class KeySums : int { kInOrder = 0, kStaggered = 1, kVector = 2 };

// x / d for 0 <= x < 2^31 as (umulhi(x, m) + x) >> s, with s = ceil(log2 d) and m = 2^32 (2^s -
// d) / d + 1 (Granlund and Montgomery, "Division by invariant integers using multiplication",
// 1994; the form of PyTorch's IntDivider): three instructions on a GPU, where dividing by a
// number known only at run time takes about twenty. Made on the host (make_divider); used by
// th_kernels.cuh's divide for the tile's keys per row, C, in the loops over a tile's elements.
struct Divider {
  uint32_t d = 1, m = 1, s = 0;
};
inline Divider make_divider(int d) {
  Divider v;
  v.d = uint32_t(d);
  while ((uint64_t(1) << v.s) < v.d) ++v.s;
  v.m = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << v.s) - v.d)) / v.d + 1);
  return v;
}

struct LayoutShape {
  int R, C, h_k, h, h_v, d_k, d_v;
};

inline Layout kernel_layout(const LayoutShape& x, const Widths& w, bool backward) {
  const int64_t qd = int64_t(x.h_k) * x.d_k, vd = int64_t(x.h_v) * x.d_v, rc = int64_t(x.R) * x.C;
  Layout l;
  auto take = [&l](int64_t bytes) {
    const int64_t at = l.bytes;
    l.bytes += (bytes + 15) / 16 * 16;
    return at;
  };
  l.q = take(x.R * qd * w.in);
  if (backward && !sums_in_registers(w.threads, x.R, x.h_k, x.d_k, true)) l.dq = take(4 * x.R * qd);
  if (backward) l.dout = take(x.R * vd * w.in);
  l.k = take(x.C * qd * w.in), l.v = take(x.C * vd * w.in);
  const int64_t h_k16 = padded_heads(x.h_k, w.pad), h16 = padded_heads(x.h, w.pad), h_v16 = padded_heads(x.h_v, w.pad);
  l.j = take((w.j == 2 ? h_k16 : x.h_k) * rc * w.j);
  if (backward) l.dj = take(x.h_k * rc * w.j);
  l.l = take(4 * x.h * rc);
  if (backward) l.dw = take(4 * x.h * rc);
  l.u = take(x.h_v * rc * w.u);
  if (backward) l.du = take((w.u == 2 ? h_v16 : x.h_v) * rc * w.u);
  else if (!sums_in_registers(w.threads, x.R, x.h_v, x.d_v, false)) l.o = take(4 * x.R * vd);
  l.m = take(4 * int64_t(x.h) * x.R), l.s = take(4 * int64_t(x.h) * x.R);
  if (w.j == 2) l.pl = take(2 * h_k16 * h16), l.plt = take(2 * h_k16 * h16);
  if (w.u == 2) l.pw = take(2 * h16 * h_v16), l.pwt = take(2 * h16 * h_v16);
  return l;
}

template <typename T>
struct Args {
  const T *q, *k, *v;        // [b,n,h_k,d_k], [b,m,h_k,d_k], [b,m,h_v,d_v], contiguous
  const float *p_l, *p_w;    // [h_k,h], [h,h_v], contiguous; null: no mixing (h = h_k, h_v = h)
  const float* bias;         // read at bias_stride over [b,h,n,m] (0 where it broadcasts); or null
  int64_t bias_stride[4];
  const bool* mask;          // true: attend; read at mask_stride over [b,h,n,m]; or null
  int64_t mask_stride[4];
  T* o;                      // forward: [b,n,h_v,d_v]
  float* lse;                // [b,h,n]: written forward, read backward (-inf: a row with no key)
  const T* grad_o;           // backward: dO [b,n,h_v,d_v]
  T* grad_q;                 // [b,n,h_k,d_k], each block its own rows
  float *grad_k, *grad_v;    // [b,m,h_k,d_k], [b,m,h_v,d_v], zeroed, summed over blocks
  float* grad_bias;          // zeroed, written at grad_bias_stride over [b,h,n,m]; or null
  int64_t grad_bias_stride[4];
  float *grad_p_l, *grad_p_w;  // [blocks, h_k, h], [blocks, h, h_v], zeroed: one partial per block
  int b, n, m, h_k, h, h_v, d_k, d_v;
  int R, C;                  // query rows per block, keys per tile
  Divider by_c;              // make_divider(C)
  bool tensor_cores;         // products on tensor cores (bf16 operands; blockDim a multiple of 32)
  Widths widths;             // of the tiles in shared memory (above), and where they are:
  Layout layout;             // kernel_layout for this kernel (forward or backward)
  bool sums_in_registers;    // the forward's O or the backward's dQ (sums_in_registers)
  KeySums key_sums;          // backward: how the shared sums are added (above)
};

// How a backend runs the kernels: CUDA (th_fused.cu) or the CPU emulator (the tests). Grid: x the
// blocks of R query rows, y the examples.
struct Launcher {
  int64_t shared_limit_bytes;  // per block, what the device allows when asked (opt-in)
  int threads;                 // per block
  bool tensor_cores;           // bf16 products on tensor cores (with whole warps; th_kernels.cuh)
  void (*forward_f32)(const Args<float>&, unsigned grid_x, unsigned grid_y, int threads, int64_t shared_bytes);
  void (*forward_bf16)(const Args<thx_bf16>&, unsigned grid_x, unsigned grid_y, int threads, int64_t shared_bytes);
  void (*backward_f32)(const Args<float>&, unsigned grid_x, unsigned grid_y, int threads, int64_t shared_bytes);
  void (*backward_bf16)(const Args<thx_bf16>&, unsigned grid_x, unsigned grid_y, int threads, int64_t shared_bytes);
};

}  // namespace thx::cuda_th

namespace thx {
// CUDA's launcher where thx was built with its CUDA kernels (THX_CUDA_KERNELS: th_fused.cu),
// else null (th_fused.cpp).
const cuda_th::Launcher* cuda_th_launcher();
}  // namespace thx
