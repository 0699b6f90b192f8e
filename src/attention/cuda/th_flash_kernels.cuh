// th_flash_kernels.cuh: the talking-heads forward as one flash-style kernel on tensor cores
// (th_flash_args.h says what it computes and keeps). Written once for nvcc, clang's PTX check and
// the emulator (common/cuda_compat.h), from the row kernels' fragments (th_rows_tc_kernels.cuh).
//
// How the layouts meet (PTX ISA, "Matrix Fragments for mma.m16n8k16"; lane l, g = l / 4, t = l % 4):
//  - J^T = K Q^T per head, [16 keys, 16 rows], A = the warp's keys of K (staged in shared memory
//    a head ahead by cp.async: copy_keys), B = Q^T from shared memory. Both read 4 consecutive d a
//    lane (8 bytes: k slots 2t, 2t + 1, 2t + 8, 2t + 9 hold d 4t .. 4t + 3), which permutes k alike
//    in both and so changes no sum but its order. Its output pairs neighbouring rows: stored as words into the stage [head][key][row].
//  - For each of its 16 keys, a warp mixes the key's 16 rows: A = J [16 rows, heads] by
//    ldmatrix.trans from the stage, times P_l (rows_tc::mix) -> L [16 rows, H] as a product's output:
//    rows g, g + 8, heads 8 nt + 2 t (+1). Each (row, head) stays in one lane for every key, so the
//    softmax's running statistics need no shuffle: only a fold over the warps at the end of pass 1.
//  - U^T = P_w^T W^T: W in that output layout is exactly this product's B operand (k = heads,
//    n = rows), so it goes from registers; U^T's output pairs neighbouring rows again and is stored
//    as words into the stage, over the key's J (read).
//  - O += U V per head: A = U [16 rows, 16 keys] by ldmatrix.trans from each warp's stage, B = V^T
//    rows read as words from global memory (the host's transposed copy; in the 48-head bucket
//    staged in shared memory two heads a warp ahead by cp.async: copy_values). Warp w keeps heads
//    w, w + 4, ... of O in registers over every tile.
#pragma once
#include "attention/cuda/th_flash_args.h"
#include "attention/cuda/th_rows_tc_kernels.cuh"

