// th_rows_tc_kernels.cuh: the talking-heads row kernels for bf16 with the heads' mixings on tensor
// cores (th_rows_args.h says what the row kernels do; th_rows_kernels.cuh is their fp32 form, which
// fp32 problems and `--fma` take). Written once for nvcc, clang's PTX check and the emulator.
//
// Why: a thread of th_rows_kernels.cuh mixes one key's heads as a matrix-vector product in fp32
// FMAs, 2 h^2 flops a key and mixing; at 48 heads that is some 6 TFLOP of FMAs in a T5-base
// step (about 0.15 s on an H100's CUDA cores), at 12 heads a sixteenth of it. Here a warp takes 16
// keys at a time and mixes them as one product [16 keys, heads] x [heads, heads] on tensor cores
// (mma.m16n8k16, bf16 operands, fp32 sums: common/cuda_mma.h), the rounding a bf16 matmul of ATen
// makes of the same operands. What stays fp32: the logits, the softmax and its statistics, D, dL,
// and every sum.
//
// Layout (PTX ISA, "Matrix Fragments for mma.m16n8k16"; lane l, g = l / 4, t = l % 4): warp w of a
// block takes keys jw = j0 + 16 w ... + 15 of each chunk of 16 x warps keys; a product's output
// (C) holds, per 8 heads nt, the keys jw + g and jw + g + 8 at heads 8 nt + 2 t and 8 nt + 2 t + 1,
// so that every lane holds a few heads of two keys, and the C of two neighbouring 8-head tiles is
// exactly the A operand (16 keys x 16 heads) of the next product (the weights W into the P_w
// mixing, dL into the P_l^T one) once rounded to bf16. The planes J and dU are staged in shared
// memory as [head][key], a chunk ahead (cp.async, each_chunk), and read as A operands by
// ldmatrix.trans; the outputs U and dJ leave the same way backwards (stmatrix.trans, then 16 bytes
// a lane); the mixings' matrices sit in shared memory as bf16 copies [out head][in head] (zero past
// the heads), read by ldmatrix.
//
// Forward, per row: pass 1, each lane's running max and sum per head over its keys, merged over
// the 8 lanes that share its heads (shuffles) and over the warps (shared memory) -> LSE; pass 2,
// W = exp(L - LSE) -> U. Backward: pass 1, D = sum over keys of W dW; pass 2, U, dW, dL, dJ, and
// the projections' gradients J dL^T and W dU^T as products over each chunk's keys on tensor cores
// (the chunk's J, dL, W and dU staged in shared memory as [head][key], each warp adding its share
// of the output tiles into the block's fp32 partial sums), at every number of heads.
#pragma once
#include "attention/cuda/th_rows_kernels.cuh"
#include "common/cuda_mma.h"

