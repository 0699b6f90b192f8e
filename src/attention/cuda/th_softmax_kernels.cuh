// th_softmax_kernels.cuh: the heads-major path's softmax (attention/tiled.h, rows_softmax) as a
// kernel of its own, written once for nvcc (th_softmax.cu), clang's PTX check and the CPU
// emulator (common/cuda_compat.h).
//
// W = softmax over the keys of L + bias, masked, for every row of a contiguous [b,h,n,m] L: a
// warp a row (example, head, query row), the examples fastest, so that the warps running together
// read the same row of a bias that broadcasts over the examples (T5's [1,h,n,m]) from L2. Each
// lane takes the keys lane, lane + 32, ... (pairs of keys where `Pairs`: one 4-byte load of two
// bf16, or 8 bytes of two floats, a warp 128 or 256 contiguous bytes), adds the bias in fp32,
// sets a masked key's logit to -inf and keeps a running max and sum (rows::add_logit); the
// warp's butterfly merges them (rows::merge: symmetric, so every lane holds the same LSE, bit for
// bit), and W = exp(L - LSE) is written once in L's dtype, 0 where masked and in a row with no
// key. Up to Cache keys a lane (Cache > 0) the logits stay in registers between the two steps, so
// L is read once; longer rows (Cache = 0) read L and the bias again for the weights.
//
// Why not the tiled path's row kernels with neither mixing, which did this before: a block of
// theirs takes a row of every head, each thread a key of every head with its statistics in
// registers; built for the mixings, they read L twice, merge the heads' statistics through shared
// memory with two barriers a row, and at 48 heads fit 3 blocks a multiprocessor. A softmax alone
// wants independent rows and loads in flight; a warp a row has both, and no barrier.
#pragma once
#include "attention/cuda/th_rows_args.h"
#include "attention/cuda/th_rows_kernels.cuh"
#include "common/cuda_compat.h"