namespace thx::cuda_th {
namespace flash {

using cuda_mma::pack_bf16x2;
using rows_tc::head_at;
using rows_tc::Lane;
using rows_tc::lane_of;

struct Shared {
  thx_bf16 *q, *pl_t, *pw_t, *stage;
  float *lse, *slot0, *slot1;  // slots: the warps' statistics at the end of pass 1, over the stages
  int qs;
};
template <int H>
THX_DEVICE Shared shared_layout(const FlashArgs<thx_bf16>& a) {
  THX_SHARED(shared_bytes);
  const FlashLayout at = flash_layout(H, a.h_k, a.d_k);
  auto bf = [&](int64_t x) { return reinterpret_cast<thx_bf16*>(shared_bytes + x); };
  float* slots = reinterpret_cast<float*>(shared_bytes + at.stage);
  return {bf(at.q), bf(at.pl_t), bf(at.pw_t), bf(at.stage), reinterpret_cast<float*>(shared_bytes + at.lse),
          slots, slots + kFlashWarps * kFlashRows * H, at.q_stride};
}

// Every warp's stage zero (the heads past h_k that the mixing reads must be finite); a barrier.
template <int H>
THX_DEVICE void zero_stages(const Shared& s) {
  for (int e = threadIdx.x; e < kFlashWarps * H * kFlashStageHead / 8; e += blockDim.x) thx_zero16(s.stage + 8 * e);
  __syncthreads();
}

// 16 rows r0 .. of X (an example's [rows][width], bf16) into shared memory with rows of ts
// elements (flash_row_at), zero past n, 16 bytes at a time.
THX_DEVICE void copy_rows(thx_bf16* to, int ts, const thx_bf16* X, int width, int r0, int n) {
  const int vecs = width / 8;
  for (int e = threadIdx.x; e < kFlashRows * vecs; e += blockDim.x) {
    const int r = e / vecs, c = 8 * (e % vecs);
    if (r0 + r < n) thx_copy16(to + flash_row_at(r, c, ts), X + int64_t(r0 + r) * width + c);
    else thx_zero16(to + flash_row_at(r, c, ts));
  }
}

// Element (r, c) of a mixing P [rows][cols] (fp32), or of the identity where P is absent (then
// rows == cols); 0 past its rows and columns.
THX_DEVICE float mixing(const float* P, int rows, int cols, int r, int c) {
  if (r >= rows || c >= cols) return 0.f;
  return P ? P[r * cols + c] : r == c ? 1.f : 0.f;
}

// The block's 16 rows of Q (zero past n), and the mixings' matrices as bf16 [out][in]: P_l^T and
// P_w^T, or the identity where absent; zero past the heads. Then the stages zeroed.
template <int H>
THX_DEVICE void load_block(const FlashArgs<thx_bf16>& a, const Shared& s, int bb, int i0) {
  const int qd = a.h_k * a.d_k;
  copy_rows(s.q, s.qs, a.Q + int64_t(bb) * a.n * qd, qd, i0, a.n);
  for (int e = threadIdx.x; e < H * H; e += blockDim.x) {
    const int r = e / H, c = e % H;  // output head, input head
    s.pl_t[r * (H + 8) + c] = thx_from_float<thx_bf16>(mixing(a.P_l, a.h_k, a.h, c, r));
    s.pw_t[r * (H + 8) + c] = thx_from_float<thx_bf16>(mixing(a.P_w, a.h, a.h_v, c, r));
  }
  zero_stages<H>(s);
}

// c <- X Y^T [16 keys, 16 rows] for one head: X's keys k0 .. k0 + 15 (zero past m) from global
// memory (X at the example's key 0 and the head's first d, ldx elements a key), Y's 16 rows from
// shared memory (at row 0 and the head's first d: flash_row_at, ys elements a row), over d. Each
// lane reads 4 consecutive d of a key or row at once (8 bytes), which permutes k alike in both
// operands.
// (x(d0, half): the 8 bytes of key g + 8 half at d0 .. d0 + 3)
template <class X>
THX_DEVICE void key_row_step(const X& x, const thx_bf16* y, int ys, int d0, float (&c)[2][4]) {
  const ThxBytes8 x0 = x(d0, 0), x1 = x(d0, 1);
  const uint32_t af[4] = {x0.w[0], x1.w[0], x0.w[1], x1.w[1]};
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) thx_mma_bf16_16816(c[nt], af, thx_load8(y + 8 * nt * ys + d0).w);
}
// (Rolled: one step of 16 d at a time; else as nvcc unrolls it, which for shared memory's loads
// took 16-24 registers more, all four steps' operands at once)
template <bool Rolled, class X>
THX_DEVICE void key_row_product_of(const X& x, const thx_bf16* Y, int ys, int d, const Lane& L, float (&c)[2][4]) {
  const thx_bf16* y = Y + flash_row_at(L.g, 0, ys);  // (rows g and g + 8 start alike: + 8 ys)
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) c[nt][0] = c[nt][1] = c[nt][2] = c[nt][3] = 0.f;
  if (Rolled) {
#pragma unroll 1
    for (int d0 = 4 * L.t; d0 < d; d0 += 16) key_row_step(x, y, ys, d0, c);
  } else {
    for (int d0 = 4 * L.t; d0 < d; d0 += 16) key_row_step(x, y, ys, d0, c);
  }
}
THX_DEVICE void key_row_product(const thx_bf16* X, int ldx, int m, int k0, const thx_bf16* Y, int ys, int d,
                                const Lane& L, float (&c)[2][4]) {
  const int k1 = k0 + 8;
  key_row_product_of<false>(
      [&](int d0, int half) {
        const int k = half ? k1 : k0;
        return k < m ? thx_load8(X + k * ldx + d0) : ThxBytes8{{0u, 0u}};
      },
      Y, ys, d, L, c);
}
// The same with X's 16 keys staged in shared memory (copy_keys: keys xs elements apart, zero past m).
THX_DEVICE void staged_key_row_product(const thx_bf16* X, int xs, const thx_bf16* Y, int ys, int d, const Lane& L,
                                       float (&c)[2][4]) {
  const thx_bf16* x = X + L.g * xs;
  key_row_product_of<true>([&](int d0, int half) { return thx_load8(x + 8 * half * xs + d0); }, Y, ys, d, L, c);
}

// A warp's 16 keys jw .. of K at one head (K at the example's key 0 and the head's first d, qd
// elements a key; zero past m) into its staged keys S ([16][xs], flash_key_stride) by cp.async, 16
// bytes at a time, as one group: lane l copies key l % 16, from d 8 (l / 16) on in steps of 16.
THX_DEVICE void copy_keys(const thx_bf16* K, int qd, int m, int jw, int d, thx_bf16* S, int xs, const Lane& L) {
  const int key = L.l % 16;
  thx_bf16* to = S + key * xs;
  const thx_bf16* from = K + (jw + key) * qd;
  const bool in = jw + key < m;
#pragma unroll 1
  for (int c = 8 * (L.l / 16); c < d; c += 16) {
    if (in) thx_cp_async16(to + c, from + c);
    else thx_zero16(to + c);
  }
  thx_cp_async_commit();
}