namespace thx::cuda_th {
namespace rows_tc {

using cuda_mma::pack_bf16x2;
using rows::each_row;
using rows::merge;

// Registers a thread may have follow the fewest blocks a multiprocessor must hold (128 threads:
// 128 registers at 4 blocks, 168 at 3, 255 at 2): the most blocks with which nvcc 13 spilled none.
// (The backward at 32 heads spilled 4 bytes at 3 blocks; at 16 heads 8 bytes at 4, once J and dU
// were staged a chunk ahead.)
constexpr int min_blocks(int H, bool backward) { return backward ? (H <= 16 ? 3 : 2) : (H <= 32 ? 4 : 3); }

// This thread's warp, and its place in the warp's fragments.
struct Lane {
  int w, g, t, l;
};
THX_DEVICE Lane lane_of() {
  const int l = int(threadIdx.x) % 32;
  return {int(threadIdx.x) / 32, l / 4, l % 4, l};
}

// Where the block's shared memory is (th_rows_args.h's rows_tc_layout, one place for host and device).
struct Shared {
  thx_bf16 *pl_t, *pl, *pw_t, *pw;      // the mixings' matrices as products' B: [out][in], stride H + 8
  float *slot0, *slot1, *lse, *d;        // per-warp statistics [warps][H]; the row's LSE and D [H]
  thx_bf16 *sj, *sdl, *sw, *sdu;         // the chunk's staged J, (backward) dL, W, dU [H][16 warps + 8];
                                         // J and dU two buffers each (each_chunk)
  thx_bf16* su;                          // the keys' U (and backward dJ) on their way out, as sj
  float* acc;                            // backward: the block's partial sums, [tile][lane][4]
};
template <int H>
THX_DEVICE Shared shared_layout(const RowsArgs<thx_bf16>& a, bool backward) {
  THX_SHARED(shared_bytes);
  const RowsTcLayout at = rows_tc_layout(H, int(blockDim.x) / 32, a.P_l, a.P_w, backward, a.dP);
  auto bf = [&](int64_t x) { return reinterpret_cast<thx_bf16*>(shared_bytes + x); };
  auto f = [&](int64_t x) { return reinterpret_cast<float*>(shared_bytes + x); };
  return {bf(at.pl_t), bf(at.pl),  bf(at.pw_t), bf(at.pw),  f(at.slot0), f(at.slot1), f(at.lse),
          f(at.d),     bf(at.sj),  bf(at.sdl),  bf(at.sw),  bf(at.sdu),  bf(at.su),   f(at.acc)};
}

// The mixings' bf16 copies, each [out][in] (an mma B operand whose k, the input head, is
// contiguous): forward P_l^T (J -> L) and P_w^T (W -> U); backward also P_l (dL -> dJ) and P_w
// (dU -> dW). Zero past the heads; then a barrier.
template <int H>
THX_DEVICE void load_mixings(const RowsArgs<thx_bf16>& a, const Shared& s, bool backward) {
  constexpr int S = H + 8;
  for (int e = threadIdx.x; e < H * H; e += blockDim.x) {
    const int r = e / H, c = e % H;  // row (output head), column (input head)
    auto put = [&](thx_bf16* M, float v) { M[r * S + c] = thx_from_float<thx_bf16>(v); };
    if (a.P_l) {
      put(s.pl_t, c < a.h_k && r < a.h ? a.P_l[c * a.h + r] : 0.f);
      if (backward) put(s.pl, r < a.h_k && c < a.h ? a.P_l[r * a.h + c] : 0.f);
    }
    if (a.P_w) {
      put(s.pw_t, c < a.h && r < a.h_v ? a.P_w[c * a.h_v + r] : 0.f);
      if (backward) put(s.pw, r < a.h && c < a.h_v ? a.P_w[r * a.h_v + c] : 0.f);
    }
  }
  __syncthreads();
}

// One query row of a [b, heads, rows, m] plane: element (head, key) at p[head * hs + key]. The
// offsets within an example are 32-bit (fewer registers than 64-bit ones, which spilled), which
// the caller ensures they fit (rows_tc_offsets_fit).
template <typename T>
struct Row {
  T* p;
  int hs;
};
template <typename T, typename U>
THX_DEVICE Row<T> row_of(T* plane, int heads, const RowsArgs<U>& a, int bb, int i) {
  const int hs = a.rows * a.m;
  return {plane + int64_t(bb) * heads * hs + int64_t(i) * a.m, hs};
}

// The bits of X's element (head, key); 0 past `heads` or m.
THX_DEVICE uint32_t bits(const Row<const thx_bf16>& X, int heads, int m, int head, int key) {
  return head < heads && key < m ? uint32_t(X.p[head * X.hs + key].bits) : 0u;
}

// Where in the staged rows [H][ld] (below) lane l of warp w copies its 8 keys of heads block p
// (copy_ahead, stage_keys, unstage_plane): head 16 p + l % 16, keys 8 (l / 16) on of the warp's
// 16 columns.
THX_DEVICE int staged_vector_at(int l, int w, int p, int ld) { return (16 * p + l % 16) * ld + 16 * w + 8 * (l / 16); }
// The row lane l of warp w gives ldmatrix and stmatrix for heads block kb: matrix j = l / 8, row r
// = l % 8 is head 16 kb + 8 (j / 2) + r, keys 8 (j % 2) on (staged_a, stage_a).
THX_DEVICE int staged_matrix_row_at(int l, int w, int kb, int ld) {
  const int r = l % 8, j = l / 8;
  return (16 * kb + 8 * (j / 2) + r) * ld + 16 * w + 8 * (j % 2);
}

// f(head, key, at) for each of this lane's pieces of the warp's 16 staged columns (below): head 16 p
// + l % 16, keys key .. key + 7 (key = jw + 8 (l / 16)), at staged_vector_at. A warp barrier first.
template <int H, typename F>
THX_DEVICE void each_staged_piece(int jw, const Lane& L, F&& f) {
  const int ld = int(blockDim.x) / 2 + 8, key = jw + 8 * (L.l / 16);
  thx_syncwarp();
#pragma unroll
  for (int p = 0; p < H / 16; ++p) f(16 * p + L.l % 16, key, staged_vector_at(L.l, L.w, p, ld));
}

// The staged rows [H][ld] (bf16, ld = 16 warps + 8: each warp its 16 columns, and rows 16 bytes
// off the banks' period so that ldmatrix's eight rows fall in different banks) <- X's keys jw..
// jw + 15 of every head < H, in this warp's columns: lane l takes 8 keys (8 (l / 16) on) of head
// l % 16 (+ 16 p), zero past `heads` and m. (Each quarter of the warp then takes 8 heads' rows,
// 36 words apart: every bank once.) copy_ahead: 16 bytes at once by cp.async, landing by the wait
// of each_chunk (where every 8 keys start 16 bytes aligned); stage_keys: key by key, now, with
// warp barriers around it (the warp's earlier reads of its columns are done, its writes seen).
template <int H>
THX_DEVICE void copy_ahead(const Row<const thx_bf16>& X, int heads, int m, int jw, const Lane& L, thx_bf16* S) {
  each_staged_piece<H>(jw, L, [&](int head, int key, int at) {
    if (head < heads && key < m) thx_cp_async16(S + at, X.p + head * X.hs + key);
    else thx_zero16(S + at);
  });
}
template <int H>
THX_DEVICE void stage_keys(const Row<const thx_bf16>& X, int heads, int m, int jw, const Lane& L, thx_bf16* S) {
  each_staged_piece<H>(jw, L, [&](int head, int key, int at) {
#pragma unroll 1  // (unrolled, the loads' addresses took registers the products need)
    for (int e = 0; e < 8; ++e) S[at + e].bits = uint16_t(bits(X, heads, m, head, key + e));
  });
  thx_syncwarp();
}
// The A operands (rows: the warp's 16 keys; columns: heads, KT blocks of 16) from the staged rows
// [head][key], by ldmatrix.x4.trans: matrix j of lane 8 j + r is heads 16 kb + 8 (j / 2) + r, keys
// 8 (j % 2) on (a0: keys 0-7 by heads 0-7, a1: keys 8-15, a2: heads 8-15, a3: both).
template <int H>
THX_DEVICE void staged_a(const thx_bf16* S, const Lane& L, uint32_t (&a)[H / 16][4]) {
  const int ld = int(blockDim.x) / 2 + 8;
#pragma unroll
  for (int kb = 0; kb < H / 16; ++kb) thx_ldmatrix<4, true>(a[kb], S + staged_matrix_row_at(L.l, L.w, kb, ld));
}

// The inverse: the staged rows [head][key] (this warp's columns) <- A operands (a product's output
// packed by pack_a: keys by heads), by stmatrix.x4.trans to the rows staged_a reads. A warp barrier
// first: the warp's earlier reads of its columns are done.
template <int H>
THX_DEVICE void stage_a(thx_bf16* S, const Lane& L, const uint32_t (&a)[H / 16][4]) {
  const int ld = int(blockDim.x) / 2 + 8;
  thx_syncwarp();
#pragma unroll
  for (int kb = 0; kb < H / 16; ++kb) thx_stmatrix4<true>(S + staged_matrix_row_at(L.l, L.w, kb, ld), a[kb]);
}
// X's keys jw.. jw + 15 of every head < `heads` (below m) <- this warp's staged columns (stage_a's),
// as copy_ahead reads them: lane l 8 keys of head l % 16 (+ 16 p), 16 bytes at once where whole
// and aligned (vec), else key by key. A warp barrier first: the staged rows are seen.
template <int H>
THX_DEVICE void unstage_plane(const thx_bf16* S, const Row<thx_bf16>& X, int heads, int m, int jw, const Lane& L,
                              bool vec) {
  each_staged_piece<H>(jw, L, [&](int head, int key, int at) {
    if (head >= heads || key >= m) return;
    thx_bf16* to = X.p + head * X.hs + key;
    if (vec && key + 8 <= m) {
      thx_copy16(to, S + at);
    } else {
#pragma unroll 1
      for (int e = 0; e < 8 && key + e < m; ++e) to[e] = S[at + e];
    }
  });
}
// A product's output, packed as A operands (pack_a: rounded to bf16), into X's row (this warp's
// keys jw..) through the staged rows S: by stmatrix, then 16 bytes a lane (stage_a, unstage_plane).
template <int H>
THX_DEVICE void store_a(thx_bf16* S, const Row<thx_bf16>& X, int heads, int m, int jw, const Lane& L, bool vec,
                        const uint32_t (&a)[H / 16][4]) {
  stage_a<H>(S, L, a);
  unstage_plane<H>(S, X, heads, m, jw, L, vec);
}

// C element (nt, x) of this lane: head 8 nt + 2 t + x % 2, key jw + g + 8 (x / 2).
THX_DEVICE int head_at(const Lane& L, int nt, int x) { return 8 * nt + 2 * L.t + (x & 1); }
THX_DEVICE int key_at(const Lane& L, int jw, int x) { return jw + L.g + 8 * (x >> 1); }

// c <- X's keys jw.. as a product's output would hold them (fp32), 0 past `heads` and m.
template <int NT>
THX_DEVICE void load_c(const Row<const thx_bf16>& X, int heads, int m, int jw, const Lane& L, float (&c)[NT][4]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int x = 0; x < 4; ++x)
      c[nt][x] = thx_bits_to_float(bits(X, heads, m, head_at(L, nt, x), key_at(L, jw, x)) << 16);
}
// X's keys jw.. <- c, in T, where head < heads and key < m.
template <typename T, int NT>
THX_DEVICE void store_c(const Row<T>& X, int heads, int m, int jw, const Lane& L, const float (&c)[NT][4]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const int head = head_at(L, nt, x), key = key_at(L, jw, x);
      if (head < heads && key < m) X.p[head * X.hs + key] = thx_from_float<T>(c[nt][x]);
    }
}

