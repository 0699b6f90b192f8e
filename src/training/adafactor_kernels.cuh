// adafactor_kernels.cuh: Adafactor's update (training/optimizer.h states it) of a group of
// parameters of one view (adafactor_grouped.h) in five kernels a group, where the ATen
// composition launches some 30 operations and reads or writes each parameter's fp32 values about
// 14 times. Written once for nvcc (adafactor_cuda.cu), clang's PTX check and the CPU emulator
// (common/cuda_compat.h). The members' weights and gradients are separate tensors: a launch takes
// up to kMembers of them by pointer (Members, by value); the state is the group's stacked [G, ...].
//
// A factored view's two means are reductions over one of its dims: the view seen as
// [outer, n, inner] (n the dim's size, inner the product of the sizes after it), a mean's index
// the element's with that dim taken out (`without`), which is ATen's layout of mean(d, keepdim).
// reduce_kernel sums each chunk of kChunk rows of n into an fp32 partial sum of its own (one a
// chunk and output), average_kernel adds a mean's partial sums in chunk order and folds the mean
// into the state: vr = decay vr + (1 - decay) mean. stats_kernel makes x for every element
// (updating v where unfactored) and writes each block's sums of x^2 and w^2, which
// finish_stats_kernel adds in block order; apply_kernel makes x again and subtracts the update.
// No atomics: a step's result does not depend on the order blocks run in, so a GPU run repeats
// bit for bit. All sums are fp32, in another order than ATen's: the same numbers up to fp32
// rounding (tests/training/adafactor_emu_test.cpp).
#pragma once
#include <cstdint>

#include "common/cuda_compat.h"
#include "models/rms_norm_kernels.cuh"  // block_sum
#include "training/adafactor_hyper.h"

namespace thx::cuda::adafactor {

constexpr int kMembers = 32;     // parameters a launch takes (a larger group runs in slices)
constexpr int kThreads = 256;    // threads a block (a multiple of 32)
constexpr int64_t kChunk = 256;  // rows of a reduction's dim one block sums

struct Members {
  const float* g[kMembers];
  float* w[kMembers];
};

// A dim of the view: its size, and its stride in the contiguous view (the product of the sizes after it).
struct Dim {
  int64_t size = 1, stride = 1;
};

// e's index with dim d taken out: the index of e's entry in a mean over d.
THX_DEVICE int64_t without(int64_t e, Dim d) { return (e / (d.stride * d.size)) * d.stride + e % d.stride; }

// parts[(m * chunks + c) * outputs + o * inner + i] = the sum over chunk c (blockIdx.z) of k < n
// of f(src[(o * n + k) * inner + i]), f(x) = x^2 + eps1 where square, else x; src is member m's
// gradient, or from_state + m * state_len where from_state is given; outputs = outer * inner.
// Grid: (outputs, members, chunks of n). inner == 1: a warp an output, its lanes along the
// memory; else a thread an output.
__global__ void reduce_kernel(Members mem, const float* from_state, int64_t state_len, float* parts,
                              int64_t outer, int64_t n, int64_t inner, int square, float eps1) {
  const int m = int(blockIdx.y);
  float* sums = parts + (int64_t(m) * gridDim.z + blockIdx.z) * outer * inner;
  const float* src = from_state ? from_state + m * state_len : mem.g[m];
  const int64_t k0 = int64_t(blockIdx.z) * kChunk, k1 = k0 + kChunk < n ? k0 + kChunk : n;
  if (inner == 1) {
    const int64_t o = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = int(threadIdx.x % 32);
    float s = 0.f;
    if (o < outer)
      for (int64_t k = k0 + lane; k < k1; k += 32) {
        const float x = src[o * n + k];
        s += square ? x * x + eps1 : x;
      }
    for (int off = 16; off > 0; off >>= 1) s += thx_shfl_xor(s, off);
    if (o < outer && lane == 0) sums[o] = s;
    return;
  }
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= outer * inner) return;
  const int64_t o = j / inner, i = j % inner;
  float s = 0.f;
  for (int64_t k = k0; k < k1; ++k) {
    const float x = src[(o * n + k) * inner + i];
    s += square ? x * x + eps1 : x;
  }
  sums[j] = s;
}

