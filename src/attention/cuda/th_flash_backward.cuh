// th_flash_backward.cuh: the talking-heads backward as flash-style kernels on tensor cores, from the
// flash forward's LSE (th_flash_args.h's FlashBackArgs says what they take and give). Written once
// for nvcc, clang's PTX check and the emulator, from the forward's fragments (th_flash_kernels.cuh).
//
// A block owns 16 keys of one example and takes the query rows 16 at a time (a chunk), starting at
// chunk x + y of its grid place (x, y) (so that the blocks running together add into different rows
// of dQ and D, and, where the examples share a bias, into different places of its gradient). For
// each chunk, with 8 warps:
//  - J^T = K Q^T and dU^T = V dO^T per head, [16 keys, 16 rows], the heads spread over the warps,
//    into the stages J and dU ([head][key][row], bf16); K's and V's keys staged in shared memory a
//    head ahead by cp.async where the bucket is at most 32 wide (flash_back_keys_staged);
//  - per key (two a warp): L = J P_l, W = exp(L - LSE), dW = dU P_w^T as [16 rows, heads] products'
//    outputs; pass D adds W dW into D; pass G makes dL = W (dW - D), stages W and dL (bf16) and adds
//    dL into the bias's gradient (four keys at a time from an fp32 stage where it is aligned for
//    that, FlashBackArgs::bias_staged);
//  - pass G: the projections' gradients J dL^T and W dU^T over the chunk's 256 (key, row) places
//    from the stages (each warp its 16 x 8 tiles, summed in registers over the chunks); then per key
//    U^T = P_w^T W^T into the stage dU and dJ^T = P_l dL^T into the stage J (B operands by
//    ldmatrix.trans from the stages W and dL); then per head dV += U^T dO and dK += dJ^T Q (in
//    registers: warp w's heads w, w + 8, ...) and dQ += dJ K (fp32 vector reductions, four columns each).
#pragma once
#include "attention/cuda/th_flash_kernels.cuh"

