// th_rows_kernels.cuh: the talking-heads row kernels (th_rows_args.h says what they do), written
// once for nvcc (th_rows.cu, th_rows_bf16.cu), clang's PTX check and the CPU emulator (common/cuda_compat.h).
//
// A block takes query rows of one example in turn; its threads take the keys, one column of every
// head at a time. A thread mixes heads as a matrix-vector product whose output vector is its own
// registers (H of them, H a compile-time bucket of the heads, kRowHeads): it streams the input
// heads (loaded one by one from global memory) into the outputs, or streams the outputs (stored
// one by one) from its vector, so that no register array is ever indexed by a runtime number
// (which would put it in local memory). The matrices sit in shared memory, rows of H floats that
// every thread reads at once (a broadcast), padded with zeros past the heads. Sums are fp32, over
// heads in order; the softmax's statistics are each thread's running max and sum over its keys,
// merged per head across the block in shared memory (reduce_heads).
//
// Forward, per row: pass 1, the logits (J mixed by P_l, plus bias, masked to -inf) -> the row's
// LSE per head; pass 2, the logits again -> W = exp(L - LSE) -> U = W mixed by P_w, stored in T.
// Backward, per row, with the forward's LSE: pass 1, W and dW = dU mixed by P_w^T -> D = sum over
// keys of W dW per head; pass 2, W, U (stored, for dV), dW again -> dL = W (dW - D) -> dJ = dL
// mixed by P_l^T (stored in T), and W and dL in fp32 where the caller wants them. Up to 32 heads
// (rows_sum_projections) pass 2 takes the keys a block's width at a time and stages each key's J,
// dL, W and dU in shared memory, from which the block adds J dL^T and W dU^T (the projections'
// gradients) into its own partial sums, each thread its own entries, over the keys in order; the
// caller sums the blocks'. A row with no key (LSE -inf) has W = 0 and so U = 0, dL = 0.
#pragma once
#include "attention/cuda/th_rows_args.h"
#include "common/cuda_compat.h"

