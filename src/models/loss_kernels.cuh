// loss_kernels.cuh: loss_cuda.h's kernels, written once for nvcc (loss_cuda.cu), clang's PTX
// check and the CPU emulator (common/cuda_compat.h). One block a row of the logits [N,V], both
// ways: forward, each thread keeps a running max and sum of exp over its keys (one read of the
// row), the block merges the pairs (a butterfly in each warp, then one warp over the warps: a
// fixed order, so a launch repeats bit for bit); backward, one read of the row and one write of
// its gradient. Sums are fp32; X is float or thx_bf16.
#pragma once
#include "common/cuda_compat.h"

namespace thx::cuda {

// A running maximum m and the sum s of exp(x - m) over what it has seen (m = -inf, s = 0: nothing).
struct MaxSum {
  float m, s;
};

THX_DEVICE MaxSum merge_max_sum(MaxSum a, MaxSum b) {
  const float m = thx_fmax(a.m, b.m);
  if (m == -thx_inf()) return {m, 0.f};  // (both empty: exp(-inf - -inf) would be NaN)
  return {m, a.s * thx_exp(a.m - m) + b.s * thx_exp(b.m - m)};
}

// The block's merge of every thread's pair, returned to every thread. shm holds two floats a warp.
THX_DEVICE MaxSum block_max_sum(MaxSum v, float* shm) {
  for (int o = 16; o > 0; o >>= 1) v = merge_max_sum(v, {thx_shfl_xor(v.m, o), thx_shfl_xor(v.s, o)});
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();  // shm may still be read by a previous call
  if (lane == 0) shm[2 * warp] = v.m, shm[2 * warp + 1] = v.s;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? MaxSum{shm[2 * lane], shm[2 * lane + 1]} : MaxSum{-thx_inf(), 0.f};
    for (int o = 16; o > 0; o >>= 1) v = merge_max_sum(v, {thx_shfl_xor(v.m, o), thx_shfl_xor(v.s, o)});
    if (lane == 0) shm[0] = v.m, shm[1] = v.s;
  }
  __syncthreads();
  return {shm[0], shm[1]};
}

// Row r of x [N,V]: lse[r] = log sum_j exp(x_rj); with target t = targets[r] (0: padding),
// nll[r] = lse - x_rt and zz[r] = lse^2, both 0 for padding and NaN for a target outside [0, V)
// (the caller refuses those before a launch; this keeps the kernel's reads inside the row).
template <typename X>
__global__ void ce_forward_kernel(const X* __restrict__ x, const int64_t* __restrict__ targets,
                                  float* __restrict__ lse, float* __restrict__ nll, float* __restrict__ zz, int64_t V) {
  THX_STATIC_SHARED float shm[64];
  const int64_t row = blockIdx.x;
  const X* xr = x + row * V;
  MaxSum p{-thx_inf(), 0.f};
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    const float v = thx_to_float(xr[j]);
    if (v > p.m) {
      p.s = p.s * thx_exp(p.m - v) + 1.f, p.m = v;
    } else if (!(v == -thx_inf())) {  // (a NaN goes on into the sum)
      p.s += thx_exp(v - p.m);
    }
  }
  const MaxSum all = block_max_sum(p, shm);
  if (threadIdx.x != 0) return;
  const float l = all.m + thx_log(all.s);
  const int64_t t = targets[row];
  lse[row] = l;
  const bool inside = t >= 0 && t < V;
  nll[row] = t == 0 ? 0.f : inside ? l - thx_to_float(xr[t]) : thx_bits_to_float(0x7fc00000u);
  zz[row] = t == 0 ? 0.f : inside ? l * l : thx_bits_to_float(0x7fc00000u);
}

// dx for row r: 0 for padding; else p_rj (g_loss + g_nll + 2 z g_loss lse_r) - [j = t](g_loss + g_nll),
// p = exp(x - lse). g: [2] on the device, the gradients of the loss sum and the nll sum.
template <typename X>
__global__ void ce_backward_kernel(const X* __restrict__ x, const int64_t* __restrict__ targets,
                                   const float* __restrict__ lse, const float* __restrict__ g, float z,
                                   X* __restrict__ dx, int64_t V) {
  const int64_t row = blockIdx.x;
  const int64_t t = targets[row];
  X* out = dx + row * V;
  if (t <= 0 || t >= V) {
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) out[j] = thx_from_float<X>(0.f);
    return;
  }
  const X* xr = x + row * V;
  const float l = lse[row], hit = g[0] + g[1], scale = hit + 2.f * z * g[0] * l;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    const float d = thx_exp(thx_to_float(xr[j]) - l) * scale;
    out[j] = thx_from_float<X>(j == t ? d - hit : d);
  }
}

}  // namespace thx::cuda