namespace thx::cuda_th {
namespace flash_back {

using flash::head_at;
using flash::Lane;
using flash::lane_of;

constexpr int HS = kFlashBackHeadStride, WARPS = kFlashBackWarps;

struct Shared {
  thx_bf16 *q, *dout, *pl_t, *pl, *pw_t, *pw, *j, *du, *w, *dl;
  float *lse, *d, *slots;  // slots: pass D's fold of the warps' shares, where W and dL are
  float* acc;              // pass G: the projections' partial sums, 16 x 8 tiles [tile][lane][4]
  float* bias;             // pass G with bias_staged: dL [head][row][8 keys] for the bias, half a block; else null
  thx_bf16* keys;          // the warps' staged keys of K and V (flash_back_keys_staged), or null
  int qs, os;
};
// (G: pass G's, with the bias's stage where bias_staged; pass D has none. D: the bucket's width,
// whether the keys are staged)
template <int H, int D, bool G>
THX_DEVICE Shared shared_layout(const FlashBackArgs<thx_bf16>& a) {
  THX_SHARED(shared_bytes);
  const bool staged = G && a.dbias && a.bias_staged;
  constexpr bool keys = flash_back_keys_staged(D);
  const FlashBackLayout at = flash_back_layout(H, a.f.h_k, a.f.d_k, a.f.h_v, a.f.d_v, staged, keys);
  auto bf = [&](int64_t x) { return reinterpret_cast<thx_bf16*>(shared_bytes + x); };
  auto fl = [&](int64_t x) { return reinterpret_cast<float*>(shared_bytes + x); };
  return {bf(at.q),   bf(at.dout), bf(at.pl_t), bf(at.pl), bf(at.pw_t), bf(at.pw),
          bf(at.j),   bf(at.du),   bf(at.w),    bf(at.dl), fl(at.lse),  fl(at.d),
          fl(at.w),   fl(at.acc),  staged ? fl(at.bias) : nullptr,        keys ? bf(at.keys) : nullptr,
          at.q_stride, at.o_stride};
}

// The mixings' copies [out][in]: P_l^T, P_l, P_w^T, P_w (the identity where absent, zero past the
// heads); the stages zeroed (the heads past h_k and h_v that the mixings read must be finite); a
// barrier.
template <int H>
THX_DEVICE void load_mixings(const FlashArgs<thx_bf16>& f, const Shared& s) {
  for (int e = threadIdx.x; e < H * H; e += blockDim.x) {
    const int r = e / H, c = e % H, at = r * (H + 8) + c;
    s.pl_t[at] = thx_from_float<thx_bf16>(flash::mixing(f.P_l, f.h_k, f.h, c, r));
    s.pl[at] = thx_from_float<thx_bf16>(flash::mixing(f.P_l, f.h_k, f.h, r, c));
    s.pw_t[at] = thx_from_float<thx_bf16>(flash::mixing(f.P_w, f.h, f.h_v, c, r));
    s.pw[at] = thx_from_float<thx_bf16>(flash::mixing(f.P_w, f.h, f.h_v, r, c));
  }
  for (int e = threadIdx.x; e < 4 * H * HS / 8; e += blockDim.x) thx_zero16(s.j + 8 * e);  // j, du, w, dl in a row
  __syncthreads();
}

// The chunk's rows r0 .. r0 + 15 of Q and dO (zero past n), and their LSE (and in pass G D) per
// head (+inf and 0 past h or n); a barrier.
template <int H, bool G>
THX_DEVICE void load_chunk(const FlashBackArgs<thx_bf16>& a, const Shared& s, int bb, int r0) {
  const FlashArgs<thx_bf16>& f = a.f;
  const int qd = f.h_k * f.d_k, vd = f.h_v * f.d_v;
  flash::copy_rows(s.q, s.qs, f.Q + int64_t(bb) * f.n * qd, qd, r0, f.n);
  flash::copy_rows(s.dout, s.os, a.dO + int64_t(bb) * f.n * vd, vd, r0, f.n);
  for (int e = threadIdx.x; e < kFlashRows * H; e += blockDim.x) {
    const int row = e / H, head = e % H;
    const bool in = head < f.h && r0 + row < f.n;
    const int64_t at = (int64_t(bb) * f.h + head) * f.n + r0 + row;
    s.lse[row * (H + kFlashLsePad) + head] = in ? f.lse[at] : thx_inf();  // (a weight of 0: bias_and_mask)
    if (G) s.d[row * (H + kFlashLsePad) + head] = in ? a.D[at] : 0.f;
  }
  __syncthreads();
}

// Where the block's staged keys are (flash_back_keys_staged): the warp's two buffers, 16 keys of
// K's or V's rows at one head each, keys xs apart. (Worked out where used from opaque values: kept
// over the kernel's loops, such places spilled the forward at 48 heads.)
struct StagedKeys {
  thx_bf16* at;
  int xs;
};
THX_DEVICE StagedKeys staged_keys(const FlashArgs<thx_bf16>& f, const Shared& s, const Lane& L) {
  const int xs = thx_opaque(flash_key_stride(f.d_k > f.d_v ? f.d_k : f.d_v));
  return {s.keys + thx_opaque(L.w) * 2 * 16 * xs, xs};
}
// Product x of a warp (x < h_k: K's head x, else V's head x - h_k) at the block's keys kb0 .. into
// `to` by cp.async (copy_keys), as one group.
THX_DEVICE void copy_product_keys(const FlashBackArgs<thx_bf16>& a, int bb, int kb0, int x, thx_bf16* to, int xs,
                                  const Lane& L) {
  const FlashArgs<thx_bf16>& f = a.f;
  const int qd = thx_opaque(f.h_k * f.d_k), vd = thx_opaque(f.h_v * f.d_v);
  if (x < f.h_k) flash::copy_keys(f.K + int64_t(bb) * f.m * qd + x * f.d_k, qd, f.m, kb0, f.d_k, to, xs, L);
  else flash::copy_keys(a.V + int64_t(bb) * f.m * vd + (x - f.h_k) * f.d_v, vd, f.m, kb0, f.d_v, to, xs, L);
}

// The stages J^T and dU^T from staged keys: each warp's products x = w, w + 8, .. in turn from its
// two buffers, the next one's keys copied in while this one's products run. The first's were
// copied before (the kernel's start, or the chunk before: the block's keys are every chunk's);
// `more`: another chunk follows, whose first it copies at the end.
template <int H>
THX_DEVICE void chunk_products_staged(const FlashBackArgs<thx_bf16>& a, const Shared& s, int bb, int kb0, bool more,
                                      const Lane& L) {
  const FlashArgs<thx_bf16>& f = a.f;
  const StagedKeys k = staged_keys(f, s, L);
  const int products = f.h_k + f.h_v;
  for (int x = L.w, i = 0; x < products; x += WARPS, ++i) {
    thx_cp_async_wait<0>();
    thx_syncwarp();  // this product's keys have landed, and the warp's reads of the other buffer are done
    const thx_bf16* here = k.at + i % 2 * 16 * k.xs;
    if (x + WARPS < products) copy_product_keys(a, bb, kb0, x + WARPS, k.at + (i + 1) % 2 * 16 * k.xs, k.xs, L);
    float c[2][4];
    if (x < f.h_k) {
      flash::staged_key_row_product(here, k.xs, s.q + x * f.d_k, s.qs, f.d_k, L, c);
      flash::store_back_keys(s.j + x * HS, L, c);
    } else {
      const int v = x - f.h_k;
      flash::staged_key_row_product(here, k.xs, s.dout + v * f.d_v, s.os, f.d_v, L, c);
      flash::store_back_keys(s.du + v * HS, L, c);
    }
  }
  thx_syncwarp();  // the reads of the buffers are done
  if (more && L.w < products) copy_product_keys(a, bb, kb0, L.w, k.at, k.xs, L);
  __syncthreads();
}

// The stages J^T and dU^T of the block's keys kb0 .. and the chunk's rows, the heads over the warps
// (J's, then dU's); a barrier.
template <int H>
THX_DEVICE void chunk_products(const FlashBackArgs<thx_bf16>& a, const Shared& s, int bb, int kb0, const Lane& L) {
  const FlashArgs<thx_bf16>& f = a.f;
  const int qd = f.h_k * f.d_k, vd = f.h_v * f.d_v;
  for (int x = L.w; x < f.h_k + f.h_v; x += WARPS) {
    float c[2][4];
    if (x < f.h_k) {
      flash::key_row_product(f.K + int64_t(bb) * f.m * qd + x * f.d_k, qd, f.m, kb0 + L.g, s.q + x * f.d_k, s.qs,
                             f.d_k, L, c);
      flash::store_back_keys(s.j + x * HS, L, c);
    } else {
      const int v = x - f.h_k;
      flash::key_row_product(a.V + int64_t(bb) * f.m * vd + v * f.d_v, vd, f.m, kb0 + L.g, s.dout + v * f.d_v, s.os,
                             f.d_v, L, c);
      flash::store_back_keys(s.du + v * HS, L, c);
    }
  }
  __syncthreads();
}

// For key kb0 + kl and the chunk's rows: c <- W = exp(L - LSE) (0 where L is -inf), e <- dW = dU
// P_w^T, both as [16 rows, H] products' outputs.
template <int H>
THX_DEVICE void key_weights(const FlashBackArgs<thx_bf16>& a, const Shared& s, int bb, int r0, int kb0, int kl,
                            const Lane& L, float (&c)[H / 8][4], float (&e)[H / 8][4]) {
  flash::logits<H>(a.f, s.pl_t, s.j, kl, bb, r0, kb0 + kl, L, c);
  flash::rows_weights<H>(s.lse, L, c);
  uint32_t adu[H / 16][4];
  flash::stage_rows_a<H>(s.du, kl, L, adu);
  rows_tc::mix<H>(adu, s.pw, L, e);
}

// Pass D: the chunk's share of D (W dW summed over the block's keys: each lane its (row, head)
// places, then the warps in order) added into D; a barrier first (the stages are read).
template <int H>
THX_DEVICE void chunk_d(const FlashBackArgs<thx_bf16>& a, const Shared& s, int bb, int kb0, int r0, const Lane& L) {
  float d[H / 8][4];
#pragma unroll
  for (int nt = 0; nt < H / 8; ++nt) d[nt][0] = d[nt][1] = d[nt][2] = d[nt][3] = 0.f;
  for (int kl = L.w; kl < 16; kl += WARPS) {
    float c[H / 8][4], e[H / 8][4];
    key_weights<H>(a, s, bb, r0, kb0, kl, L, c, e);
#pragma unroll
    for (int nt = 0; nt < H / 8; ++nt)
#pragma unroll
      for (int x = 0; x < 4; ++x) d[nt][x] += c[nt][x] * e[nt][x];
  }
#pragma unroll
  for (int nt = 0; nt < H / 8; ++nt)
#pragma unroll
    for (int x = 0; x < 4; ++x) s.slots[(L.w * kFlashRows + L.g + 8 * (x >> 1)) * H + head_at(L, nt, x)] = d[nt][x];
  __syncthreads();
  const FlashArgs<thx_bf16>& f = a.f;
  for (int e = threadIdx.x; e < kFlashRows * H; e += blockDim.x) {
    const int row = e / H, head = e % H;
    float t = s.slots[e];
    for (int w = 1; w < WARPS; ++w) t += s.slots[w * kFlashRows * H + e];
    if (head < f.h && r0 + row < f.n) thx_atomic_add(a.D + (int64_t(bb) * f.h + head) * f.n + r0 + row, t);
  }
}

// c <- output tiles 2 np, 2 np + 1 (heads 16 np ..) of rows_tc::mix's product a M^T.
template <int H>
THX_DEVICE void mix_pair(const uint32_t (&a)[H / 16][4], const thx_bf16* M, const Lane& L, int np, float (&c)[2][4]) {
  const int r = L.l % 8, j = L.l / 8;
  c[0][0] = c[0][1] = c[0][2] = c[0][3] = c[1][0] = c[1][1] = c[1][2] = c[1][3] = 0.f;
#pragma unroll
  for (int kb = 0; kb < H / 16; ++kb) {
    uint32_t b[4];
    thx_ldmatrix<4, false>(b, M + (16 * np + 8 * (j / 2) + r) * (H + 8) + 16 * kb + 8 * (j % 2));
    thx_mma_bf16_16816(c[0], a[kb], b);
    thx_mma_bf16_16816(c[1], a[kb], b + 2);
  }
}

// Pass G with the bias's stage: the chunk's dL at keys k0 .. k0 + 7 (half the block's) added into the
// bias's gradient four keys at a time (vector reductions; flash_bias_vectors says when they are
// aligned), consecutive threads along a row's keys. Each element still takes one addition a block.
// dbias: the gradient at the example's and the chunk's first row; bh, br: its head and row strides.
template <int H>
THX_DEVICE void add_bias(const FlashArgs<thx_bf16>& f, const Shared& s, float* dbias, int bh, int br, int k0, int r0) {
  for (int e = threadIdx.x; e < H * kFlashRows * 2; e += blockDim.x) {
    const int head = e / (kFlashRows * 2), row = e / 2 % kFlashRows, q = e % 2, key = k0 + 4 * q;
    if (head >= f.h || r0 + row >= f.n || key >= f.m) continue;
    const float* v = s.bias + flash_bias_slot(head, 4 * q, row);
    const int k = flash_bias_slot(0, 1, 0);  // (keys this far apart)
    thx_atomic_add4(dbias + head * bh + row * br + key, v[0], v[k], v[2 * k], v[3 * k]);
  }
}

// Pass G, per key (each warp one key of each half of the block's): W and dL = W (dW - D) staged
// ([head][key][row], bf16, element by element), dL added into the bias's gradient; a barrier. With
// the bias's stage, dL goes there in fp32 instead, and add_bias adds each half between barriers.
// 16 heads at a time (key_weights's steps, the heads of one mixing's pair of output tiles): fewer
// registers beside the dK and dV sums.
template <int H>
THX_DEVICE void chunk_weights(const FlashBackArgs<thx_bf16>& a, const Shared& s, int bb, int kb0, int r0,
                              const Lane& L) {
  const FlashArgs<thx_bf16>& f = a.f;
  // (offsets within the chunk's rows 32-bit, flash_back_unsupported)
  float* dbias = a.dbias ? a.dbias + bb * a.dbias_stride[0] + r0 * a.dbias_stride[2] : nullptr;
  const int bh = int(a.dbias_stride[1]), br = int(a.dbias_stride[2]), bk = int(a.dbias_stride[3]);
  static_assert(WARPS == 8, "a warp takes one key of each half of the block's 16");
  for (int half = 0; half < 2; ++half) {
    const int kl = L.w + WARPS * half, key = kb0 + kl;
    uint32_t aj[H / 16][4], adu[H / 16][4];
    flash::stage_rows_a<H>(s.j, kl, L, aj);
    flash::stage_rows_a<H>(s.du, kl, L, adu);
    for (int np = 0; np < H / 16; ++np) {
      float c[2][4], e[2][4];
      mix_pair<H>(aj, s.pl_t, L, np, c);
      flash::bias_and_mask<2>(f, bb, r0, key, 2 * np, L, c);
      mix_pair<H>(adu, s.pw, L, np, e);
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const ThxBytes8 lse = flash::row_pair<H>(s.lse, L, 2 * np + nt, half),
                          dd = flash::row_pair<H>(s.d, L, 2 * np + nt, half);
#pragma unroll
          for (int y = 0; y < 2; ++y) {
            const int x = 2 * half + y, head = head_at(L, 2 * np + nt, x), row = L.g + 8 * half;
            const int at = flash_back_stage_at(head, kl, row);
            const float w = c[nt][x] == -thx_inf() ? 0.f : thx_exp_fast(c[nt][x] - thx_bits_to_float(lse.w[y]));
            const float dl = w * (e[nt][x] - thx_bits_to_float(dd.w[y]));
            s.w[at] = thx_from_float<thx_bf16>(w);
            s.dl[at] = thx_from_float<thx_bf16>(dl);
            if (!dbias || head >= f.h || key >= f.m || r0 + row >= f.n) continue;
            if (s.bias)
              s.bias[flash_bias_slot(head, L.w, row)] = dl;
            else
              thx_atomic_add(dbias + (head * bh + row * br + key * bk), dl);
          }
        }
    }
    if (s.bias) {
      __syncthreads();  // the half's dL is staged (after the second, every stage the projections read)
      add_bias<H>(f, s, dbias, bh, br, kb0 + WARPS * half, r0);
      if (half == 0) __syncthreads();  // before the second half overwrites it
    }
  }
  if (!s.bias) __syncthreads();
}

// The projections' 16 x 8 output tiles: J dL^T [h_k][h] (with P_l), then W dU^T [h][h_v] (with
// P_w), H / 16 x H / 8 tiles each, tile x to warp x % WARPS; their sums in shared memory (registers
// spilled: the dK and dV sums take them).
struct ProjectionTile {
  bool left;
  int mt, nt;
};
template <int H>
THX_DEVICE ProjectionTile projection_tile(const FlashArgs<thx_bf16>& f, int x) {
  constexpr int T = H / 16 * (H / 8);
  const bool left = f.P_l && x < T;
  const int y = left || !f.P_l ? x : x - T;
  return {left, y / (H / 8), y % (H / 8)};
}
THX_DEVICE int projection_tile_count(const FlashArgs<thx_bf16>& f, int H) {
  return ((f.P_l ? 1 : 0) + (f.P_w ? 1 : 0)) * (H / 16) * (H / 8);
}

// Pass G: the sums += the chunk's J dL^T and W dU^T over its 16 keys x 16 rows: A = J or W [16 heads,
// rows] (ldmatrix from the stage at each key: matrix j of lane 8 j + r, heads 8 (j % 2) + r, rows
// 8 (j / 2) on), B = dL or dU [8 heads, rows] (the same, two matrices; flash_back_stage_at).
template <int H>
THX_DEVICE void chunk_projections(const FlashBackArgs<thx_bf16>& a, const Shared& s, const Lane& L) {
  const int tiles = projection_tile_count(a.f, H), r = L.l % 8, j = L.l / 8;
  for (int x = L.w; x < tiles; x += WARPS) {
    const ProjectionTile t = projection_tile<H>(a.f, x);
    float* acc = s.acc + (x * 32 + L.l) * 4;
    float c[4] = {acc[0], acc[1], acc[2], acc[3]};
    const thx_bf16 *A = (t.left ? s.j : s.w) + flash_back_stage_at(16 * t.mt + 8 * (j % 2) + r, 0, 0);
    const thx_bf16* B = (t.left ? s.dl : s.du) + flash_back_stage_at(8 * t.nt + r, 0, 0);
    for (int kl = 0; kl < 16; ++kl) {
      uint32_t af[4], bf[2];
      thx_ldmatrix<4, false>(af, A + flash_back_stage_at(0, kl, 8 * (j / 2)));
      thx_ldmatrix<2, false>(bf, B + flash_back_stage_at(0, kl, 8 * (j % 2)));
      thx_mma_bf16_16816(c, af, bf);
    }
    acc[0] = c[0], acc[1] = c[1], acc[2] = c[2], acc[3] = c[3];
  }
}

// Pass G, per key: U^T = P_w^T W^T into the stage dU and dJ^T = P_l dL^T into the stage J (their B
// operands by ldmatrix.trans from the stages W and dL); a barrier.
template <int H>
THX_DEVICE void chunk_mixed(const Shared& s, const Lane& L) {
  for (int kl = L.w; kl < 16; kl += WARPS) {
    uint32_t b[H / 16][2][2];
    float u[H / 16][2][4];
    flash::staged_b<H>(s.w, kl, L, b);
    flash::mix_t<H>(s.pw_t, b, L, u);
    flash::store_heads<H, true>(s.du, kl, L, u);
    flash::staged_b<H>(s.dl, kl, L, b);
    flash::mix_t<H>(s.pl, b, L, u);
    flash::store_heads<H, true>(s.j, kl, L, u);
  }
  __syncthreads();
}

// acc[e] += A B over the chunk's 16 rows: A = [16 keys, 16 rows] by ldmatrix from a stage at one
// head (flash_back_stage_at; matrix j of lane 8 j + r: keys 8 (j % 2) + r, rows 8 (j / 2) on), B =
// Y [16 rows, d] in shared memory (at the head's first column: flash_row_at, ys a row) by
// ldmatrix.trans, 8 columns a tile.
template <int D>
THX_DEVICE void keys_by_rows(const thx_bf16* S, const thx_bf16* Y, int ys, int d, const Lane& L,
                             float (&acc)[D / 8][4]) {
  const int r = L.l % 8, j = L.l / 8;
  const thx_bf16* y = Y + flash_row_at(8 * (j % 2) + r, 0, ys);
  uint32_t af[4];
  thx_ldmatrix<4, false>(af, S + flash_back_stage_at(0, 8 * (j % 2) + r, 8 * (j / 2)));
#pragma unroll
  for (int e = 0; e < D / 8; ++e) {
    if (8 * e >= d) continue;
    uint32_t bf[2];
    thx_ldmatrix<2, true>(bf, y + 8 * e);
    thx_mma_bf16_16816(acc[e], af, bf);
  }
}

// A head's [16 rows, d] of dQ (the product's fragments c: a lane's columns 2t, 2t + 1 of rows g and
// g + 8) added into dQ (rows `rs` apart, the first `rows` of them there) as vector reductions of four
// columns: lanes t and t ^ 1 swap halves, so that an even t holds columns 2t to 2t + 3 of row g and
// an odd one columns 2t - 2 to 2t + 1 of row g + 8. Each element still takes one addition a block.
template <int D>
THX_DEVICE void add_dq(float* dQ, int rs, int rows, int d, const Lane& L, const float (&c)[D / 8][4]) {
  const bool odd = L.t & 1;
  const int row = L.g + (odd ? 8 : 0), col = 2 * (L.t & 2);
#pragma unroll
  for (int e = 0; e < D / 8; ++e) {
    const float s0 = thx_shfl_xor(odd ? c[e][0] : c[e][2], 1), s1 = thx_shfl_xor(odd ? c[e][1] : c[e][3], 1);
    if (8 * e >= d || row >= rows) continue;
    float* p = dQ + row * rs + 8 * e + col;
    if (odd)
      thx_atomic_add4(p, s0, s1, c[e][2], c[e][3]);
    else
      thx_atomic_add4(p, c[e][0], c[e][1], s0, s1);
  }
}

// Pass G, per head (warp w's: w, w + 8, ...): dV += U^T dO, dK += dJ^T Q in registers, and the
// chunk's dQ = dJ K added into dQ.
template <int H, int D>
THX_DEVICE void chunk_grads(const FlashBackArgs<thx_bf16>& a, const Shared& s, int bb, int kb0, int r0, const Lane& L,
                            float (&dk)[H / 8][D / 8][4], float (&dv)[H / 8][D / 8][4]) {
  const FlashArgs<thx_bf16>& f = a.f;
#pragma unroll
  for (int hi = 0; hi < H / 8; ++hi) {
    const int head = L.w + WARPS * hi;
    if (head < f.h_v) keys_by_rows<D>(s.du + head * HS, s.dout + head * f.d_v, s.os, f.d_v, L, dv[hi]);
    if (head >= f.h_k) continue;
    keys_by_rows<D>(s.j + head * HS, s.q + head * f.d_k, s.qs, f.d_k, L, dk[hi]);
    float c[D / 8][4];
#pragma unroll
    for (int e = 0; e < D / 8; ++e) c[e][0] = c[e][1] = c[e][2] = c[e][3] = 0.f;
    flash::rows_by_keys<D>(s.j + head * HS, a.Kt + (int64_t(bb) * f.h_k + head) * f.d_k * f.m8, f.m8, kb0, f.d_k,
                           L, c);
    add_dq<D>(a.dQ + (int64_t(bb) * f.n + r0) * f.h_k * f.d_k + head * f.d_k, f.h_k * f.d_k, f.n - r0, f.d_k, L, c);
  }
}

// The block's dK and dV (its keys, rounded to bf16) and its partial sums of the projections' gradients.
template <int H, int D>
THX_DEVICE void store_grads(const FlashBackArgs<thx_bf16>& a, int bb, int kb0, const Lane& L,
                            const float (&dk)[H / 8][D / 8][4], const float (&dv)[H / 8][D / 8][4],
                            const Shared& s) {
  const FlashArgs<thx_bf16>& f = a.f;
#pragma unroll
  for (int hi = 0; hi < H / 8; ++hi)
#pragma unroll
    for (int e = 0; e < D / 8; ++e)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int head = L.w + WARPS * hi, key = kb0 + L.g + 8 * (x >> 1), col = 8 * e + 2 * L.t + (x & 1);
        if (key >= f.m) continue;
        if (head < f.h_v && col < f.d_v)
          a.dV[((int64_t(bb) * f.m + key) * f.h_v + head) * f.d_v + col] = thx_from_float<thx_bf16>(dv[hi][e][x]);
        if (head < f.h_k && col < f.d_k)
          a.dK[((int64_t(bb) * f.m + key) * f.h_k + head) * f.d_k + col] = thx_from_float<thx_bf16>(dk[hi][e][x]);
      }
  if (!a.dP) return;
  const int64_t sums = rows_partial_sums(f.h_k, f.h, f.h_v, f.P_l, f.P_w), nl = f.P_l ? int64_t(f.h_k) * f.h : 0;
  float* out = a.dP + (int64_t(blockIdx.y) * gridDim.x + blockIdx.x) * sums;
  const int tiles = projection_tile_count(f, H);
  for (int x = L.w; x < tiles; x += WARPS) {
    const ProjectionTile t = projection_tile<H>(f, x);
    const int rows = t.left ? f.h_k : f.h, cols = t.left ? f.h : f.h_v;
    for (int e = 0; e < 4; ++e) {
      const int row = 16 * t.mt + L.g + 8 * (e >> 1), col = 8 * t.nt + 2 * L.t + (e & 1);
      if (row < rows && col < cols) out[(t.left ? 0 : nl) + row * cols + col] = s.acc[(x * 32 + L.l) * 4 + e];
    }
  }
}