// A [16 keys, 16 rows] product's output of one head (key_row_product's) into a backward stage at
// the head (S: flash_back_stage_at's [head][key][row]) as bf16 words: element (key g or g + 8, rows
// 2 t, 2 t + 1 of each 8).
THX_DEVICE void store_back_keys(thx_bf16* S, const Lane& L, const float (&c)[2][4]) {
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    thx_store_word(S + flash_back_stage_at(0, L.g, 8 * nt + 2 * L.t), pack_bf16x2(c[nt][0], c[nt][1]));
    thx_store_word(S + flash_back_stage_at(0, L.g + 8, 8 * nt + 2 * L.t), pack_bf16x2(c[nt][2], c[nt][3]));
  }
}

// A [16 keys, 16 rows] product's output of one head (key_row_product's) into a warp's stage S
// (flash_stage_at) as bf16 words: element (g or g + 8, rows 2 t, 2 t + 1 of each 8).
THX_DEVICE void store_keys(thx_bf16* S, int head, const Lane& L, const float (&c)[2][4]) {
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    thx_store_word(S + flash_stage_at(head, L.g, 8 * nt + 2 * L.t), pack_bf16x2(c[nt][0], c[nt][1]));
    thx_store_word(S + flash_stage_at(head, L.g + 8, 8 * nt + 2 * L.t), pack_bf16x2(c[nt][2], c[nt][3]));
  }
}

// The block's staged keys (flash_layout: they follow the rows' LSE; then the staged values).
template <int H>
THX_DEVICE thx_bf16* staged_keys_at(const Shared& s) {
  return reinterpret_cast<thx_bf16*>(s.lse + kFlashRows * (H + kFlashLsePad));
}

// This warp's stage <- J^T of its keys jw .. jw + 15 (zero past m) and the block's rows, every head
// < h_k, as bf16 [head][key][row] (flash_stage_at). The keys of K come through the warp's two
// staged heads (copy_keys): the next head's are copied in while this one's products run.
template <int H>
THX_DEVICE void stage_products(const FlashArgs<thx_bf16>& a, const Shared& s, int bb, int jw, const Lane& L) {
  // (w, ks and qd opaque: nvcc kept what it worked out from them, the places of the stage and the
  // staged keys, in registers over the kernel's loops, and spilled at 48 heads)
  const int w = thx_opaque(L.w), ks = thx_opaque(flash_key_stride(a.d_k)), qd = thx_opaque(a.h_k * a.d_k);
  thx_bf16* S = s.stage + w * H * kFlashStageHead;
  thx_bf16* keys = staged_keys_at<H>(s) + w * 2 * 16 * ks;
  const thx_bf16* K = a.K + int64_t(bb) * a.m * qd;
  thx_syncwarp();  // the warp's earlier reads of its stage and its staged keys are done
  copy_keys(K, qd, a.m, jw, a.d_k, keys, ks, L);
  for (int head = 0; head < a.h_k; ++head) {
    thx_cp_async_wait<0>();
    thx_syncwarp();  // this head's keys have landed, and the warp's reads of the other head's are done
    if (head + 1 < a.h_k)
      copy_keys(K + (head + 1) * a.d_k, qd, a.m, jw, a.d_k, keys + (head + 1) % 2 * 16 * ks, ks, L);
    float c[2][4];
    staged_key_row_product(keys + head % 2 * 16 * ks, ks, s.q + head * a.d_k, s.qs, a.d_k, L, c);
    store_keys(S, head, L, c);
  }
  thx_syncwarp();
}

// This warp's two buffers of staged values (flash_values_staged; flash_layout: after the staged
// keys), worked out from opaque values as stage_products's places are.
template <int H, int DV>
THX_DEVICE thx_bf16* staged_values(const FlashArgs<thx_bf16>& a, const Shared& s, const Lane& L) {
  const int ks = thx_opaque(flash_key_stride(a.d_k)), w = thx_opaque(L.w);
  return staged_keys_at<H>(s) + kFlashWarps * 2 * 16 * ks + w * 2 * DV * kFlashValueStride;
}