// c <- a [16 keys, H] x M [H, H]: M a bf16 copy [out][in] in shared memory (stride H + 8), its
// B fragments for two 8-head output tiles by one ldmatrix.x4: matrix j of lane 8 j + r is rows
// (out heads) 16 np + 8 (j / 2) + r, columns (in heads) 16 kb + 8 (j % 2).
template <int H>
THX_DEVICE void mix(const uint32_t (&a)[H / 16][4], const thx_bf16* M, const Lane& L, float (&c)[H / 8][4]) {
#pragma unroll
  for (int nt = 0; nt < H / 8; ++nt) c[nt][0] = c[nt][1] = c[nt][2] = c[nt][3] = 0.f;
  const int r = L.l % 8, j = L.l / 8;
#pragma unroll
  for (int kb = 0; kb < H / 16; ++kb)
#pragma unroll
    for (int np = 0; np < H / 16; ++np) {
      uint32_t b[4];
      thx_ldmatrix<4, false>(b, M + (16 * np + 8 * (j / 2) + r) * (H + 8) + 16 * kb + 8 * (j % 2));
      thx_mma_bf16_16816(c[2 * np], a[kb], b);
      thx_mma_bf16_16816(c[2 * np + 1], a[kb], b + 2);
    }
}

// A product's output (fp32, two neighbouring 8-head tiles a block of 16) as the A operand of the
// next one, rounded to bf16.
template <int H>
THX_DEVICE void pack_a(const float (&c)[H / 8][4], uint32_t (&a)[H / 16][4]) {
#pragma unroll
  for (int kb = 0; kb < H / 16; ++kb) {
    a[kb][0] = pack_bf16x2(c[2 * kb][0], c[2 * kb][1]), a[kb][1] = pack_bf16x2(c[2 * kb][2], c[2 * kb][3]);
    a[kb][2] = pack_bf16x2(c[2 * kb + 1][0], c[2 * kb + 1][1]);
    a[kb][3] = pack_bf16x2(c[2 * kb + 1][2], c[2 * kb + 1][3]);
  }
}

