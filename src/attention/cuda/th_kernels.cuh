// th_kernels.cuh: the fused talking-heads attention core as CUDA kernels, written once for nvcc,
// clang's PTX check and the CPU emulator (common/cuda_compat.h). The algorithm is
// docs/fused_talking_heads.md's, the one reference/blocked_talking_heads.h proves:
//  - one thread block per (example, block of R query rows), holding every head;
//  - forward: two passes over key tiles of C keys: (1) J = Q·K per head, L = P_l-mixed J + bias
//    (masked: -inf), an online max and sum per (softmax head, row) -> LSE; (2) the tile again,
//    W = exp(L - LSE), U = P_w-mixed W, O += U·V;
//  - backward: two passes again: (A) D = sum_j W dW per (softmax head, row); (B) dL = W (dW - D)
//    and every gradient from it.
// Nothing of size [h, n, m] leaves a block: the tiles live in shared memory; LSE [b,h,n] is kept.
// Numerics: every product accumulates in fp32; L, W, the statistics and every gradient sum are
// kept in fp32 (shared memory), and so are J, U, dU and dJ unless they are bf16 tensor-core
// operands only (th_args.h's Widths). The products (common/cuda_mma.h's block_gemm):
//  - Args::tensor_cores (version 2; bf16 inputs, whole warps): on tensor cores, each operand
//    rounded to bf16 as a fragment is read (J, W, U, dU, dL, dJ and P_l, P_w among them), as a
//    bf16 batched-matmul path rounds its stored intermediates;
//  - otherwise (version 1; fp32 inputs always): plain fp32 FMAs.
// Gradients that several blocks share go to fp32 buffers: dK, dV and dbias by atomics, staggered
// and four at a time as th_args.h's KeySums says; dP_l and dP_w as one partial per block (no
// contended atomic), summed by the launcher.
#pragma once
#include "common/cuda_compat.h"
#include "common/cuda_mma.h"
#include "attention/cuda/th_args.h"