// a <- J [16 rows, heads] at key kl of a backward stage S (flash_back_stage_at), by ldmatrix.trans:
// matrix j of lane 8 j + r is heads 16 kb + 8 (j / 2) + r, rows 8 (j % 2) on.
template <int H>
THX_DEVICE void stage_rows_a(const thx_bf16* S, int kl, const Lane& L, uint32_t (&a)[H / 16][4]) {
  const int r = L.l % 8, j = L.l / 8;
  const thx_bf16* at = S + flash_back_stage_at(8 * (j / 2) + r, kl, 8 * (j % 2));
#pragma unroll
  for (int kb = 0; kb < H / 16; ++kb) thx_ldmatrix<4, true>(a[kb], at + 16 * kb * kFlashBackHeadStride);
}

// c (NT tiles of a [16 rows, heads] product's output from tile nt0: heads 8 nt0 on) += the bias
// of `key` and the rows i0 .. i0 + 15; -inf where masked and past h, m or n. (Lane's rows g, g + 8;
// offsets within the rows 32-bit, flash_unsupported.) Without a bias or mask, a key below m is
// left as it is, no test an element: past h its logits are 0 (the mixings' copies are zero there),
// which the rows' LSE of +inf past h makes weights of 0 (statistics, load_chunk), and past n they
// are 0 too (Q's rows are zero there), whose weights nothing keeps (the forward stores no O row
// past n; the backward's LSE is +inf there, its dO zero).
template <int NT>
THX_DEVICE void bias_and_mask(const FlashArgs<thx_bf16>& a, int bb, int i0, int key, int nt0, const Lane& L,
                              float (&c)[NT][4]) {
  const float* bias = a.bias ? a.bias + bb * a.bias_stride[0] + i0 * a.bias_stride[2] : nullptr;
  const uint8_t* mask = a.mask ? a.mask + bb * a.mask_stride[0] + i0 * a.mask_stride[2] : nullptr;
  const int bh = int(a.bias_stride[1]), br = int(a.bias_stride[2]), bk = int(a.bias_stride[3]);
  const int mh = int(a.mask_stride[1]), mr = int(a.mask_stride[2]), mk = int(a.mask_stride[3]);
  if (!bias && !mask && key < a.m) return;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const int head = head_at(L, nt0 + nt, x), row = L.g + 8 * (x >> 1);
      if (head >= a.h || key >= a.m || i0 + row >= a.n) {
        c[nt][x] = -thx_inf();
        continue;
      }
      if (bias) c[nt][x] += bias[head * bh + row * br + key * bk];
      if (mask && !mask[head * mh + row * mr + key * mk]) c[nt][x] = -thx_inf();
    }
}

// c <- the logits of `key` for the rows i0 .. i0 + 15 from J's A operands aj [16 rows, heads]:
// mixed by P_l^T's copy pl_t, plus the bias and the mask (logits and stage_logits, below).
template <int H>
THX_DEVICE void mixed_logits(const FlashArgs<thx_bf16>& a, const thx_bf16* pl_t, const uint32_t (&aj)[H / 16][4],
                             int bb, int i0, int key, const Lane& L, float (&c)[H / 8][4]) {
  rows_tc::mix<H>(aj, pl_t, L, c);
  bias_and_mask<H / 8>(a, bb, i0, key, 0, L, c);
}

// c <- the logits of `key` for the rows i0 .. i0 + 15: J at key kl of a backward stage S
// (flash_back_stage_at) mixed by P_l^T's copy pl_t, plus the bias and the mask.
template <int H>
THX_DEVICE void logits(const FlashArgs<thx_bf16>& a, const thx_bf16* pl_t, const thx_bf16* S, int kl, int bb, int i0,
                       int key, const Lane& L, float (&c)[H / 8][4]) {
  uint32_t aj[H / 16][4];
  stage_rows_a<H>(S, kl, L, aj);
  mixed_logits<H>(a, pl_t, aj, bb, i0, key, L, c);
}

// A lane's two LSE (or D) of output tile nt, element pair half (row g + 8 half, heads 8 nt + 2 t and
// + 1: elements 2 half, 2 half + 1), from the rows' [16][H + kFlashLsePad] in one 8-byte read.
template <int H>
THX_DEVICE ThxBytes8 row_pair(const float* rows, const Lane& L, int nt, int half) {
  return thx_load8(rows + (L.g + 8 * half) * (H + kFlashLsePad) + head_at(L, nt, 0));
}