// Whether every 8 keys of J, dU, U and dJ start 16 bytes aligned (copy_ahead's and
// unstage_plane's vector copies).
THX_DEVICE bool aligned_planes(const RowsArgs<thx_bf16>& a) {
  const uintptr_t any = reinterpret_cast<uintptr_t>(a.J) | reinterpret_cast<uintptr_t>(a.dU) |
                        reinterpret_cast<uintptr_t>(a.U) | reinterpret_cast<uintptr_t>(a.dJ);
  return a.m % 8 == 0 && any % 16 == 0;
}

// A chunk's staged J and dU in this warp's columns: which of their two buffers its keys are in
// (off: 0 or a buffer's elements), staged ahead by each_chunk (vec), or else by their reader, key
// by key. (An offset rather than two pointers: four registers fewer, which the backward at bucket
// 16 needs to stay within 128 without spilling.)
struct Staged {
  int off;
  bool vec;
  THX_DEVICE thx_bf16* j(const Shared& s) const { return s.sj + off; }
  THX_DEVICE thx_bf16* du(const Shared& s) const { return s.sdu + off; }
};

// The keys jw.. of J (with P_l) and, du, of dU (with P_w) into the staged rows `to` by cp.async,
// committed as one group; zeros past m, also where jw itself is (a warp past m in the backward's
// last chunk still takes part in its products, whose operands must be finite).
template <int H>
THX_DEVICE void prefetch(const RowsArgs<thx_bf16>& a, const Shared& s, int bb, int i, int jw, const Lane& L, bool du,
                         const Staged& to) {
  if (a.P_l) copy_ahead<H>(row_of(a.J, a.h_k, a, bb, i), a.h_k, a.m, jw, L, to.j(s));
  if (du && a.P_w) copy_ahead<H>(row_of(a.dU, a.h_v, a, bb, i), a.h_v, a.m, jw, L, to.du(s));
  thx_cp_async_commit();
}

