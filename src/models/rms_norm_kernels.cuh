// rms_norm_kernels.cuh: rms_norm_cuda.h's kernels, written once for nvcc (rms_norm_cuda.cu),
// clang's PTX check and the CPU emulator (common/cuda_compat.h). One block per row forward;
// backward, a grid of blocks each striding over rows, each keeping its share of dscale in
// shared memory (one column per thread: no atomics), written out as [blocks, d] partial sums
// that one ATen sum adds. Sums are fp32; a block's sum is a warp-shuffle tree, then one warp over
// the warps (blockDim a multiple of 32). X, Y: float or thx_bf16.
#pragma once
#include "common/cuda_compat.h"

namespace thx::cuda {

// The block's sum of v, returned to every thread. shm holds one float per warp.
THX_DEVICE float block_sum(float v, float* shm) {
  for (int o = 16; o > 0; o >>= 1) v += thx_shfl_xor(v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();  // shm may still be read by a previous call
  if (lane == 0) shm[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? shm[lane] : 0.f;
    for (int o = 16; o > 0; o >>= 1) v += thx_shfl_xor(v, o);
    if (lane == 0) shm[0] = v;
  }
  __syncthreads();
  return shm[0];
}

template <typename X, typename Y>
__global__ void rms_forward_kernel(const X* __restrict__ x, const float* __restrict__ scale, Y* __restrict__ y,
                                   float* __restrict__ r, int64_t d) {
  THX_STATIC_SHARED float shm[32];
  const int64_t row = blockIdx.x;
  const X* xr = x + row * d;
  float ss = 0.f;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float v = thx_to_float(xr[j]);
    ss += v * v;
  }
  const float ri = thx_rsqrt(block_sum(ss, shm) / float(d) + 1e-6f);
  if (threadIdx.x == 0) r[row] = ri;
  Y* yr = y + row * d;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) yr[j] = thx_from_float<Y>(thx_to_float(xr[j]) * ri * scale[j]);
}

template <typename X, typename Y>
__global__ void rms_backward_kernel(const X* __restrict__ x, const float* __restrict__ scale,
                                    const float* __restrict__ r, const Y* __restrict__ dy, X* __restrict__ dx,
                                    float* __restrict__ dscale_part, int64_t rows, int64_t d) {
  THX_STATIC_SHARED float shm[32];
  THX_SHARED(shared_bytes);
  float* ds = reinterpret_cast<float*>(shared_bytes);  // [d]: this block's share of dscale, by column
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) ds[j] = 0.f;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const X* xr = x + row * d;
    const Y* gr = dy + row * d;
    const float ri = r[row];
    float dot = 0.f;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const float xv = thx_to_float(xr[j]), gv = thx_to_float(gr[j]);
      dot += gv * scale[j] * xv;
      ds[j] += gv * xv * ri;
    }
    const float k = ri * ri * block_sum(dot, shm) / float(d);
    X* o = dx + row * d;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
      o[j] = thx_from_float<X>(ri * (thx_to_float(gr[j]) * scale[j] - thx_to_float(xr[j]) * k));
  }
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) dscale_part[blockIdx.x * d + j] = ds[j];
}

}  // namespace thx::cuda