namespace thx::cuda_th {

using cuda_mma::block_gemm;
using cuda_mma::Operand;
using cuda_mma::Plane;
using cuda_mma::TileGrid;

// Rows [first_row, first_row + R) of a [.., width] tensor into S [R, width] in its dtype, zero
// past the last (rows_left): the block's rows of Q or dO, a tile's keys of K or V. The rows are
// one contiguous run, copied 16 bytes a thread at a time where their start and width allow (S
// sits at a multiple of 16: th_args.h's Layout); version 2.2 divided by the width per element,
// which on the H100 made this copy a large share of the kernels' instructions.
template <typename T>
THX_DEVICE void load_rows(const T* src, T* S, int64_t first_row, int rows_left, int R, int width) {
  const T* from = src + first_row * width;
  const int have = (rows_left < R ? (rows_left > 0 ? rows_left : 0) : R) * width, all = R * width;
  constexpr int per = 16 / int(sizeof(T));
  if (width % per == 0 && reinterpret_cast<uintptr_t>(from) % 16 == 0) {
    for (int x = int(threadIdx.x) * per; x < all; x += int(blockDim.x) * per) {
      if (x < have) thx_copy16(S + x, from + x);
      else thx_zero16(S + x);
    }
    return;
  }
  for (int x = threadIdx.x; x < all; x += blockDim.x) S[x] = x < have ? from[x] : thx_from_float<T>(0.f);
}

// x / v.d for 0 <= x < 2^31 (th_args.h's Divider).
THX_DEVICE int divide(const Divider& v, int x) { return int((thx_umulhi(uint32_t(x), v.m) + uint32_t(x)) >> v.s); }

// The piece of shared memory at byte offset `at`, as T.
template <typename T>
THX_DEVICE T* at_offset(unsigned char* shared, int64_t at) {
  return reinterpret_cast<T*>(shared + at);
}
THX_DEVICE Plane f32(float* p) { return {p, false}; }

// A mixing's matrix as a product's A (output head, input head), summed over the input heads:
// P_l or P_w (left: P_l), read as it mixes forward (P_l: J -> L; P_w: W -> U) or, with
// `transpose`, backward (P_l: dL -> dJ; P_w: dU -> dW). On tensor cores in bf16 (TC) from bf16
// copies in shared memory (load_mixings), one for each direction so that the input heads are
// contiguous and pairs of them one aligned word: the products round P to bf16 as they read it,
// so the copies change no number, and they replace fp32 loads from global memory and their
// conversions; their heads are padded with zeros to a multiple of 16 where Widths::pad says.
// Otherwise P in fp32 from global memory. Made anew at each use from the arguments, so that it
// holds no register across the kernel (the bf16 backward has none to spare).
template <bool TC, typename T>
THX_DEVICE Operand mixing(const Args<T>& a, bool left, bool transpose) {
  const int rows = left ? a.h_k : a.h, cols = left ? a.h : a.h_v;  // P [rows, cols]
  if constexpr (TC && sizeof(T) == 2) {
    THX_SHARED(shared);  // [cols, rows] forward (P^T), [rows, cols] backward (P), heads padded
    const int64_t at = left ? (transpose ? a.layout.pl : a.layout.plt) : (transpose ? a.layout.pw : a.layout.pwt);
    const bool pad = a.widths.pad;
    return Operand{reinterpret_cast<const thx_bf16*>(shared + at), 0, padded_heads(transpose ? cols : rows, pad), 1}
        .padded(pad, pad);
  }
  const float* P = left ? a.p_l : a.p_w;
  return transpose ? Operand{P, 0, cols, 1} : Operand{P, 0, 1, cols};
}
// The bf16 copies of P_l and P_w (where TC and P are there: th_args.h's kernel_layout keeps them
// exactly where the planes J, U are bf16), made at a kernel's start. No barrier: the caller syncs
// before the first product reads them.
template <bool TC, typename T>
THX_DEVICE void load_mixings(const Args<T>& a) {
  if constexpr (TC && sizeof(T) == 2) {
    THX_SHARED(shared);
    for (int i = 0; i < 2; ++i) {  // (no std::initializer_list in clang's PTX check)
      const bool left = i == 0;
      const float* P = left ? a.p_l : a.p_w;
      if (!P) continue;
      const int rows = left ? a.h_k : a.h, cols = left ? a.h : a.h_v;
      const int rows16 = padded_heads(rows, a.widths.pad), cols16 = padded_heads(cols, a.widths.pad);
      thx_bf16* S = at_offset<thx_bf16>(shared, left ? a.layout.pl : a.layout.pw);
      thx_bf16* St = at_offset<thx_bf16>(shared, left ? a.layout.plt : a.layout.pwt);
      for (int x = threadIdx.x; x < rows16 * cols16; x += blockDim.x) {
        const int r = x / cols16, c = x - r * cols16;
        const thx_bf16 v = thx_from_float<thx_bf16>(r < rows && c < cols ? P[r * cols + c] : 0.f);
        S[x] = v, St[c * rows16 + r] = v;
      }
    }
  }
}

// The extra heads of a bf16 plane padded to a multiple of 16 (Widths::pad: J, and the backward's
// dU): zeros, made at a kernel's start, which no product writes over (they write the real heads
// only). No barrier, as load_mixings.
THX_DEVICE void zero_padding(const Plane& P, int heads, bool pad, int rc) {
  if (!pad || !P.bf16) return;
  thx_bf16* p = static_cast<thx_bf16*>(P.p);
  for (int x = heads * rc + int(threadIdx.x); x < padded_heads(heads, true) * rc; x += int(blockDim.x))
    p[x] = thx_from_float<thx_bf16>(0.f);
}

// The weight exp(l - LSE) of element x = (s R + r) C + c of a tile's [h,R,C] plane, its logit l,
// LSE [h,R] (lse); 0 in a row with no key (LSE -inf). For tile_logits's kWeights and tile_weights.
template <typename T>
THX_DEVICE float weight(const Args<T>& a, const float* lse, int x, float l) {
  const float m = lse[divide(a.by_c, x)];  // (s, r) = x / C
  return m == -thx_inf() ? 0.f : thx_exp(l - m);
}

// The tile's logits: Js [h_k,R,C] = Q·K per head, Ls [h,R,C] = P_l-mixed Js + bias, -inf where
// masked, past m or past n. Ks holds the tile's keys [C, h_k*d_k]. Or (kWeights, given `lse`
// [h,R]) the weights instead, as each logit is made: W = exp(L - LSE) in Ls (tile_weights's
// numbers), which the backward takes (version 2.3 made them in a second loop, after a barrier).
// The forward keeps tile_weights: at its 128 registers (two blocks a multiprocessor) with the
// output sums in registers, ptxas spills 48 bytes where the weights are made in the product's
// epilogue, and writing them there as bf16 into L's own plane spilled the same. Ends with a barrier.
enum TileOut { kLogits, kWeights };
template <bool TC, TileOut Out = kLogits, typename T>
THX_DEVICE void tile_logits(const Args<T>& a, const T* Qs, const T* Ks, const Plane& Js, float* Ls, int i0, int j0,
                            const float* lse = nullptr) {
  const int R = a.R, C = a.C, qd = a.h_k * a.d_k, rc = R * C;
  // J_k (r, c) = sum_d Q[r, k, d] K[c, k, d]
  block_gemm(TC, a.h_k, {Qs, a.d_k, qd, 1}, {Ks, a.d_k, 1, qd}, R, C, a.d_k,
             [&](int k, int r, int c, float v) { Js.set(k * rc + r * C + c, v); });
  __syncthreads();
  const int64_t b = blockIdx.y;
  const bool plain = i0 + R <= a.n && j0 + C <= a.m && !a.bias && !a.mask;  // every position a real one, as it is
  auto logit = [&](int s, int y, float l) {  // plane s, position y = r * C + c
    if (plain) return l;
    const int r = divide(a.by_c, y), i = i0 + r, j = j0 + y - r * C;
    if (i >= a.n || j >= a.m) return -thx_inf();
    if (a.bias) l += a.bias[b * a.bias_stride[0] + s * a.bias_stride[1] + i * a.bias_stride[2] + j * a.bias_stride[3]];
    if (a.mask && !a.mask[b * a.mask_stride[0] + s * a.mask_stride[1] + i * a.mask_stride[2] + j * a.mask_stride[3]])
      l = -thx_inf();
    return l;
  };
  auto store = [&](int x, float l) {  // x = s * rc + y
    if constexpr (Out == kLogits) Ls[x] = l;
    else Ls[x] = weight(a, lse, x, l);
  };
  if (a.p_l) {  // L (s, y) = sum_k P_l[k, s] J[k, y]
    block_gemm(TC, 1, mixing<TC>(a, true, false), Js.operand(0, rc, 1).padded(a.widths.pad && Js.bf16, false), a.h, rc,
               a.h_k,
               [&](int, int s, int y, float v) { store(s * rc + y, logit(s, y, v)); });
  } else {
    for (int x = threadIdx.x; x < a.h * rc; x += blockDim.x) store(x, logit(x / rc, x % rc, Js.get(x)));
  }
  __syncthreads();
}

// W = exp(L - LSE) over Ls [h,R,C]: in place, or (W16) rounded to bf16 into W16 [h,R,C]; a row
// with no key (LSE -inf) gets 0. The forward's second pass takes W16, in J's plane (which it
// reads no more) where J is bf16 and holds h heads: W's only readers there are products on
// tensor cores, which round it to bf16 as they read it, so the copy changes no number and spares
// them fp32 reads and roundings (and lets ldmatrix read it).
template <typename T>
THX_DEVICE void tile_weights(const Args<T>& a, float* Ls, const float* lse_s, thx_bf16* W16 = nullptr) {
  const int rc = a.R * a.C;
  for (int x = threadIdx.x; x < a.h * rc; x += blockDim.x) {
    const float w = weight(a, lse_s, x, Ls[x]);
    if (W16) W16[x] = thx_from_float<thx_bf16>(w);
    else Ls[x] = w;
  }
}

// Out [g2,R,C] = sum_g P(t, g) In[g,R,C] for t < g2: a mixing across heads, P as mixing() gives it;
// In_padded: In's heads are padded with zeros to a multiple of 16 (Widths::pad; so is W where the
// forward writes it into J's padded plane and fills its heads, h = h_k).
THX_DEVICE void mix(bool tc, const Operand& p, const Plane& In, const Plane& Out, int g, int g2, int rc,
                    bool in_padded = false) {
  block_gemm(tc, 1, p, In.operand(0, rc, 1).padded(in_padded, false), g2, rc, g,
             [&](int, int t, int y, float v) { Out.set(t * rc + y, v); });
}

// A mixing's gradient, this block's share: P[g,g2] += sum over the tile of A[g] B[g2], over A
// [g,R,C] and B [g2,R,C]. At 12 heads such a product is two tiles, each a warp's 16 k-steps
// over the tile's positions: `first_warp` sends dP_l's to other warps than dP_w's, which run
// just before it with no barrier between (in version 2.3 both fell to warps 0 and 1).
// a_padded, b_padded: A's or B's heads are padded with zeros to a multiple of 16 (Widths::pad).
THX_DEVICE void projection_grad(bool tc, const Plane& A, const Plane& B, float* P, int g, int g2, int rc,
                                int first_warp = 0, bool a_padded = false, bool b_padded = false) {
  block_gemm(tc, 1, A.operand(0, rc, 1).padded(false, a_padded), B.operand(0, 1, rc).padded(false, b_padded), g, g2, rc,
             [&](int, int x, int y, float v) { P[x * g2 + y] += v; }, first_warp);
}

// p[0..count) += v[0..count) (p's elements `stride` apart) by atomics: one vector reduction where
// `vector` allows it (th_args.h's KeySums), the four adjacent and 16-byte aligned.
THX_DEVICE void add_shared_sums(float* p, int64_t stride, const float* v, int count, bool vector) {
  if (vector && count == 4 && stride == 1 && reinterpret_cast<uintptr_t>(p) % 16 == 0)
    thx_atomic_add4(p, v[0], v[1], v[2], v[3]);
  else
    for (int i = 0; i < count; ++i) thx_atomic_add(p + i * stride, v[i]);
}

// The tile's keys' share of a gradient: G[c,g,e] += sum_r P[g,r,c] X[r,g,e] for c < keys_left,
// by atomics (the other blocks of the example add theirs). dV: P = U, X = dO; dK: P = dJ, X = Q.
template <typename T>
THX_DEVICE void key_grad(bool tc, const Plane& P, const T* X, float* G, int R, int C, int heads, int dim,
                         int keys_left, bool vector) {
  const int width = heads * dim;
  block_gemm_quads(tc, heads, P.operand(R * C, 1, C), {X, dim, width, 1}, C, dim, R,
                   [&](int g, int c, int e, const float* v, int count) {
                     if (c < keys_left) add_shared_sums(G + c * width + g * dim + e, 1, v, count, vector);
                   });
}

// dbias[b,s,i,j] += dL[s,r,c] over the tile (i = i0 + r < n, j = j0 + c < m), by atomics (where
// the bias broadcasts over examples, their blocks add to the same), four adjacent keys a thread.
template <typename T>
THX_DEVICE void bias_grad(const Args<T>& a, const float* dL, int i0, int j0) {
  const int R = a.R, C = a.C, quads = (C + 3) / 4;
  const int64_t* bs = a.grad_bias_stride;
  const int64_t b = blockIdx.y;
  for (int x = threadIdx.x; x < a.h * R * quads; x += blockDim.x) {
    const int s = x / (R * quads), r = x / quads % R, c = 4 * (x % quads), i = i0 + r;
    const int left = (C - c < a.m - j0 - c ? C - c : a.m - j0 - c), count = left < 4 ? left : 4;
    if (i >= a.n || count <= 0) continue;
    add_shared_sums(a.grad_bias + b * bs[0] + s * bs[1] + i * bs[2] + (j0 + c) * bs[3], bs[3],
                    dL + (s * R + r) * C + c, count, a.key_sums == KeySums::kVector);
  }
}

// Compiled for two blocks to a multiprocessor (128 registers a thread at 256 threads): where its
// shared memory allows (12 heads at d_model 768, bf16 on tensor cores), two run side by side.
template <typename T, bool TC = false>
__global__ void THX_LAUNCH_BOUNDS(kMaxThreads, kForwardBlocksPerSM) forward_kernel(Args<T> a) {
  THX_SHARED(shared_bytes);
  const int R = a.R, C = a.C, qd = a.h_k * a.d_k, vd = a.h_v * a.d_v, rc = R * C;
  const int i0 = blockIdx.x * R;
  const int64_t b = blockIdx.y;
  const Layout& at = a.layout;
  T* Qs = at_offset<T>(shared_bytes, at.q);
  T* Ks = at_offset<T>(shared_bytes, at.k);
  T* Vs = at_offset<T>(shared_bytes, at.v);
  const Plane Js{shared_bytes + at.j, a.widths.j == 2};
  float* Ls = at_offset<float>(shared_bytes, at.l);
  const Plane Us{shared_bytes + at.u, a.widths.u == 2};
  // The output sums O [R, h_v*d_v]: in shared memory, or (bf16 on tensor cores, where each warp's
  // share fits) in `acc`, each warp's 16x8 tiles of it (cuda_mma.h's block_gemm_accumulate).
  const bool in_registers = TC && a.sums_in_registers;
  float acc[kForwardOutputTiles][4] = {};
  float* Os = at_offset<float>(shared_bytes, at.o);
  float* Ms = at_offset<float>(shared_bytes, at.m);  // [h,R]: the running max, then LSE
  float* Ss = at_offset<float>(shared_bytes, at.s);  // [h,R]: the running sum
  load_rows(a.q, Qs, b * a.n + i0, a.n - i0, R, qd);
  load_mixings<TC>(a);
  zero_padding(Js, a.h_k, a.widths.pad, rc);
  for (int x = threadIdx.x; x < a.h * R; x += blockDim.x) Ms[x] = -thx_inf(), Ss[x] = 0.f;
  if (!in_registers)
    for (int x = threadIdx.x; x < R * vd; x += blockDim.x) Os[x] = 0.f;
  __syncthreads();
  for (int j0 = 0; j0 < a.m; j0 += C) {  // pass 1: the softmax statistics
    load_rows(a.k, Ks, b * a.m + j0, a.m - j0, C, qd);
    __syncthreads();
    tile_logits<TC>(a, Qs, Ks, Js, Ls, i0, j0);
    for (int x = threadIdx.x; x < a.h * R; x += blockDim.x) {
      const float* l = Ls + x * C;
      float mx = -thx_inf();
      for (int c = 0; c < C; ++c) mx = thx_fmax(mx, l[c]);
      if (mx == -thx_inf()) continue;
      const float M = thx_fmax(Ms[x], mx);
      float s = Ss[x] * thx_exp(Ms[x] - M);
      for (int c = 0; c < C; ++c) s += thx_exp(l[c] - M);
      Ms[x] = M, Ss[x] = s;
    }
    __syncthreads();
  }
  for (int x = threadIdx.x; x < a.h * R; x += blockDim.x) {
    const int s = x / R, i = i0 + x % R;
    Ms[x] = Ss[x] > 0.f ? Ms[x] + thx_log(Ss[x]) : -thx_inf();
    if (i < a.n) a.lse[(b * a.h + s) * a.n + i] = Ms[x];
  }
  __syncthreads();
  for (int j0 = 0; j0 < a.m; j0 += C) {  // pass 2: the output
    load_rows(a.k, Ks, b * a.m + j0, a.m - j0, C, qd);
    load_rows(a.v, Vs, b * a.m + j0, a.m - j0, C, vd);
    __syncthreads();
    tile_logits<TC>(a, Qs, Ks, Js, Ls, i0, j0);
    // W in bf16 into J's plane (dead now) where it fits: its readers round it so (no number moves).
    const bool w16 = TC && Js.bf16 && a.h <= a.h_k;
    tile_weights(a, Ls, Ms, w16 ? static_cast<thx_bf16*>(Js.p) : nullptr);
    __syncthreads();
    Plane U = w16 ? Js : f32(Ls);
    if (a.p_w) {
      mix(TC, mixing<TC>(a, false, false), U, Us, a.h, a.h_v, rc, w16 && a.widths.pad && a.h == a.h_k);
      __syncthreads();
      U = Us;
    }
    // O[r, t, e] += sum_c U[t, r, c] V[c, t, e]
    if (in_registers)
      cuda_mma::block_gemm_accumulate(a.h_v, U.operand(rc, C, 1), {Vs, a.d_v, vd, 1}, R, a.d_v, C, acc);
    else
      block_gemm(TC, a.h_v, U.operand(rc, C, 1), {Vs, a.d_v, vd, 1}, R, a.d_v, C,
                 [&](int t, int r, int e, float v) { Os[r * vd + t * a.d_v + e] += v; });
    __syncthreads();
  }
  T* o = a.o + (b * a.n + i0) * vd;
  if (in_registers)
    cuda_mma::accumulated_outputs(a.h_v, R, a.d_v, acc, [&](int t, int r, int e, float v) {
      if (i0 + r < a.n) o[r * vd + t * a.d_v + e] = thx_from_float<T>(v);
    });
  else
    for (int x = threadIdx.x; x < R * vd; x += blockDim.x)
      if (i0 + x / vd < a.n) o[x] = thx_from_float<T>(Os[x]);
}

// Backward's shared memory (th_args.h's kernel_layout): the block's rows (Q, dO, and the dQ sums
// unless they are in registers), the tile's keys (K, V), the tile's [heads,R,C] planes, and per
// (softmax head, row) LSE and D. This block's dP_l and dP_w partials are summed in place in
// global memory, which only this block touches.
template <typename T>
struct BackwardTiles {
  T *Qs, *dOs, *Ks, *Vs;  // the block's rows, the tile's keys
  float* dQs;  // or, where a.sums_in_registers (bf16 on tensor cores), in dQ_acc
  float dQ_acc[kBackwardOutputTiles][4];
  Plane Js, dJs;  // [h_k,R,C]
  float *Ls, *dWs;  // [h,R,C]: L then W; dW then dL
  Plane Us, dUs;  // [h_v,R,C]
  float *lse, *Ds;  // [h,R]
  float *dPl, *dPw;  // [h_k,h], [h,h_v]: this block's partials, in global memory (zeroed)
};
template <typename T>
THX_DEVICE BackwardTiles<T> backward_tiles(const Args<T>& a, unsigned char* sm) {
  const Layout& at = a.layout;
  const bool j16 = a.widths.j == 2, u16 = a.widths.u == 2;
  BackwardTiles<T> t{};
  t.Qs = at_offset<T>(sm, at.q), t.dOs = at_offset<T>(sm, at.dout), t.Ks = at_offset<T>(sm, at.k);
  t.Vs = at_offset<T>(sm, at.v), t.dQs = at_offset<float>(sm, at.dq);
  t.Js = {sm + at.j, j16}, t.dJs = {sm + at.dj, j16}, t.Us = {sm + at.u, u16}, t.dUs = {sm + at.du, u16};
  t.Ls = at_offset<float>(sm, at.l), t.dWs = at_offset<float>(sm, at.dw);
  t.lse = at_offset<float>(sm, at.m), t.Ds = at_offset<float>(sm, at.s);
  const int64_t block = int64_t(blockIdx.y) * gridDim.x + blockIdx.x;
  t.dPl = a.grad_p_l ? a.grad_p_l + block * a.h_k * a.h : nullptr;
  t.dPw = a.grad_p_w ? a.grad_p_w + block * a.h * a.h_v : nullptr;
  return t;
}

// A tile (K, V loaded) recomputed: W in Ls, dU in dUs, and with P_w U in Us. Returns dW (pass
// A) or, given D (pass B), dL = W (dW - D) in its place, made as each dW is: in dWs with P_w,
// in dUs (fp32 then) without. Ends with a barrier.
template <bool TC, typename T>
THX_DEVICE float* tile_weights_and_grads(const Args<T>& a, const BackwardTiles<T>& t, int i0, int j0,
                                         const float* D = nullptr) {
  const int R = a.R, C = a.C, rc = R * C, vd = a.h_v * a.d_v;
  tile_logits<TC, kWeights>(a, t.Qs, t.Ks, t.Js, t.Ls, i0, j0, t.lse);  // W; ends with a barrier
  auto grad = [&](float* dW, int x, float v) {  // dW[x] = v, or dL
    dW[x] = D ? t.Ls[x] * (v - D[divide(a.by_c, x)]) : v;
  };
  float* dW = a.p_w ? t.dWs : static_cast<float*>(t.dUs.p);
  // dU [h_v,R,C] = sum_e dO[r,t,e] V[c,t,e]: dW itself without P_w
  block_gemm(TC, a.h_v, {t.dOs, a.d_v, vd, 1}, {t.Vs, a.d_v, 1, vd}, R, C, a.d_v, [&](int u, int r, int c, float v) {
    if (a.p_w) t.dUs.set((u * R + r) * C + c, v);
    else grad(dW, (u * R + r) * C + c, v);
  });
  __syncthreads();
  if (!a.p_w) return dW;
  // dW[s] = sum_t P_w[s,t] dU[t]
  block_gemm(TC, 1, mixing<TC>(a, false, true), t.dUs.operand(0, rc, 1).padded(a.widths.pad && t.dUs.bf16, false),
             a.h, rc, a.h_v,
             [&](int, int s, int y, float v) { grad(dW, s * rc + y, v); });
  mix(TC, mixing<TC>(a, false, false), f32(t.Ls), t.Us, a.h, a.h_v, rc);  // U[t] = sum_s P_w[s,t] W[s]
  __syncthreads();
  return dW;
}

// Pass B's sums for one tile: dV, dP_w, dL (in place of dW), dbias, dP_l, dJ, then dQ and dK.
template <bool TC, typename T>
THX_DEVICE void tile_gradients(const Args<T>& a, BackwardTiles<T>& t, int i0, int j0) {
  const int R = a.R, C = a.C, qd = a.h_k * a.d_k, vd = a.h_v * a.d_v, rc = R * C;
  const int64_t b = blockIdx.y;
  float* dL = tile_weights_and_grads<TC>(a, t, i0, j0, t.Ds);
  const Plane U = a.p_w ? t.Us : f32(t.Ls);
  const bool vector = a.key_sums == KeySums::kVector;
  float* dV = a.grad_v + (b * a.m + j0) * vd;
  key_grad(TC, U, t.dOs, dV, R, C, a.h_v, a.d_v, a.m - j0, vector);
  if (a.p_w)  // dP_w[s,t] += sum W[s] dU[t]
    projection_grad(TC, f32(t.Ls), t.dUs, t.dPw, a.h, a.h_v, rc, 0, false, a.widths.pad && t.dUs.bf16);
  // (Version 2.3 made dL here in a loop of its own, then a barrier: nothing above writes what follows reads.)
  if (a.grad_bias) bias_grad(a, dL, i0, j0);
  Plane dJ = f32(dL);
  if (a.p_l) {
    const int after_dPw = a.p_w ? TileGrid(1, a.h, a.h_v).turns(blockDim.x / 32) : 0;  // the warps dP_w took
    // dP_l[k,s] += sum J[k] dL[s]
    projection_grad(TC, t.Js, dJ, t.dPl, a.h_k, a.h, rc, after_dPw, a.widths.pad && t.Js.bf16);
    mix(TC, mixing<TC>(a, true, true), dJ, t.dJs, a.h, a.h_k, rc);  // dJ[k] = sum_s P_l[k,s] dL[s]
    dJ = t.dJs;
  }
  __syncthreads();
  // dQ[r,k,d] += sum_c dJ[k,r,c] K[c,k,d]
  if (TC && a.sums_in_registers)
    cuda_mma::block_gemm_accumulate(a.h_k, dJ.operand(rc, C, 1), {t.Ks, a.d_k, qd, 1}, R, a.d_k, C, t.dQ_acc);
  else
    block_gemm(TC, a.h_k, dJ.operand(rc, C, 1), {t.Ks, a.d_k, qd, 1}, R, a.d_k, C,
               [&](int k, int r, int d, float v) { t.dQs[r * qd + k * a.d_k + d] += v; });
  float* dK = a.grad_k + (b * a.m + j0) * qd;
  key_grad(TC, dJ, t.Qs, dK, R, C, a.h_k, a.d_k, a.m - j0, vector);
  __syncthreads();
}

// Compiled for one block to a multiprocessor, as its shared memory leaves it at every T5 width:
// up to 255 registers a thread (the bf16 one on tensor cores takes about 150).
template <typename T, bool TC = false>
__global__ void THX_LAUNCH_BOUNDS(kMaxThreads, kBackwardBlocksPerSM) backward_kernel(Args<T> a) {
  THX_SHARED(shared_bytes);
  BackwardTiles<T> t = backward_tiles(a, shared_bytes);
  const bool in_registers = TC && a.sums_in_registers;
  const int R = a.R, C = a.C, qd = a.h_k * a.d_k, vd = a.h_v * a.d_v;
  const int i0 = blockIdx.x * R;
  const int64_t b = blockIdx.y;
  load_rows(a.q, t.Qs, b * a.n + i0, a.n - i0, R, qd);
  load_rows(a.grad_o, t.dOs, b * a.n + i0, a.n - i0, R, vd);
  load_mixings<TC>(a);
  zero_padding(t.Js, a.h_k, a.widths.pad, R * a.C);
  zero_padding(t.dUs, a.h_v, a.widths.pad, R * a.C);
  if (!in_registers)
    for (int x = threadIdx.x; x < R * qd; x += blockDim.x) t.dQs[x] = 0.f;
  for (int x = threadIdx.x; x < a.h * R; x += blockDim.x) {
    const int s = x / R, i = i0 + x % R;
    t.lse[x] = i < a.n ? a.lse[(b * a.h + s) * a.n + i] : -thx_inf();
    t.Ds[x] = 0.f;
  }
  __syncthreads();
  for (int j0 = 0; j0 < a.m; j0 += C) {  // pass A: D = sum_j W dW per (softmax head, row)
    load_rows(a.k, t.Ks, b * a.m + j0, a.m - j0, C, qd);
    load_rows(a.v, t.Vs, b * a.m + j0, a.m - j0, C, vd);
    __syncthreads();
    const float* dW = tile_weights_and_grads<TC>(a, t, i0, j0);
    for (int x = threadIdx.x; x < a.h * R; x += blockDim.x) {
      float acc = 0.f;
      for (int c = 0; c < C; ++c) acc += t.Ls[x * C + c] * dW[x * C + c];
      t.Ds[x] += acc;
    }
    __syncthreads();
  }
  // Pass B: every gradient, from key tile `first` on where the shared sums are staggered (KeySums).
  const int tiles = (a.m + C - 1) / C;
  const int first = a.key_sums == KeySums::kInOrder || tiles == 0 ? 0 : int((blockIdx.x + blockIdx.y) % tiles);
  for (int step = 0; step < tiles; ++step) {
    const int j0 = (first + step) % tiles * C;
    load_rows(a.k, t.Ks, b * a.m + j0, a.m - j0, C, qd);
    load_rows(a.v, t.Vs, b * a.m + j0, a.m - j0, C, vd);
    __syncthreads();
    tile_gradients<TC>(a, t, i0, j0);
  }
  T* dq = a.grad_q + (b * a.n + i0) * qd;
  if (in_registers)
    cuda_mma::accumulated_outputs(a.h_k, R, a.d_k, t.dQ_acc, [&](int k, int r, int d, float v) {
      if (i0 + r < a.n) dq[r * qd + k * a.d_k + d] = thx_from_float<T>(v);
    });
  else
    for (int x = threadIdx.x; x < R * qd; x += blockDim.x)
      if (i0 + x / qd < a.n) dq[x] = thx_from_float<T>(t.dQs[x]);
}

// The kernel a launch runs: bf16 products on tensor cores (Args::tensor_cores) are their own
// instantiation (TC), so that neither carries the other's code and registers.
template <typename T, bool Backward>
inline void (*kernel_for(bool tensor_cores))(Args<T>) {
  if constexpr (sizeof(T) == 2)
    if (tensor_cores) return Backward ? backward_kernel<T, true> : forward_kernel<T, true>;
  return Backward ? backward_kernel<T, false> : forward_kernel<T, false>;
}

}  // namespace thx::cuda_th