// The same from a warp's stage of the forward (flash_stage_at), at its key kl: A = J [16 rows,
// heads] by ldmatrix.trans as stage_rows_a reads it (matrix j of lane 8 j + r: heads 16 kb + 8 (j /
// 2) + r, rows 8 (j % 2) on).
template <int H>
THX_DEVICE void stage_logits(const FlashArgs<thx_bf16>& a, const thx_bf16* pl_t, const thx_bf16* S, int kl, int bb,
                             int i0, int key, const Lane& L, float (&c)[H / 8][4]) {
  const int r = L.l % 8, j = L.l / 8;
  // (heads 16 kb on have the slots of heads 0 .. 15: one place a lane, 16 heads apart)
  const thx_bf16* at = S + flash_stage_at(8 * (j / 2) + r, kl, 8 * (j % 2));
  uint32_t aj[H / 16][4];
#pragma unroll
  for (int kb = 0; kb < H / 16; ++kb) thx_ldmatrix<4, true>(aj[kb], at + 16 * kb * kFlashStageHead);
  mixed_logits<H>(a, pl_t, aj, bb, i0, key, L, c);
}

// c (logits as a [16 rows, H] product's output) <- the weights exp(L - LSE), lse the rows' [16][H +
// kFlashLsePad] in shared memory; 0 where the logit is -inf (masked, past m, and past h or n where
// bias_and_mask tests them: a row with no key has LSE -inf too, and exp(-inf + inf) would be NaN),
// and where the LSE is +inf (past h, and past n in the backward).
template <int H>
THX_DEVICE void rows_weights(const float* lse, const Lane& L, float (&c)[H / 8][4]) {
#pragma unroll
  for (int nt = 0; nt < H / 8; ++nt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const ThxBytes8 m = row_pair<H>(lse, L, nt, half);
#pragma unroll
      for (int y = 0; y < 2; ++y) {
        float& v = c[nt][2 * half + y];
        v = v == -thx_inf() ? 0.f : thx_exp_fast(v - thx_bits_to_float(m.w[y]));
      }
    }
}

// The B operands (k: heads, n: the 16 rows) of a product M X^T, from X [16 rows, H] as a product's
// output holds it: k (heads 16 kb + 2 t ..) from tiles 2 kb and 2 kb + 1, n (row g of each 8) from
// elements 0, 1 (rows 0-7) or 2, 3 (rows 8-15), rounded to bf16.
template <int H>
THX_DEVICE void pack_b(const float (&x)[H / 8][4], uint32_t (&b)[H / 16][2][2]) {
#pragma unroll
  for (int kb = 0; kb < H / 16; ++kb)
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      b[kb][nt][0] = pack_bf16x2(x[2 * kb][2 * nt], x[2 * kb][2 * nt + 1]);
      b[kb][nt][1] = pack_bf16x2(x[2 * kb + 1][2 * nt], x[2 * kb + 1][2 * nt + 1]);
    }
}
// The same from key kl of a backward stage S (flash_back_stage_at) by ldmatrix.trans: matrix j of
// lane 8 j + r is heads 16 kb + 8 (j % 2) + r, rows 8 (j / 2) on.
template <int H>
THX_DEVICE void staged_b(const thx_bf16* S, int kl, const Lane& L, uint32_t (&b)[H / 16][2][2]) {
  const int r = L.l % 8, j = L.l / 8;
  const thx_bf16* at = S + flash_back_stage_at(8 * (j % 2) + r, kl, 8 * (j / 2));
#pragma unroll
  for (int kb = 0; kb < H / 16; ++kb) {
    uint32_t x[4];
    thx_ldmatrix<4, true>(x, at + 16 * kb * kFlashBackHeadStride);
    b[kb][0][0] = x[0], b[kb][0][1] = x[1], b[kb][1][0] = x[2], b[kb][1][1] = x[3];
  }
}

// u <- M X^T [16 heads x mt, 16 rows]: M a bf16 copy [out][in] in shared memory (rows of H + 8, by
// ldmatrix), X^T's B operands b (above).
template <int H>
THX_DEVICE void mix_t(const thx_bf16* M, const uint32_t (&b)[H / 16][2][2], const Lane& L, float (&u)[H / 16][2][4]) {
  const int r = L.l % 8, j = L.l / 8;
#pragma unroll
  for (int mt = 0; mt < H / 16; ++mt) {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) u[mt][nt][0] = u[mt][nt][1] = u[mt][nt][2] = u[mt][nt][3] = 0.f;
#pragma unroll
    for (int kb = 0; kb < H / 16; ++kb) {
      uint32_t af[4];
      thx_ldmatrix<4, false>(af, M + (16 * mt + 8 * (j % 2) + r) * (H + 8) + 16 * kb + 8 * (j / 2));
      thx_mma_bf16_16816(u[mt][0], af, b[kb][0]);
      thx_mma_bf16_16816(u[mt][1], af, b[kb][1]);
    }
  }
}
// u ([16 heads x mt, 16 rows]: U^T, or the backward's dJ^T) into key kl of a stage, as words of two
// rows: element (head 16 mt + g or + 8, rows 2 t, 2 t + 1 of each 8). Back: a backward stage
// (flash_back_stage_at); else a warp's stage of the forward (flash_stage_at).
template <int H, bool Back>
THX_DEVICE void store_heads(thx_bf16* S, int kl, const Lane& L, const float (&u)[H / 16][2][4]) {
  constexpr int hs = Back ? kFlashBackHeadStride : kFlashStageHead;
  const int at[2] = {Back ? flash_back_stage_at(L.g, kl, 2 * L.t) : flash_stage_at(L.g, kl, 2 * L.t),
                     Back ? flash_back_stage_at(L.g, kl, 8 + 2 * L.t) : flash_stage_at(L.g, kl, 8 + 2 * L.t)};
#pragma unroll
  for (int mt = 0; mt < H / 16; ++mt)
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {  // (heads g + 8: 8 heads on, in either layout)
      thx_bf16* p = S + at[nt] + 16 * mt * hs;
      thx_store_word(p, pack_bf16x2(u[mt][nt][0], u[mt][nt][1]));
      thx_store_word(p + 8 * hs, pack_bf16x2(u[mt][nt][2], u[mt][nt][3]));
    }
}

