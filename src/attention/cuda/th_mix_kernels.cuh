// th_mix_kernels.cuh: the heads-major path's mixings across few heads (attention/heads_gemm.h) as
// kernels of their own, written once for nvcc (th_mix.cu), clang's PTX check and the CPU emulator
// (common/cuda_compat.h).
//
// Why: at 12 heads cuBLAS takes two slow kernels for the heads-major path's mixings on an H200
// (benchmarks.md, the fifth GPU session): the mixings, [g2, g] x [g, n m] an example with an inner
// dimension of 12 (a non-Hopper `magma_sgemmEx`, 0.55 ms a launch at T5-base's batch where reading
// and writing the tensors takes 0.08), and their weights' gradients, [g, n m] x [n m, g2] summed
// over the examples (a `wmma` kernel with one block of 128 threads an example, each summing
// 262,144 positions). Both are memory-bound: a position reads g values and writes g2 (or reads
// g + g2), with g g2 multiply-adds.
//
// mix_kernel: a thread takes a position (a pair where `Pairs`: one 4-byte load of two bf16, or 8
// bytes of two floats) in each of kMixGroups groups of the block's positions, reads its g values,
// and writes its g2 mixed values in T's dtype, summed in fp32 over k = 0, 1, ... in order (P from
// shared memory, every lane reading the same word). A warp's loads of one head are contiguous.
//
// mix_grad_kernel: a thread sums A[k,p] B[o,p] for every (k, o) in registers (kMixHeadsMax^2
// floats) over its positions, kMixGradSteps steps of the block's kMixThreads (pairs: twice as
// many) positions; then each warp's butterfly, and the warps' sums in order, give the block's
// partial sum, written without atomics. The host sums the partials (one reduction), so that the
// result does not depend on which block finished first.
#pragma once
#include "attention/cuda/th_rows_args.h"
#include "attention/cuda/th_softmax_kernels.cuh"
#include "common/cuda_compat.h"

namespace thx::cuda_th {
namespace heads_mix {

constexpr int G = kMixHeadsMax;

template <typename T, bool Pairs>
__global__ void THX_LAUNCH_BOUNDS(kMixThreads, 2) mix_kernel(MixArgs<T> a) {
  constexpr int E = Pairs ? 2 : 1;
  THX_STATIC_SHARED float w[G * G];
  for (int i = int(threadIdx.x); i < a.g * a.g2; i += kMixThreads) w[i] = a.P[i];
  __syncthreads();
  const int64_t span = int64_t(kMixThreads) * E;  // positions of a group
  const int64_t first = int64_t(blockIdx.x) * span * kMixGroups + int64_t(threadIdx.x) * E;
  const T* in = a.A + int64_t(blockIdx.y) * a.g * a.N;
  float acc[kMixGroups][G][E];
#pragma unroll
  for (int q = 0; q < kMixGroups; ++q)
#pragma unroll
    for (int o = 0; o < G; ++o)
#pragma unroll
      for (int e = 0; e < E; ++e) acc[q][o][e] = 0.f;
  for (int k = 0; k < a.g; ++k) {
    float x[kMixGroups][E];
#pragma unroll
    for (int q = 0; q < kMixGroups; ++q) {
      const int64_t p = first + q * span;
#pragma unroll
      for (int e = 0; e < E; ++e) x[q][e] = 0.f;
      if (p < a.N) softmax::load_keys<T, Pairs>(in + k * a.N + p, 0, x[q]);
    }
#pragma unroll
    for (int o = 0; o < G; ++o)
      if (o < a.g2) {
        const float p_ko = w[k * a.g2 + o];
#pragma unroll
        for (int q = 0; q < kMixGroups; ++q)
#pragma unroll
          for (int e = 0; e < E; ++e) acc[q][o][e] += p_ko * x[q][e];
      }
  }
  T* out = a.out + int64_t(blockIdx.y) * a.g2 * a.N;
#pragma unroll
  for (int q = 0; q < kMixGroups; ++q) {
    const int64_t p = first + q * span;
#pragma unroll
    for (int o = 0; o < G; ++o)
      if (o < a.g2 && p < a.N) softmax::store_keys<T, Pairs>(out + o * a.N + p, 0, acc[q][o]);
  }
}

template <typename T, bool Pairs>
__global__ void THX_LAUNCH_BOUNDS(kMixThreads, 1) mix_grad_kernel(MixArgs<T> a) {
  constexpr int E = Pairs ? 2 : 1;
  const T* A = a.A + int64_t(blockIdx.y) * a.g * a.N;
  const T* B = a.B + int64_t(blockIdx.y) * a.g2 * a.N;
  const int64_t span = int64_t(kMixThreads) * E;
  const int64_t first = int64_t(blockIdx.x) * span * kMixGradSteps + int64_t(threadIdx.x) * E;
  float acc[G][G];
#pragma unroll
  for (int k = 0; k < G; ++k)
#pragma unroll
    for (int o = 0; o < G; ++o) acc[k][o] = 0.f;
  for (int s = 0; s < kMixGradSteps; ++s) {
    const int64_t p = first + s * span;
    if (p >= a.N) break;
    float x[G][E], y[G][E];
#pragma unroll
    for (int k = 0; k < G; ++k)
      if (k < a.g) softmax::load_keys<T, Pairs>(A + k * a.N + p, 0, x[k]);
#pragma unroll
    for (int o = 0; o < G; ++o)
      if (o < a.g2) softmax::load_keys<T, Pairs>(B + o * a.N + p, 0, y[o]);
#pragma unroll
    for (int k = 0; k < G; ++k)
#pragma unroll
      for (int o = 0; o < G; ++o)
        if (k < a.g && o < a.g2)
#pragma unroll
          for (int e = 0; e < E; ++e) acc[k][o] += x[k][e] * y[o][e];
  }
  // The block's sum: each warp's butterfly (every lane takes part), lane 0's into shared memory,
  // then the warps' in order.
  constexpr int kWarps = kMixThreads / 32;
  THX_STATIC_SHARED float sums[kWarps * G * G];
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  THX_UNROLL
  for (int k = 0; k < G; ++k)
    THX_UNROLL
    for (int o = 0; o < G; ++o)
      if (k < a.g && o < a.g2) {
        float v = acc[k][o];
#pragma unroll
        for (int d = 16; d >= 1; d /= 2) v += thx_shfl_xor(v, d);
        if (lane == 0) sums[warp * G * G + k * a.g2 + o] = v;
      }
  __syncthreads();
  float* partial = a.partial + (int64_t(blockIdx.y) * gridDim.x + blockIdx.x) * a.g * a.g2;
  for (int i = int(threadIdx.x); i < a.g * a.g2; i += kMixThreads) {
    float total = 0.f;
    for (int v = 0; v < kWarps; ++v) total += sums[v * G * G + i];
    partial[i] = total;
  }
}

}  // namespace heads_mix

// The kernel for the mixing (grad false) or its weights' gradient, positions in pairs or not.
template <typename T>
auto mix_kernel_for(bool grad, bool pairs) {
  using K = void (*)(MixArgs<T>);
  if (grad) return pairs ? K(heads_mix::mix_grad_kernel<T, true>) : K(heads_mix::mix_grad_kernel<T, false>);
  return pairs ? K(heads_mix::mix_kernel<T, true>) : K(heads_mix::mix_kernel<T, false>);
}

}  // namespace thx::cuda_th