// body(jw, staged) for this warp's keys jw = j0 + 16 w of each chunk j0 = 0, 16 warps, ... < m (jw
// itself may be past m in the last chunk), their J and, du, dU staged in one of two buffers each:
// with vec the next chunk's copies are in flight (cp.async) while body reads this one's, so that
// their latency hides behind its products; else body stages them as it reads them.
template <int H, typename F>
THX_DEVICE void each_chunk(const RowsArgs<thx_bf16>& a, const Shared& s, int bb, int i, const Lane& L, bool vec,
                           bool du, F&& body) {
  const int step = int(blockDim.x) / 2, stage = H * (step + 8);
  if (vec) prefetch<H>(a, s, bb, i, 16 * L.w, L, du, Staged{0, vec});
  for (int j0 = 0, off = 0; j0 < a.m; j0 += step, off = stage - off) {
    const int jw = j0 + 16 * L.w;
    const Staged now{off, vec}, ahead{stage - off, vec};
    if (vec) {
      if (j0 + step < a.m) prefetch<H>(a, s, bb, i, jw + step, L, du, ahead);
      else thx_cp_async_commit();  // (no next chunk: an empty group, so that the wait counts alike)
      thx_cp_async_wait<1>();      // this chunk's group has landed
      thx_syncwarp();              // and every lane's copies are seen
    }
    body(jw, now);
  }
}

// c <- the logits of keys jw.. (J mixed by P_l, plus the bias), -inf where masked and past m; past
// h 0 (P_l's copy and load_c give 0 there), which the LSE of +inf past h (fold_warps) makes a
// weight of 0: where the keys are whole and there is no bias or mask, no test an element, and no
// bias or mask read past h (a quarter of T5-base's 12 heads' bucket of 16). With P_l, J is staged
// in st.j(s) (the backward's left rows of J dL^T).
template <int H>
THX_DEVICE void logits(const RowsArgs<thx_bf16>& a, const Shared& s, int bb, int i, int jw, const Lane& L,
                       const Staged& st, float (&c)[H / 8][4]) {
  const Row<const thx_bf16> J = row_of(a.J, a.h_k, a, bb, i);
  if (a.P_l) {
    uint32_t aj[H / 16][4];
    if (!st.vec) stage_keys<H>(J, a.h_k, a.m, jw, L, st.j(s));
    staged_a<H>(st.j(s), L, aj);
    mix<H>(aj, s.pl_t, L, c);
  } else {
    load_c<H / 8>(J, a.h, a.m, jw, L, c);
  }
  if (!a.bias && !a.mask && jw + 16 <= a.m) return;
  // (the row's bias and mask: 64-bit offsets to them, 32-bit within, as Row's)
  const float* bias = a.bias ? a.bias + bb * a.bias_stride[0] + i * a.bias_stride[2] : nullptr;
  const uint8_t* mask = a.mask ? a.mask + bb * a.mask_stride[0] + i * a.mask_stride[2] : nullptr;
  const int bh = int(a.bias_stride[1]), bk = int(a.bias_stride[3]);
  const int mh = int(a.mask_stride[1]), mk = int(a.mask_stride[3]);
#pragma unroll
  for (int nt = 0; nt < H / 8; ++nt)
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const int head = head_at(L, nt, x), key = key_at(L, jw, x);
      if (head >= a.h) continue;  // (0, as above: no bias or mask read for it)
      if (key >= a.m) {
        c[nt][x] = -thx_inf();
        continue;
      }
      if (bias) c[nt][x] += bias[head * bh + key * bk];
      if (mask && !mask[head * mh + key * mk]) c[nt][x] = -thx_inf();
    }
}

// This lane's two heads 8 nt + 2 t, + 1 of a row's values per head (shared, 8-byte aligned): one load.
THX_DEVICE ThxBytes8 head_pair(const float* v, const Lane& L, int nt) { return thx_load8(v + 8 * nt + 2 * L.t); }

// c (logits) <- the weights exp(L - LSE): 0 where the logit is -inf (masked, past h or m), which
// every logit of a row with no key is (its LSE -inf: exp(-inf + inf) would be NaN). The fast exp:
// the weights are rounded to bf16 as operands after.
template <int H>
THX_DEVICE void weights(const float* lse, const Lane& L, float (&c)[H / 8][4]) {
#pragma unroll
  for (int nt = 0; nt < H / 8; ++nt) {
    const ThxBytes8 m = head_pair(lse, L, nt);
#pragma unroll
    for (int x = 0; x < 4; ++x)
      c[nt][x] = c[nt][x] == -thx_inf() ? 0.f : thx_exp_fast(c[nt][x] - thx_bits_to_float(m.w[x & 1]));
  }
}

// The keys' U = W mixed by P_w (or W itself), stored; aw: W packed (pack_a).
template <int H>
THX_DEVICE void store_u(const RowsArgs<thx_bf16>& a, const Shared& s, int bb, int i, int jw, const Lane& L,
                        bool vec, const uint32_t (&aw)[H / 16][4]) {
  const Row<thx_bf16> U = row_of(a.U, a.h_v, a, bb, i);
  if (!a.P_w) return store_a<H>(s.su, U, a.h, a.m, jw, L, vec, aw);
  float u[H / 8][4];
  uint32_t au[H / 16][4];
  mix<H>(aw, s.pw_t, L, u);
  pack_a<H>(u, au);
  store_a<H>(s.su, U, a.h_v, a.m, jw, L, vec, au);
}