// acc[e] += A B over 16 keys key0 ..: A = [16 rows, 16 keys] by ldmatrix.trans from af, B = X^T's
// rows d (X^T [d][m8] in global memory at the head, zero from key m on; words of two keys), 8
// columns a tile e, for 8 e < d.
// (b(e, bf): B's two words for tile e)
template <int D, class B>
THX_DEVICE void rows_by_keys_of(const uint32_t (&af)[4], const B& b, int d, float (&acc)[D / 8][4]) {
#pragma unroll
  for (int e = 0; e < D / 8; ++e) {
    if (8 * e >= d) continue;
    uint32_t bf[2];
    b(e, bf);
    thx_mma_bf16_16816(acc[e], af, bf);
  }
}
template <int D>
THX_DEVICE void rows_by_keys_a(const uint32_t (&af)[4], const thx_bf16* Xt, int m8, int key0, int d, const Lane& L,
                               float (&acc)[D / 8][4]) {
  const int key = key0 + 2 * L.t;
  auto b = [&](int e, uint32_t (&bf)[2]) {
    const thx_bf16* col = Xt + (8 * e + L.g) * m8;
    bf[0] = key < m8 ? thx_load_word(col + key) : 0u, bf[1] = key + 8 < m8 ? thx_load_word(col + key + 8) : 0u;
  };
  rows_by_keys_of<D>(af, b, d, acc);
}
// The same with X^T's rows staged (copy_values: [D][kFlashValueStride], the tile's keys from 0,
// zero past m8), at the tile's keys k0 ..
template <int D>
THX_DEVICE void rows_by_staged_keys(const uint32_t (&af)[4], const thx_bf16* S, int k0, int d, const Lane& L,
                                    float (&acc)[D / 8][4]) {
  auto b = [&](int e, uint32_t (&bf)[2]) {
    const thx_bf16* col = S + (8 * e + L.g) * kFlashValueStride + k0 + 2 * L.t;
    bf[0] = thx_load_word(col), bf[1] = thx_load_word(col + 8);
  };
  rows_by_keys_of<D>(af, b, d, acc);
}
// V^T's 64 keys t0 .. of one head (Vt at the example's head: rows d < d_v of m8 keys; zero past m8
// and d_v) into a warp's staged values S ([DV][kFlashValueStride]) by cp.async, as one group.
template <int DV>
THX_DEVICE void copy_values(const thx_bf16* Vt, int m8, int d_v, int t0, thx_bf16* S, const Lane& L) {
#pragma unroll 1
  for (int e = L.l; e < DV * 8; e += 32) {  // (rows of 8 pieces of 8 keys)
    const int row = e / 8, key = t0 + 8 * (e % 8);
    thx_bf16* to = S + row * kFlashValueStride + 8 * (e % 8);
    if (row < d_v && key < m8) thx_cp_async16(to, Vt + row * m8 + key);
    else thx_zero16(to);
  }
  thx_cp_async_commit();
}
// The same with A from a backward stage at one head (S at the head: flash_back_stage_at's [key][row]
// there; matrix j of lane 8 j + r: keys 8 (j / 2) + r, rows 8 (j % 2) on): the backward's.
template <int D>
THX_DEVICE void rows_by_keys(const thx_bf16* S, const thx_bf16* Xt, int m8, int key0, int d, const Lane& L,
                             float (&acc)[D / 8][4]) {
  const int r = L.l % 8, j = L.l / 8;
  uint32_t af[4];
  thx_ldmatrix<4, true>(af, S + flash_back_stage_at(0, 8 * (j / 2) + r, 8 * (j % 2)));
  rows_by_keys_a<D>(af, Xt, m8, key0, d, L, acc);
}
// The same with A by ldmatrix.trans at `at`, this lane's row of a warp's stage of the forward (its
// place of head v: stage_row_at): the forward's.
template <int D>
THX_DEVICE void stage_rows_by_keys(const thx_bf16* at, const thx_bf16* Xt, int m8, int key0, int d, const Lane& L,
                                   float (&acc)[D / 8][4]) {
  uint32_t af[4];
  thx_ldmatrix<4, true>(af, at);
  rows_by_keys_a<D>(af, Xt, m8, key0, d, L, acc);
}
// This lane's ldmatrix row for head v of a warp's stage (matrix j of lane 8 j + r: keys 8 (j / 2) + r,
// rows 8 (j % 2) on).
THX_DEVICE int stage_row_at(int v, const Lane& L) {
  return flash_stage_at(v, 8 * (L.l / 16) + L.l % 8, 8 * (L.l / 8 % 2));
}