namespace thx::cuda_th {
namespace softmax {

// One key's (or a pair's) elements: L's, as floats.
template <typename T, bool Pairs>
THX_DEVICE void load_keys(const T* row, int j, float (&x)[Pairs ? 2 : 1]) {
  if constexpr (!Pairs) {
    x[0] = thx_to_float(row[j]);
  } else if constexpr (sizeof(T) == 2) {  // bf16: one word
    const uint32_t w = thx_load_word(row + j);
    x[0] = thx_bits_to_float(w << 16), x[1] = thx_bits_to_float(w & 0xffff0000u);
  } else {  // fp32: eight bytes
    const ThxBytes8 v = thx_load8(row + j);
    x[0] = thx_bits_to_float(v.w[0]), x[1] = thx_bits_to_float(v.w[1]);
  }
}
template <typename T, bool Pairs>
THX_DEVICE void store_keys(T* row, int j, const float (&w)[Pairs ? 2 : 1]) {
  if constexpr (Pairs && sizeof(T) == 2) {
    thx_store_word(row + j, uint32_t(thx_from_float<T>(w[0]).bits) | uint32_t(thx_from_float<T>(w[1]).bits) << 16);
  } else {
    for (int e = 0; e < (Pairs ? 2 : 1); ++e) row[j + e] = thx_from_float<T>(w[e]);
  }
}

// The row's elements: L's row, and the bias's and the mask's at its key 0 (null where absent).
template <typename T>
struct Row {
  const T* L;
  T* W;
  const float* bias;
  const uint8_t* mask;
};
// Keys j, j + 1 (Pairs) of the row as logits: L plus the bias, -inf where masked.
template <typename T, bool Pairs>
THX_DEVICE void logits(const RowsArgs<T>& a, const Row<T>& r, int j, float (&x)[Pairs ? 2 : 1]) {
  load_keys<T, Pairs>(r.L, j, x);
#pragma unroll
  for (int e = 0; e < (Pairs ? 2 : 1); ++e) {
    if (r.bias) x[e] += r.bias[(j + e) * a.bias_stride[3]];
    if (r.mask && !r.mask[(j + e) * a.mask_stride[3]]) x[e] = -thx_inf();
  }
}

// The kernel for one dtype, `Cache` keys a lane kept in registers (0: none, L read twice) and keys
// taken one or two at a time. Fast (bf16): the fast exp, as the bf16 row kernels take it (W is
// rounded to bf16 after).
template <typename T, int Cache, bool Pairs>
__global__ void THX_LAUNCH_BOUNDS(kSoftmaxThreads, Cache >= 32 ? 4 : 8) softmax_kernel(RowsArgs<T> a) {
  constexpr int E = Pairs ? 2 : 1, kSteps = Cache / E;
  constexpr bool kFast = sizeof(T) == 2;
  const int lane = int(threadIdx.x) % 32;
  const int64_t warp = int64_t(blockIdx.x) * (kSoftmaxThreads / 32) + threadIdx.x / 32;
  if (warp >= int64_t(a.b) * a.h * a.rows) return;  // (a whole warp: its lanes share `warp`)
  const int bb = int(warp % a.b);
  const int64_t hi = warp / a.b;
  const int o = int(hi / a.rows), i = int(hi % a.rows);
  const int64_t at = ((int64_t(bb) * a.h + o) * a.rows + i) * a.m;
  const Row<T> r{a.J + at, a.U + at,
                 a.bias ? a.bias + bb * a.bias_stride[0] + o * a.bias_stride[1] + i * a.bias_stride[2] : nullptr,
                 a.mask ? a.mask + bb * a.mask_stride[0] + o * a.mask_stride[1] + i * a.mask_stride[2] : nullptr};
  float mx = -thx_inf(), sum = 0.f;
  float kept[kSteps > 0 ? kSteps * E : 1];
  if constexpr (kSteps > 0) {
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int j = (s * 32 + lane) * E;
      float x[E];
#pragma unroll
      for (int e = 0; e < E; ++e) x[e] = -thx_inf();
      if (j < a.m) logits<T, Pairs>(a, r, j, x);
#pragma unroll
      for (int e = 0; e < E; ++e) kept[s * E + e] = x[e], rows::add_logit<kFast>(mx, sum, x[e]);
    }
  } else {
    for (int j = lane * E; j < a.m; j += 32 * E) {
      float x[E];
      logits<T, Pairs>(a, r, j, x);
#pragma unroll
      for (int e = 0; e < E; ++e) rows::add_logit<kFast>(mx, sum, x[e]);
    }
  }
#pragma unroll
  for (int d = 16; d >= 1; d /= 2) rows::merge(mx, sum, thx_shfl_xor(mx, d), thx_shfl_xor(sum, d));
  const float lse = mx == -thx_inf() ? mx : mx + thx_log(sum);
  auto weight = [&](float x) {
    if (lse == -thx_inf()) return 0.f;  // a row with no key
    return kFast ? thx_exp_fast(x - lse) : thx_exp(x - lse);
  };
  if constexpr (kSteps > 0) {
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int j = (s * 32 + lane) * E;
      if (j >= a.m) break;
      float w[E];
#pragma unroll
      for (int e = 0; e < E; ++e) w[e] = weight(kept[s * E + e]);
      store_keys<T, Pairs>(r.W, j, w);
    }
  } else {
    for (int j = lane * E; j < a.m; j += 32 * E) {
      float x[E];
      logits<T, Pairs>(a, r, j, x);
#pragma unroll
      for (int e = 0; e < E; ++e) x[e] = weight(x[e]);
      store_keys<T, Pairs>(r.W, j, x);
    }
  }
}

}  // namespace softmax

// The kernel for keys kept `cache` (softmax_cache) and taken in pairs or not.
template <typename T>
auto softmax_kernel_for(int cache, bool pairs) {
  using K = void (*)(RowsArgs<T>);
  using softmax::softmax_kernel;
  if (pairs) return cache == 16 ? K(softmax_kernel<T, 16, true>)
                    : cache == 64 ? K(softmax_kernel<T, 64, true>) : K(softmax_kernel<T, 0, true>);
  return cache == 16 ? K(softmax_kernel<T, 16, false>)
         : cache == 32 ? K(softmax_kernel<T, 32, false>) : K(softmax_kernel<T, 0, false>);
}

}  // namespace thx::cuda_th