// e <- the keys' dW = dU mixed by P_w^T (or dU itself). With P_w, dU is staged in st.du(s) (the right
// rows of W dU^T).
template <int H>
THX_DEVICE void weight_grads(const RowsArgs<thx_bf16>& a, const Shared& s, int bb, int i, int jw, const Lane& L,
                             const Staged& st, float (&e)[H / 8][4]) {
  const Row<const thx_bf16> dU = row_of(a.dU, a.h_v, a, bb, i);
  if (!a.P_w) return load_c<H / 8>(dU, a.h, a.m, jw, L, e);
  uint32_t adu[H / 16][4];
  if (!st.vec) stage_keys<H>(dU, a.h_v, a.m, jw, L, st.du(s));
  staged_a<H>(st.du(s), L, adu);
  mix<H>(adu, s.pw, L, e);
}

// Per head of this lane (8 nt + 2 t + e), folded over the 8 lanes that hold the same heads (g =
// lane / 4: shuffles across 4, 8, 16), written by lanes 0-3 into their warp's slots; then a
// barrier. Statistics (max, sum) merged, or (sum_only) sums added: both symmetric, so the lanes
// agree bit for bit.
template <int H>
THX_DEVICE void fold_lanes(const Lane& L, const Shared& s, float (&m)[H / 8][2], float (&t)[H / 8][2],
                           bool sum_only) {
#pragma unroll
  for (int nt = 0; nt < H / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      for (int mask = 4; mask < 32; mask *= 2) {
        const float m2 = thx_shfl_xor(m[nt][e], mask), t2 = sum_only ? 0.f : thx_shfl_xor(t[nt][e], mask);
        if (sum_only) m[nt][e] += m2;
        else merge(m[nt][e], t[nt][e], m2, t2);
      }
      if (L.g == 0) {
        s.slot0[L.w * H + 8 * nt + 2 * L.t + e] = m[nt][e];
        if (!sum_only) s.slot1[L.w * H + 8 * nt + 2 * L.t + e] = t[nt][e];
      }
    }
  __syncthreads();
}
// Then over the warps, in order: lse[o] (or, sum_only, d[o]) for every head o < H (-inf or 0
// past h), the LSE also stored; a barrier.
template <int H>
THX_DEVICE void fold_warps(const RowsArgs<thx_bf16>& a, const Shared& s, int bb, int i, bool sum_only) {
  const int warps = int(blockDim.x) / 32;
  for (int o = threadIdx.x; o < H; o += blockDim.x) {
    float m = s.slot0[o], t = sum_only ? 0.f : s.slot1[o];
    for (int w = 1; w < warps; ++w) {
      if (sum_only) m += s.slot0[w * H + o];
      else merge(m, t, s.slot0[w * H + o], s.slot1[w * H + o]);
    }
    if (sum_only) {
      s.d[o] = o < a.h ? m : 0.f;
    } else {  // (+inf past h: logits there are 0 or -inf, and either's weight is 0; logits)
      const float lse = o >= a.h ? thx_inf() : m == -thx_inf() ? -thx_inf() : m + thx_log(t);
      s.lse[o] = lse;
      if (o < a.h) a.lse[(int64_t(bb) * a.h + o) * a.lse_n + a.lse_row0 + i] = lse;
    }
  }
  __syncthreads();
}

// Forward pass 1 over one row: each lane's running max and sum per head over its keys -> the row's
// LSE (shared, and stored).
template <int H>
THX_DEVICE void row_statistics(const RowsArgs<thx_bf16>& a, const Shared& s, int bb, int i, const Lane& L, bool vec) {
  float mx[H / 8][2], sm[H / 8][2];
#pragma unroll
  for (int nt = 0; nt < H / 8; ++nt) mx[nt][0] = mx[nt][1] = -thx_inf(), sm[nt][0] = sm[nt][1] = 0.f;
  each_chunk<H>(a, s, bb, i, L, vec, false, [&](int jw, const Staged& st) {
    if (jw >= a.m) return;
    float c[H / 8][4];
    logits<H>(a, s, bb, i, jw, L, st, c);
#pragma unroll
    for (int nt = 0; nt < H / 8; ++nt)
#pragma unroll
      for (int x = 0; x < 4; ++x) rows::add_logit<true>(mx[nt][x & 1], sm[nt][x & 1], c[nt][x]);
  });
  fold_lanes<H>(L, s, mx, sm, false);
  fold_warps<H>(a, s, bb, i, false);
}