// Pass 1: each lane's running max and sum for its (row, head) pairs over the block's keys, folded
// over the warps in order -> the rows' LSE (shared, and stored); the stages zeroed again after.
template <int H>
THX_DEVICE void statistics(const FlashArgs<thx_bf16>& a, const Shared& s, int bb, int i0, const Lane& L) {
  float mx[H / 8][4], sm[H / 8][4];
#pragma unroll
  for (int nt = 0; nt < H / 8; ++nt)
#pragma unroll
    for (int x = 0; x < 4; ++x) mx[nt][x] = -thx_inf(), sm[nt][x] = 0.f;
  for (int t0 = 0; t0 < a.m; t0 += 16 * kFlashWarps) {
    const int jw = t0 + 16 * L.w;
    if (jw >= a.m) continue;
    stage_products<H>(a, s, bb, jw, L);
    const thx_bf16* S = s.stage + L.w * H * kFlashStageHead;
    for (int kl = 0; kl < 16 && jw + kl < a.m; ++kl) {
      float c[H / 8][4];
      stage_logits<H>(a, s.pl_t, S, kl, bb, i0, jw + kl, L, c);
#pragma unroll
      for (int nt = 0; nt < H / 8; ++nt)
#pragma unroll
        for (int x = 0; x < 4; ++x) rows::add_logit<true, H == 48>(mx[nt][x], sm[nt][x], c[nt][x]);
    }
  }
  __syncthreads();  // every warp is done with its stage, where the slots go
#pragma unroll
  for (int nt = 0; nt < H / 8; ++nt)
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const int at = (L.w * kFlashRows + L.g + 8 * (x >> 1)) * H + head_at(L, nt, x);
      s.slot0[at] = mx[nt][x], s.slot1[at] = sm[nt][x];
    }
  __syncthreads();
  for (int e = threadIdx.x; e < kFlashRows * H; e += blockDim.x) {
    const int row = e / H, head = e % H;
    float m = s.slot0[e], t = s.slot1[e];
    for (int w = 1; w < kFlashWarps; ++w)
      rows::merge(m, t, s.slot0[w * kFlashRows * H + e], s.slot1[w * kFlashRows * H + e]);
    // (+inf past h: logits there are 0 or -inf, and either's weight is 0; bias_and_mask)
    const float lse = head >= a.h ? thx_inf() : m == -thx_inf() ? -thx_inf() : m + thx_log(t);
    s.lse[row * (H + kFlashLsePad) + head] = lse;
    if (head < a.h && i0 + row < a.n) a.lse[(int64_t(bb) * a.h + head) * a.n + i0 + row] = lse;
  }
  __syncthreads();
  zero_stages<H>(s);
}