// For j < members x outputs (member m = j / outputs, output o = j % outputs): the mean is the sum
// of reduce_kernel's `chunks` parts, in chunk order, over n; state[j] = decay state[j] + (1 - decay)
// mean, or where decay is 0 the mean.
__global__ void average_kernel(float* state, const float* parts, int64_t members, int64_t outputs, int64_t chunks,
                               float n, float decay) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= members * outputs) return;
  const int64_t m = j / outputs, o = j % outputs;
  float s = 0.f;
  for (int64_t c = 0; c < chunks; ++c) s += parts[(m * chunks + c) * outputs + o];
  const float mean = s / n;
  state[j] = decay == 0.f ? mean : decay * state[j] + (1.f - decay) * mean;
}

// What a member's x needs: its element count; where factored the two dims and d1 as it lies in
// vr's layout (d0 taken out), with vr, vc and vr's mean over d1 (vrm), each [members, ...]; else v.
struct Factors {
  int64_t len = 0;
  int factored = 0;
  Dim d0, d1, d1_in_vr;
  int64_t r_len = 0, c_len = 0, rm_len = 0;  // a member's entries in vr, vc, vrm
  float *vr = nullptr, *vc = nullptr, *vrm = nullptr, *v = nullptr;
};

// Member m's x at element e from its gradient g (the state already updated).
THX_DEVICE float x_of(const Factors& f, int m, int64_t e, float g) {
  if (!f.factored) return g * thx_rsqrt(f.v[m * f.len + e]);
  const int64_t r = without(e, f.d0);
  const float row = f.vr[m * f.r_len + r] / f.vrm[m * f.rm_len + without(r, f.d1_in_vr)];
  return g * thx_rsqrt(row) * thx_rsqrt(f.vc[m * f.c_len + without(e, f.d1)]);
}

// parts[2 (m gridDim.x + b)] = block b's sum of member m's x^2, and + 1 of its w^2; where
// unfactored, v is updated first (v = decay v + (1 - decay) (g^2 + eps1)). Grid: (blocks striding
// over a member's elements, members).
__global__ void stats_kernel(Members mem, Factors f, float decay, float eps1, float* parts) {
  THX_STATIC_SHARED float shm[32];
  const int m = int(blockIdx.y);
  float sx = 0.f, sw = 0.f;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < f.len; e += int64_t(gridDim.x) * blockDim.x) {
    const float g = mem.g[m][e], w = mem.w[m][e];
    if (!f.factored) {
      float& v = f.v[m * f.len + e];
      v = decay * v + (1.f - decay) * (g * g + eps1);
    }
    const float x = x_of(f, m, e, g);
    sx += x * x, sw += w * w;
  }
  sx = block_sum(sx, shm);
  sw = block_sum(sw, shm);
  if (threadIdx.x == 0) {
    float* p = parts + 2 * (int64_t(m) * gridDim.x + blockIdx.x);
    p[0] = sx, p[1] = sw;
  }
}

// stats[2 m] and [2 m + 1] = member m's (blockIdx.x's) sums of x^2 and w^2 from stats_kernel's
// `blocks` parts, each thread adding every blockDim.x-th in order, then the block's tree.
__global__ void finish_stats_kernel(const float* parts, int64_t blocks, float* stats) {
  THX_STATIC_SHARED float shm[32];
  const int64_t m = blockIdx.x;
  float sx = 0.f, sw = 0.f;
  for (int64_t b = threadIdx.x; b < blocks; b += blockDim.x) {
    sx += parts[2 * (m * blocks + b)];
    sw += parts[2 * (m * blocks + b) + 1];
  }
  sx = block_sum(sx, shm);
  sw = block_sum(sw, shm);
  if (threadIdx.x == 0) stats[2 * m] = sx, stats[2 * m + 1] = sw;
}

// w -= u, u = lr max(rms(w), eps2) x / max(1, rms(x) / clip) (with momentum: mom = beta1 mom +
// (1 - beta1) u, u = mom), rms(w) of the weights before the step. Grid as stats_kernel's.
__global__ void apply_kernel(Members mem, Factors f, const float* stats, Hyper h, float* mom) {
  const int m = int(blockIdx.y);
  const float n = float(f.len);
  const float rms_x = 1.f / thx_rsqrt(stats[2 * m] / n), rms_w = 1.f / thx_rsqrt(stats[2 * m + 1] / n);
  const float scale = h.lr * thx_fmax(rms_w, h.eps2) / thx_fmax(1.f, rms_x / h.clip);
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < f.len; e += int64_t(gridDim.x) * blockDim.x) {
    float u = scale * x_of(f, m, e, mem.g[m][e]);
    if (h.beta1 >= 0.f) {
      float& mo = mom[m * f.len + e];
      mo = h.beta1 * mo + (1.f - h.beta1) * u;
      u = mo;
    }
    mem.w[m][e] -= u;
  }
}

}  // namespace thx::cuda::adafactor