// The fewest blocks a multiprocessor must hold: two (128 registers a thread) where nvcc 13 spills
// none and shared memory allows it, pass G at bucket (16, 16) (144 registers, one block, without
// the bound); else one.
constexpr int flash_back_min_blocks(int H, int D) { return H == 16 && D == 16 ? 2 : 1; }

// G false: pass D; true: pass G. Grid: x the blocks of 16 keys, y the examples.
template <int H, int D, bool G>
__global__ void THX_LAUNCH_BOUNDS(kFlashBackThreads, flash_back_min_blocks(H, D))
    flash_backward_kernel(FlashBackArgs<thx_bf16> a) {
  const Shared s = shared_layout<H, D, G>(a);
  const Lane L = lane_of();
  const int bb = blockIdx.y, kb0 = 16 * int(blockIdx.x), chunks = (a.f.n + kFlashRows - 1) / kFlashRows;
  constexpr bool staged = flash_back_keys_staged(D);
  if (staged && L.w < a.f.h_k + a.f.h_v) {  // the first chunk's first product's keys
    const StagedKeys k = staged_keys(a.f, s, L);
    copy_product_keys(a, bb, kb0, L.w, k.at, k.xs, L);
  }
  load_mixings<H>(a.f, s);
  float dk[H / 8][D / 8][4], dv[H / 8][D / 8][4];
#pragma unroll
  for (int hi = 0; hi < H / 8; ++hi)
#pragma unroll
    for (int e = 0; e < D / 8; ++e)
#pragma unroll
      for (int x = 0; x < 4; ++x) dk[hi][e][x] = dv[hi][e][x] = 0.f;
  if (G)
    for (int e = threadIdx.x; e < 2 * (H / 16) * (H / 8) * 128; e += blockDim.x) s.acc[e] = 0.f;  // (a barrier follows)
  for (int c = 0; c < chunks; ++c) {
    const int r0 = kFlashRows * int((c + blockIdx.x + blockIdx.y) % unsigned(chunks));
    load_chunk<H, G>(a, s, bb, r0);
    if constexpr (staged) chunk_products_staged<H>(a, s, bb, kb0, c + 1 < chunks, L);
    else chunk_products<H>(a, s, bb, kb0, L);
    if constexpr (!G) {
      chunk_d<H>(a, s, bb, kb0, r0, L);
    } else {
      chunk_weights<H>(a, s, bb, kb0, r0, L);
      chunk_projections<H>(a, s, L);
      __syncthreads();  // the stages J and dU are read: U and dJ go in their place
      chunk_mixed<H>(s, L);
      chunk_grads<H, D>(a, s, bb, kb0, r0, L, dk, dv);
      __syncthreads();  // before the next chunk's rows and products overwrite what was read
    }
  }
  if constexpr (G) store_grads<H, D>(a, bb, kb0, L, dk, dv, s);
}

}  // namespace flash_back

// The flash backward for bucket (H, D) (flash_bucket's, D for max(d_k, d_v)), pass D or pass G.
template <bool G>
auto flash_backward_kernel_for(int H, int D) {
  using K = void (*)(FlashBackArgs<thx_bf16>);
  if (H == 16)
    return D == 16   ? K(flash_back::flash_backward_kernel<16, 16, G>)
           : D == 32 ? K(flash_back::flash_backward_kernel<16, 32, G>)
                     : K(flash_back::flash_backward_kernel<16, 64, G>);
  if (H == 32)
    return D == 16 ? K(flash_back::flash_backward_kernel<32, 16, G>) : K(flash_back::flash_backward_kernel<32, 32, G>);
  return K(flash_back::flash_backward_kernel<48, 16, G>);
}

}  // namespace thx::cuda_th
