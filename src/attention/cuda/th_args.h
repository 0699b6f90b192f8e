// th_args.h: what the fused talking-heads kernels (th_kernels.cuh) take, in plain C++ so that the
// host code that prepares a launch (th_fused.cpp) needs no CUDA header and no emulator.
#pragma once
#include <cstdint>

#include "common/bf16_bits.h"

namespace thx::cuda_th {

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
  float *grad_p_l, *grad_p_w;  // [blocks, h_k, h], [blocks, h, h_v]: one partial per block
  int b, n, m, h_k, h, h_v, d_k, d_v;
  int R, C;                  // query rows per block, keys per tile
  bool tensor_cores;         // products on tensor cores (bf16 operands; blockDim a multiple of 32)
};

// Shared memory, in floats, of each kernel for tiles of R rows and C keys.
inline int64_t forward_shared_floats(int R, int C, int h_k, int h, int h_v, int d_k, int d_v) {
  const int64_t qd = int64_t(h_k) * d_k, vd = int64_t(h_v) * d_v, rc = int64_t(R) * C;
  return R * qd + C * (qd + vd) + rc * (h_k + h + h_v) + R * vd + 2 * int64_t(h) * R;
}
inline int64_t backward_shared_floats(int R, int C, int h_k, int h, int h_v, int d_k, int d_v) {
  const int64_t qd = int64_t(h_k) * d_k, vd = int64_t(h_v) * d_v, rc = int64_t(R) * C;
  return R * (2 * qd + vd) + C * (qd + vd) + rc * (2 * h_k + 2 * h + 2 * h_v) + 2 * int64_t(h) * R +
         int64_t(h_k) * h + int64_t(h) * h_v;
}

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