// Pass 2 for one tile's keys t0 ..: each warp's keys' U staged over their J; then O += U V for
// warp w's heads over the tile's keys (every warp's stage).
template <int H, int DV>
THX_DEVICE void accumulate_tile(const FlashArgs<thx_bf16>& a, const Shared& s, int bb, int i0, int t0, const Lane& L,
                                float (&o)[H / 4][DV / 8][4]) {
  const int jw = t0 + 16 * L.w;
  if (jw < a.m) stage_products<H>(a, s, bb, jw, L);
  if constexpr (flash_values_staged(H))  // the warp's first two heads of V, landing during the keys' loop
    for (int hi = 0; hi < 2 && L.w + kFlashWarps * hi < a.h_v; ++hi)
      copy_values<DV>(a.Vt + (int64_t(bb) * a.h_v + L.w + kFlashWarps * hi) * a.d_v * a.m8, a.m8, a.d_v, t0,
                      staged_values<H, DV>(a, s, L) + hi * DV * kFlashValueStride, L);
  if (jw < a.m) {
    thx_bf16* S = s.stage + L.w * H * kFlashStageHead;
    for (int kl = 0; kl < 16 && jw + kl < a.m; ++kl) {
      float c[H / 8][4], u[H / 16][2][4];
      uint32_t b[H / 16][2][2];
      stage_logits<H>(a, s.pl_t, S, kl, bb, i0, jw + kl, L, c);
      rows_weights<H>(s.lse, L, c);
      pack_b<H>(c, b);
      mix_t<H>(s.pw_t, b, L, u);  // U^T = P_w^T W^T
      thx_syncwarp();              // the key's J is read: its U goes in its place
      store_heads<H, false>(S, kl, L, u);
    }
  }
  __syncthreads();  // every warp's U is staged
  // (heads v and v + 8 share their slots: two places a lane, for heads w and w + 4, then 8 heads apart)
  const int row_at[2] = {stage_row_at(L.w, L), stage_row_at(L.w + kFlashWarps, L)};
#pragma unroll
  for (int hi = 0; hi < H / 4; ++hi) {
    const int v = L.w + kFlashWarps * hi;
    if (v >= a.h_v) continue;
    const thx_bf16* Vt = a.Vt + (int64_t(bb) * a.h_v + v) * a.d_v * a.m8;
    const thx_bf16* at = s.stage + row_at[hi % 2] + (hi / 2) * 8 * kFlashStageHead;
    if constexpr (flash_values_staged(H)) {
      // (head hi's values in buffer hi % 2: wait for its group, the next head's may stay in flight)
      if (v + kFlashWarps < a.h_v) thx_cp_async_wait<1>();
      else thx_cp_async_wait<0>();
      thx_syncwarp();
      thx_bf16* S = staged_values<H, DV>(a, s, L) + hi % 2 * DV * kFlashValueStride;
      for (int ks = 0; ks < kFlashWarps && t0 + 16 * ks < a.m; ++ks) {
        uint32_t af[4];
        thx_ldmatrix<4, true>(af, at + ks * H * kFlashStageHead);
        rows_by_staged_keys<DV>(af, S, 16 * ks, a.d_v, L, o[hi]);
      }
      thx_syncwarp();  // the buffer is read: head hi + 2's values go there
      if (v + 2 * kFlashWarps < a.h_v) copy_values<DV>(Vt + 2 * kFlashWarps * a.d_v * a.m8, a.m8, a.d_v, t0, S, L);
    } else {
      for (int ks = 0; ks < kFlashWarps && t0 + 16 * ks < a.m; ++ks)
        stage_rows_by_keys<DV>(at + ks * H * kFlashStageHead, Vt, a.m8, t0 + 16 * ks, a.d_v, L, o[hi]);
    }
  }
  __syncthreads();  // before the next tile's products overwrite the stages
}

template <int H, int DV>
__global__ void THX_LAUNCH_BOUNDS(kFlashThreads, 1) flash_forward_kernel(FlashArgs<thx_bf16> a) {
  const Shared s = shared_layout<H>(a);
  const Lane L = lane_of();
  const int bb = blockIdx.x, i0 = int(blockIdx.y) * kFlashRows;
  load_block<H>(a, s, bb, i0);
  statistics<H>(a, s, bb, i0, L);
  float o[H / 4][DV / 8][4];
#pragma unroll
  for (int hi = 0; hi < H / 4; ++hi)
#pragma unroll
    for (int e = 0; e < DV / 8; ++e) o[hi][e][0] = o[hi][e][1] = o[hi][e][2] = o[hi][e][3] = 0.f;
  for (int t0 = 0; t0 < a.m; t0 += 16 * kFlashWarps) accumulate_tile<H, DV>(a, s, bb, i0, t0, L, o);
#pragma unroll
  for (int hi = 0; hi < H / 4; ++hi) {
    const int v = L.w + kFlashWarps * hi;
    if (v >= a.h_v) continue;
#pragma unroll
    for (int e = 0; e < DV / 8; ++e)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = i0 + L.g + 8 * half, col = 8 * e + 2 * L.t;
        if (row < a.n && col < a.d_v)
          thx_store_word(a.O + ((int64_t(bb) * a.n + row) * a.h_v + v) * a.d_v + col,
                         pack_bf16x2(o[hi][e][2 * half], o[hi][e][2 * half + 1]));
      }
  }
}

}  // namespace flash

}  // namespace thx::cuda_th