template <int H>
__global__ void THX_LAUNCH_BOUNDS(rows::kMaxThreads, min_blocks(H, false))
    rows_tc_forward_kernel(RowsArgs<thx_bf16> a) {
  const Shared s = shared_layout<H>(a, false);
  load_mixings<H>(a, s, false);
  const Lane L = lane_of();
  const int bb = blockIdx.x;
  const bool vec = aligned_planes(a);
  each_row(a, [&](int i) {
    row_statistics<H>(a, s, bb, i, L, vec);
    each_chunk<H>(a, s, bb, i, L, vec, false, [&](int jw, const Staged& st) {
      if (jw >= a.m) return;
      float c[H / 8][4];
      uint32_t aw[H / 16][4];
      logits<H>(a, s, bb, i, jw, L, st, c);
      weights<H>(s.lse, L, c);
      pack_a<H>(c, aw);
      store_u<H>(a, s, bb, i, jw, L, vec, aw);
    });
  });
}

// Backward pass 1 over one row: D = sum over keys of W dW per head (shared).
template <int H>
THX_DEVICE void row_d(const RowsArgs<thx_bf16>& a, const Shared& s, int bb, int i, const Lane& L, bool vec) {
  float d[H / 8][2], unused[H / 8][2];
#pragma unroll
  for (int nt = 0; nt < H / 8; ++nt) d[nt][0] = d[nt][1] = unused[nt][0] = unused[nt][1] = 0.f;
  each_chunk<H>(a, s, bb, i, L, vec, true, [&](int jw, const Staged& st) {
    if (jw >= a.m) return;
    float c[H / 8][4], e[H / 8][4];
    logits<H>(a, s, bb, i, jw, L, st, c);
    weights<H>(s.lse, L, c);
    weight_grads<H>(a, s, bb, i, jw, L, st, e);
#pragma unroll
    for (int nt = 0; nt < H / 8; ++nt)
#pragma unroll
      for (int x = 0; x < 4; ++x) d[nt][x & 1] += c[nt][x] * e[nt][x];
  });
  fold_lanes<H>(L, s, d, unused, true);
  fold_warps<H>(a, s, bb, i, true);
}

// Backward pass 2 for keys jw..: U stored, dW, dL = W (dW - D), dL stored in fp32 where asked (for
// the bias), dJ stored; with a.dP the keys' W and dL staged beside J and dU for the projections'
// gradients. (W in fp32 is never asked of these kernels: they sum the projections' gradients
// themselves. In this order, each operand staged as soon as it is made, so that few are live.)
template <int H>
THX_DEVICE void key_grads(const RowsArgs<thx_bf16>& a, const Shared& s, int bb, int i, int jw, const Lane& L,
                          const Staged& st) {
  float c[H / 8][4], e[H / 8][4];
  uint32_t ap[H / 16][4];  // W, then dL, then dJ, as A operands (rounded to bf16)
  logits<H>(a, s, bb, i, jw, L, st, c);
  weights<H>(s.lse, L, c);
  pack_a<H>(c, ap);
  if (a.dP && a.P_w) stage_a<H>(s.sw, L, ap);
  store_u<H>(a, s, bb, i, jw, L, st.vec, ap);
  weight_grads<H>(a, s, bb, i, jw, L, st, e);
#pragma unroll
  for (int nt = 0; nt < H / 8; ++nt) {
    const ThxBytes8 d = head_pair(s.d, L, nt);
#pragma unroll
    for (int x = 0; x < 4; ++x) e[nt][x] = c[nt][x] * (e[nt][x] - thx_bits_to_float(d.w[x & 1]));  // dL
  }
  if (a.dL) store_c<float, H / 8>(row_of(a.dL, a.h, a, bb, i), a.h, a.m, jw, L, e);
  pack_a<H>(e, ap);
  if (a.dP && a.P_l) stage_a<H>(s.sdl, L, ap);
  const Row<thx_bf16> dJ = row_of(a.dJ, a.h_k, a, bb, i);
  if (!a.P_l) return store_a<H>(s.su, dJ, a.h, a.m, jw, L, st.vec, ap);
  mix<H>(ap, s.pl, L, c);
  pack_a<H>(c, ap);
  store_a<H>(s.su, dJ, a.h_k, a.m, jw, L, st.vec, ap);
}