namespace thx::cuda_th {
namespace rows {

// The most threads a block is launched with, and the fewest blocks a multiprocessor must hold at
// once: the registers a thread may have follow (65,536 / threads / blocks: 80 at 16 heads, up to
// 255 at 64), so that small buckets, whose vectors are short, run more blocks.
constexpr int kMaxThreads = 128;
constexpr int min_blocks(int H) { return H <= 16 ? 6 : H <= 32 ? 4 : H <= 48 ? 3 : 2; }
// The backward's, where it sums the projections' gradients (up to 32 heads): one block fewer.
constexpr int min_blocks_backward(int H) { return H <= 16 ? 5 : H <= 32 ? 3 : min_blocks(H); }

// (m, s) <- the statistics of both sets: max, and the sum of exp(x - max). Symmetric, so lanes
// merging in either order agree bit for bit.
THX_DEVICE void merge(float& m, float& s, float m2, float s2) {
  const float mx = thx_fmax(m, m2);
  if (mx == -thx_inf()) return;
  s = s * thx_exp(m - mx) + s2 * thx_exp(m2 - mx);
  m = mx;
}
// (m, s) <- the statistics with one more logit l (-inf: masked, nothing added): one exp (Fast:
// thx_exp_fast, for the bf16 kernels, whose weights are rounded to bf16 after), of m - l where l
// is the new max (s rescaled, plus 1) and of l - m where it is not (added). Without branches: as
// two branches, a warp whose lanes differed took both exps and four branches. Branches keeps them
// (a few registers fewer: the flash forward at 48 heads, at 255, spilled without them). The same
// numbers either way. (A masked logit's e of 0 leaves s: s + 0 is s, s being 0 or a sum of exps.)
template <bool Fast = false, bool Branches = false>
THX_DEVICE void add_logit(float& m, float& s, float l) {
  if (Branches) {
    if (l == -thx_inf()) return;
    if (l > m) s = s * (Fast ? thx_exp_fast(m - l) : thx_exp(m - l)) + 1.f, m = l;
    else s += Fast ? thx_exp_fast(l - m) : thx_exp(l - m);
    return;
  }
  const bool up = l > m;
  const float d = l - m, x = up ? -d : d;  // (-(l - m) is m - l, bit for bit)
  const float e = l == -thx_inf() ? 0.f : Fast ? thx_exp_fast(x) : thx_exp(x);
  s = up ? s * e + 1.f : s + e;
  m = up ? l : m;
}

// Where the block's shared floats are: P_l [h_k][H], P_w^T [h_v][H], lse [H], d [H], then one or
// two [H][threads] planes of per-thread statistics (rows_shared_bytes); backward, the staged keys
// (sj, sdl, sw, sdu, rows of threads + 1) where slot0 is, and the partial sums (acc).
struct Shared {
  float *pl, *pwt, *lse, *d, *slot0, *slot1;
  float *sj, *sdl, *sw, *sdu, *acc;
};
template <typename T, int H>
THX_DEVICE Shared shared_layout(const RowsArgs<T>& a) {
  THX_SHARED(shared_bytes);
  Shared s;
  s.pl = reinterpret_cast<float*>(shared_bytes);
  s.pwt = s.pl + (a.P_l ? a.h_k * H : 0);
  s.lse = s.pwt + (a.P_w ? a.h_v * H : 0);
  s.d = s.lse + H;
  s.slot0 = s.d + H;
  s.slot1 = s.slot0 + H * int(blockDim.x);
  const int ld = blockDim.x + 1;
  s.sj = s.slot0;
  s.sdl = s.sj + (a.P_l ? a.h_k * ld : 0);
  s.sw = s.sdl + (a.P_l ? a.h * ld : 0);
  s.sdu = s.sw + (a.P_w ? a.h * ld : 0);
  const int stage = int(s.sdu + (a.P_w ? a.h_v * ld : 0) - s.sj), slots = H * int(blockDim.x);
  s.acc = s.slot0 + (slots > stage ? slots : stage);
  return s;
}

// P_l as rows [k][H] and P_w as rows [v][H] (transposed), zero past h; then a barrier.
template <typename T, int H>
THX_DEVICE void load_mixings(const RowsArgs<T>& a, const Shared& s) {
  if (a.P_l)
    for (int e = threadIdx.x; e < a.h_k * H; e += blockDim.x) {
      const int k = e / H, o = e % H;
      s.pl[e] = o < a.h ? a.P_l[k * a.h + o] : 0.f;
    }
  if (a.P_w)
    for (int e = threadIdx.x; e < a.h_v * H; e += blockDim.x) {
      const int v = e / H, o = e % H;
      s.pwt[e] = o < a.h ? a.P_w[o * a.h_v + v] : 0.f;
    }
  __syncthreads();
}

// One key of one row: where its elements are in the planes and in the bias and mask.
struct Key {
  int64_t plane;   // offset of (example, head 0, row, key) in a [b, heads, rows, m] plane, per head of `heads`
  int64_t stride;  // rows * m: from one head to the next
  int64_t bias, mask;  // offsets of (example, head 0, row, key) in the bias and the mask
};
template <typename T>
THX_DEVICE Key key_at(const RowsArgs<T>& a, int bb, int i, int j) {
  const int64_t stride = int64_t(a.rows) * a.m, at = int64_t(i) * a.m + j;
  return {at, stride, bb * a.bias_stride[0] + i * a.bias_stride[2] + j * a.bias_stride[3],
          bb * a.mask_stride[0] + i * a.mask_stride[2] + j * a.mask_stride[3]};
}
// The head `o` of a [b, heads, rows, m] plane at key `k` of example bb.
THX_DEVICE int64_t at_head(const Key& k, int bb, int heads, int o) {
  return (int64_t(bb) * heads + o) * k.stride + k.plane;
}

// v <- the key's heads of `plane` ([b, heads_in, rows, m]) mixed by P's rows [heads_in][H] in
// shared memory (as a matrix-vector product, the input heads streamed in); unless `mixed`, its
// first h heads as they are. 0 past h. (A flag, not a null P: a pointer that may be null or
// shared is generic to the compiler, whose loads through it cost registers and spilled.)
template <typename T, int H>
THX_DEVICE void mix_in(const T* plane, int heads_in, bool mixed, const float* P, int h, const Key& key, int bb,
                       float (&v)[H]) {
  if (mixed) {
#pragma unroll
    for (int o = 0; o < H; ++o) v[o] = 0.f;
#pragma unroll 1  // (unrolled, the compiler fetched several rows of P ahead and spilled at 64 heads)
    for (int k = 0; k < heads_in; ++k) {
      const float x = thx_to_float(plane[at_head(key, bb, heads_in, k)]);
      const float* p = P + k * H;
#pragma unroll
      for (int o = 0; o < H; ++o) v[o] += x * p[o];
    }
  } else {
#pragma unroll
    for (int o = 0; o < H; ++o) v[o] = o < h ? thx_to_float(plane[at_head(key, bb, h, o)]) : 0.f;
  }
}

// The key's heads of `plane` ([b, heads_out, rows, m]) <- v mixed by P's rows [heads_out][H] in
// shared memory (the output heads streamed out), in T; unless `mixed`, v's first h heads as they are.
template <typename T, int H>
THX_DEVICE void mix_out(T* plane, int heads_out, bool mixed, const float* P, int h, const Key& key, int bb,
                        const float (&v)[H]) {
  if (mixed) {
#pragma unroll 1
    for (int k = 0; k < heads_out; ++k) {
      const float* p = P + k * H;
      float x = 0.f;
#pragma unroll
      for (int o = 0; o < H; ++o) x += v[o] * p[o];
      plane[at_head(key, bb, heads_out, k)] = thx_from_float<T>(x);
    }
  } else {
#pragma unroll
    for (int o = 0; o < H; ++o)
      if (o < h) plane[at_head(key, bb, h, o)] = thx_from_float<T>(v[o]);
  }
}

// c <- the logits L of the key's h heads (0 past h): J mixed by P_l, plus the bias, -inf where
// masked. The mixing is mix_in's, written out: through mix_in, nvcc 13 spilled 504 bytes in the
// forward at 64 heads (and none this way).
template <typename T, int H>
THX_DEVICE void logits(const RowsArgs<T>& a, const Shared& s, const Key& key, int bb, float (&c)[H]) {
  if (a.P_l) {
#pragma unroll
    for (int o = 0; o < H; ++o) c[o] = 0.f;
#pragma unroll 1
    for (int k = 0; k < a.h_k; ++k) {
      const float x = thx_to_float(a.J[at_head(key, bb, a.h_k, k)]);
      const float* p = s.pl + k * H;
#pragma unroll
      for (int o = 0; o < H; ++o) c[o] += x * p[o];
    }
  } else {
#pragma unroll
    for (int o = 0; o < H; ++o) c[o] = o < a.h ? thx_to_float(a.J[at_head(key, bb, a.h, o)]) : 0.f;
  }
#pragma unroll
  for (int o = 0; o < H; ++o)
    if (o < a.h) {
      if (a.bias) c[o] += a.bias[key.bias + o * a.bias_stride[1]];
      if (a.mask && !a.mask[key.mask + o * a.mask_stride[1]]) c[o] = -thx_inf();
    }
}

// c (logits) <- the weights exp(L - LSE), 0 past h and in a row with no key.
template <int H>
THX_DEVICE void weights(int h, const float* lse, float (&c)[H]) {
#pragma unroll
  for (int o = 0; o < H; ++o) c[o] = o < h && lse[o] != -thx_inf() ? thx_exp(c[o] - lse[o]) : 0.f;
}

// The key's U = W mixed by P_w (or W itself), stored in T.
template <typename T, int H>
THX_DEVICE void store_u(const RowsArgs<T>& a, const Shared& s, const Key& key, int bb, const float (&c)[H]) {
  mix_out<T, H>(a.U, a.h_v, a.P_w, s.pwt, a.h, key, bb, c);
}
// e <- the key's dW = dU mixed by P_w^T (or dU itself), 0 past h.
template <typename T, int H>
THX_DEVICE void weight_grads(const RowsArgs<T>& a, const Shared& s, const Key& key, int bb, float (&e)[H]) {
  mix_in<T, H>(a.dU, a.h_v, a.P_w, s.pwt, a.h, key, bb, e);
}
// The key's dJ = dL mixed by P_l^T (or dL itself), stored in T.
template <typename T, int H>
THX_DEVICE void store_dj(const RowsArgs<T>& a, const Shared& s, const Key& key, int bb, const float (&c)[H]) {
  mix_out<T, H>(a.dJ, a.h_k, a.P_l, s.pl, a.h, key, bb, c);
}

// Every head's statistics across the block: lse[o] = max + log(sum) (-inf for a row with no key)
// from the per-thread running max (slot0) and sum (slot1); or, where `sum_only`, d[o] = the sum of
// slot0's partials. In two steps, each a barrier: kRowGroups threads a head each fold a group of
// consecutive slots into the group's first, then one thread a head folds the groups. (A warp's
// shuffles, one head at a time, take more steps for the dozen heads and more a row holds.)
constexpr int kRowGroups = 16;
THX_DEVICE void fold(const Shared& s, int at, int count, bool sum_only) {
  float m = s.slot0[at], t = sum_only ? 0.f : s.slot1[at];
  for (int x = at + 1; x < at + count; ++x) {
    if (sum_only) m += s.slot0[x];
    else merge(m, t, s.slot0[x], s.slot1[x]);
  }
  s.slot0[at] = m;
  if (!sum_only) s.slot1[at] = t;
}
THX_DEVICE void reduce_heads(int h, const Shared& s, bool sum_only) {
  const int n = blockDim.x, per = (n + kRowGroups - 1) / kRowGroups;
  for (int e = threadIdx.x; e < h * kRowGroups; e += n) {
    const int o = e / kRowGroups, first = e % kRowGroups * per;
    if (first < n) fold(s, o * n + first, per < n - first ? per : n - first, sum_only);
  }
  __syncthreads();
  for (int o = threadIdx.x; o < h; o += n) {
    float m = s.slot0[o * n], t = sum_only ? 0.f : s.slot1[o * n];
    for (int first = per; first < n; first += per) {
      if (sum_only) m += s.slot0[o * n + first];
      else merge(m, t, s.slot0[o * n + first], s.slot1[o * n + first]);
    }
    if (sum_only) s.d[o] = m;
    else s.lse[o] = m == -thx_inf() ? m : m + thx_log(t);
  }
  __syncthreads();
}

// Forward pass 1 over one row: each thread's running max and sum per head over its keys, then the
// row's LSE (shared, and stored).
template <typename T, int H>
THX_DEVICE void row_statistics(const RowsArgs<T>& a, const Shared& s, int bb, int i) {
  const int n = blockDim.x, t = threadIdx.x;
#pragma unroll
  for (int o = 0; o < H; ++o) s.slot0[o * n + t] = -thx_inf(), s.slot1[o * n + t] = 0.f;
  for (int j = t; j < a.m; j += n) {
    float c[H];
    logits<T, H>(a, s, key_at(a, bb, i, j), bb, c);
#pragma unroll
    for (int o = 0; o < H; ++o) {
      const float l = c[o], m = s.slot0[o * n + t];
      if (o >= a.h || l == -thx_inf()) continue;
      if (l > m) s.slot1[o * n + t] = s.slot1[o * n + t] * thx_exp(m - l) + 1.f, s.slot0[o * n + t] = l;
      else s.slot1[o * n + t] += thx_exp(l - m);
    }
  }
  __syncthreads();
  reduce_heads(a.h, s, false);
  for (int o = t; o < a.h; o += n) a.lse[(int64_t(bb) * a.h + o) * a.lse_n + a.lse_row0 + i] = s.lse[o];
}

// f(i) for each query row i the block takes, in turn.
template <typename T, typename F>
THX_DEVICE void each_row(const RowsArgs<T>& a, F&& f) {
  for (int r = 0; r < a.rows_per_block; ++r) {
    const int i = int(blockIdx.y) * a.rows_per_block + r;
    if (i >= a.rows) return;
    f(i);
  }
}

template <typename T, int H>
__global__ void THX_LAUNCH_BOUNDS(kMaxThreads, min_blocks(H)) rows_forward_kernel(RowsArgs<T> a) {
  const Shared s = shared_layout<T, H>(a);
  load_mixings<T, H>(a, s);
  const int bb = blockIdx.x;
  each_row(a, [&](int i) {
    row_statistics<T, H>(a, s, bb, i);
    for (int j = threadIdx.x; j < a.m; j += blockDim.x) {
      const Key key = key_at(a, bb, i, j);
      float c[H];
      logits<T, H>(a, s, key, bb, c);
      weights<H>(a.h, s.lse, c);
      store_u<T, H>(a, s, key, bb, c);
    }
  });
}

// Backward pass 1 over one row: D = sum over keys of W dW per head (shared), from each thread's
// partial sums.
template <typename T, int H>
THX_DEVICE void row_d(const RowsArgs<T>& a, const Shared& s, int bb, int i) {
  const int n = blockDim.x, t = threadIdx.x;
#pragma unroll
  for (int o = 0; o < H; ++o) s.slot0[o * n + t] = 0.f;
  for (int j = t; j < a.m; j += n) {
    const Key key = key_at(a, bb, i, j);
    float c[H], e[H];
    logits<T, H>(a, s, key, bb, c);
    weights<H>(a.h, s.lse, c);
    weight_grads<T, H>(a, s, key, bb, e);
#pragma unroll
    for (int o = 0; o < H; ++o)
      if (o < a.h) s.slot0[o * n + t] += c[o] * e[o];
  }
  __syncthreads();
  reduce_heads(a.h, s, true);
}

// Backward pass 2 for one key (j < m): U stored, dW, dL = W (dW - D), W and dL stored where asked,
// dJ stored; where the block sums the projections' gradients (kSums and a.dP), the key's J, dL, W
// and dU staged in column t of their rows (J and dU read again: the lines are in L1).
template <typename T, int H, bool kSums>
THX_DEVICE void key_grads(const RowsArgs<T>& a, const Shared& s, int bb, int i, int j) {
  const int t = threadIdx.x, ld = blockDim.x + 1;
  const Key key = key_at(a, bb, i, j);
  float c[H], e[H];
  logits<T, H>(a, s, key, bb, c);
  weights<H>(a.h, s.lse, c);
  store_u<T, H>(a, s, key, bb, c);
  weight_grads<T, H>(a, s, key, bb, e);
#pragma unroll
  for (int o = 0; o < H; ++o)
    if (o < a.h) {
      if (a.W) a.W[at_head(key, bb, a.h, o)] = c[o];
      if (kSums && a.dP && a.P_w) s.sw[o * ld + t] = c[o];
      c[o] *= e[o] - s.d[o];  // dL
      if (a.dL) a.dL[at_head(key, bb, a.h, o)] = c[o];
      if (kSums && a.dP && a.P_l) s.sdl[o * ld + t] = c[o];
    }
  store_dj<T, H>(a, s, key, bb, c);
  if (!kSums || !a.dP) return;
  if (a.P_l)
    for (int k = 0; k < a.h_k; ++k) s.sj[k * ld + t] = thx_to_float(a.J[at_head(key, bb, a.h_k, k)]);
  if (a.P_w)
    for (int v = 0; v < a.h_v; ++v) s.sdu[v * ld + t] = thx_to_float(a.dU[at_head(key, bb, a.h_v, v)]);
}

// Column t of the staged rows zeroed: a thread past the last key adds nothing.
template <typename T>
THX_DEVICE void stage_zeros(const RowsArgs<T>& a, const Shared& s) {
  const int t = threadIdx.x, ld = blockDim.x + 1;
  if (a.P_l) {
    for (int k = 0; k < a.h_k; ++k) s.sj[k * ld + t] = 0.f;
    for (int o = 0; o < a.h; ++o) s.sdl[o * ld + t] = 0.f;
  }
  if (a.P_w) {
    for (int o = 0; o < a.h; ++o) s.sw[o * ld + t] = 0.f;
    for (int v = 0; v < a.h_v; ++v) s.sdu[v * ld + t] = 0.f;
  }
}

// The staged keys' J dL^T and W dU^T added into the block's partial sums, each thread its own
// entries, each a sum over the keys in order.
template <typename T>
THX_DEVICE void add_projection_grads(const RowsArgs<T>& a, const Shared& s) {
  const int n = blockDim.x, ld = n + 1, nl = a.P_l ? a.h_k * a.h : 0, nw = a.P_w ? a.h * a.h_v : 0;
  for (int e = threadIdx.x; e < nl + nw; e += n) {
    const float* x = e < nl ? s.sj + e / a.h * ld : s.sw + (e - nl) / a.h_v * ld;
    const float* y = e < nl ? s.sdl + e % a.h * ld : s.sdu + (e - nl) % a.h_v * ld;
    float sum = 0.f;
    for (int u = 0; u < n; ++u) sum += x[u] * y[u];
    s.acc[e] += sum;
  }
}

template <typename T, int H>
__global__ void THX_LAUNCH_BOUNDS(kMaxThreads, min_blocks_backward(H)) rows_backward_kernel(RowsArgs<T> a) {
  constexpr bool kSums = H <= kRowSumsMaxHeads;  // rows_sum_projections(H)
  const Shared s = shared_layout<T, H>(a);
  const int sums = int(rows_partial_sums(a.h_k, a.h, a.h_v, a.P_l, a.P_w));
  if (kSums && a.dP)
    for (int e = threadIdx.x; e < sums; e += blockDim.x) s.acc[e] = 0.f;
  load_mixings<T, H>(a, s);
  const int bb = blockIdx.x;
  each_row(a, [&](int i) {
    for (int o = threadIdx.x; o < H; o += blockDim.x)
      s.lse[o] = o < a.h ? a.lse[(int64_t(bb) * a.h + o) * a.lse_n + a.lse_row0 + i] : -thx_inf();
    __syncthreads();
    row_d<T, H>(a, s, bb, i);
    if constexpr (kSums) {
      for (int j0 = 0; j0 < a.m; j0 += blockDim.x) {
        const int j = j0 + int(threadIdx.x);
        if (j < a.m) key_grads<T, H, true>(a, s, bb, i, j);
        else if (a.dP) stage_zeros(a, s);
        if (a.dP) {
          __syncthreads();
          add_projection_grads(a, s);
          __syncthreads();  // before the next keys are staged
        }
      }
    } else {  // (a loop of this form: in the form above, nvcc spilled at 48 and 64 heads)
      for (int j = threadIdx.x; j < a.m; j += blockDim.x) key_grads<T, H, false>(a, s, bb, i, j);
    }
    __syncthreads();  // the next row's LSE and D overwrite this one's
  });
  if (kSums && a.dP)
    for (int e = threadIdx.x; e < sums; e += blockDim.x)
      a.dP[(int64_t(blockIdx.y) * gridDim.x + blockIdx.x) * sums + e] = s.acc[e];
}

}  // namespace rows

// The kernel for heads bucket H (kRowHeads), forward or backward.
template <typename T, bool Backward>
auto rows_kernel_for(int H) {
  using K = void (*)(RowsArgs<T>);
  switch (H) {
    case 16: return Backward ? K(rows::rows_backward_kernel<T, 16>) : K(rows::rows_forward_kernel<T, 16>);
    case 32: return Backward ? K(rows::rows_backward_kernel<T, 32>) : K(rows::rows_forward_kernel<T, 32>);
    case 48: return Backward ? K(rows::rows_backward_kernel<T, 48>) : K(rows::rows_forward_kernel<T, 48>);
    default: return Backward ? K(rows::rows_backward_kernel<T, 64>) : K(rows::rows_forward_kernel<T, 64>);
  }
}

}  // namespace thx::cuda_th