// The staged chunk's J dL^T [h_k][h] and W dU^T [h][h_v] added into the block's partial sums
// (16 x 8 tiles [tile][lane][4] in shared memory; warp w takes tiles w, w + warps, ...), each a
// product over the chunk's keys on tensor cores: A = the left rows [16 heads][keys] (ldmatrix,
// matrix j of lane 8 j + r: row 8 (j % 2) + r, keys 8 (j / 2)), B = the right rows [8 heads][keys].
// (J and dU: the chunk's buffers, st.)
template <int H>
THX_DEVICE void add_projection_grads(const RowsArgs<thx_bf16>& a, const Shared& s, const Staged& st, const Lane& L) {
  constexpr int NT = H / 8, T = H / 16 * NT;
  const int warps = int(blockDim.x) / 32, ld = 16 * warps + 8, tiles = (a.P_l ? T : 0) + (a.P_w ? T : 0);
  const int r = L.l % 8, j = L.l / 8;
  for (int x = L.w; x < tiles; x += warps) {
    const bool left = a.P_l && x < T;
    const int y = left || !a.P_l ? x : x - T, mt = y / NT, nt = y % NT;
    const thx_bf16 *A = left ? st.j(s) : s.sw, *B = left ? s.sdl : st.du(s);
    float* acc = s.acc + (x * 32 + L.l) * 4;
    float c[4] = {acc[0], acc[1], acc[2], acc[3]};
    for (int ks = 0; ks < warps; ++ks) {
      uint32_t af[4], bf[2];
      thx_ldmatrix<4, false>(af, A + (16 * mt + 8 * (j % 2) + r) * ld + 16 * ks + 8 * (j / 2));
      thx_ldmatrix<2, false>(bf, B + (8 * nt + r) * ld + 16 * ks + 8 * (j % 2));
      thx_mma_bf16_16816(c, af, bf);
    }
    acc[0] = c[0], acc[1] = c[1], acc[2] = c[2], acc[3] = c[3];
  }
}
// The block's partial sums into its row of a.dP: J dL^T [h_k][h], then W dU^T [h][h_v].
template <int H>
THX_DEVICE void store_projection_grads(const RowsArgs<thx_bf16>& a, const Shared& s, const Lane& L) {
  constexpr int NT = H / 8, T = H / 16 * NT;
  const int warps = int(blockDim.x) / 32, tiles = (a.P_l ? T : 0) + (a.P_w ? T : 0);
  const int64_t sums = rows_partial_sums(a.h_k, a.h, a.h_v, a.P_l, a.P_w), nl = a.P_l ? int64_t(a.h_k) * a.h : 0;
  float* out = a.dP + (int64_t(blockIdx.y) * gridDim.x + blockIdx.x) * sums;
  for (int x = L.w; x < tiles; x += warps) {
    const bool left = a.P_l && x < T;
    const int y = left || !a.P_l ? x : x - T, mt = y / NT, nt = y % NT;
    const int rows = left ? a.h_k : a.h, cols = left ? a.h : a.h_v;
    for (int e = 0; e < 4; ++e) {
      const int row = 16 * mt + L.g + 8 * (e >> 1), col = head_at(L, nt, e);
      if (row < rows && col < cols) out[(left ? 0 : nl) + row * cols + col] = s.acc[(x * 32 + L.l) * 4 + e];
    }
  }
}

template <int H>
__global__ void THX_LAUNCH_BOUNDS(rows::kMaxThreads, min_blocks(H, true))
    rows_tc_backward_kernel(RowsArgs<thx_bf16> a) {
  const Shared s = shared_layout<H>(a, true);
  const Lane L = lane_of();
  const int bb = blockIdx.x;
  const bool vec = aligned_planes(a);
  if (a.dP) {
    const int tiles = ((a.P_l ? 1 : 0) + (a.P_w ? 1 : 0)) * (H / 16) * (H / 8);
    for (int e = threadIdx.x; e < tiles * 128; e += blockDim.x) s.acc[e] = 0.f;
  }
  load_mixings<H>(a, s, true);
  each_row(a, [&](int i) {
    for (int o = threadIdx.x; o < H; o += blockDim.x)
      s.lse[o] = o < a.h ? a.lse[(int64_t(bb) * a.h + o) * a.lse_n + a.lse_row0 + i] : thx_inf();  // (fold_warps)
    __syncthreads();
    row_d<H>(a, s, bb, i, L, vec);
    each_chunk<H>(a, s, bb, i, L, vec, true, [&](int jw, const Staged& st) {  // every warp each chunk
      key_grads<H>(a, s, bb, i, jw, L, st);
      if (a.dP) {
        __syncthreads();
        add_projection_grads<H>(a, s, st, L);
        __syncthreads();  // before the next chunk's copies go where this one's were read
      }
    });
    __syncthreads();  // the next row's LSE and D overwrite this one's
  });
  if (a.dP) store_projection_grads<H>(a, s, L);
}

}  // namespace rows_tc

// The tensor-core kernel for heads bucket H (16, 32 or 48: kRowTcHeadsMax), forward or backward.
template <bool Backward>
auto rows_tc_kernel_for(int H) {
  using K = void (*)(RowsArgs<thx_bf16>);
  switch (H) {
    case 16: return Backward ? K(rows_tc::rows_tc_backward_kernel<16>) : K(rows_tc::rows_tc_forward_kernel<16>);
    case 32: return Backward ? K(rows_tc::rows_tc_backward_kernel<32>) : K(rows_tc::rows_tc_forward_kernel<32>);
    default: return Backward ? K(rows_tc::rows_tc_backward_kernel<48>) : K(rows_tc::rows_tc_forward_kernel<48>);
  }
}

}  // namespace thx::cuda_th
