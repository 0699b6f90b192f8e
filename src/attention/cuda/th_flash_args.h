// th_flash_args.h: what the flash-style talking-heads forward (th_flash_kernels.cuh) takes, in plain
// C++ so that the host code preparing a launch (attention/tiled.cpp) needs no CUDA header.
//
// The kernel is the tiled path's forward in one launch, nothing of size [b,h,n,m] in memory: a
// block takes 16 query rows of one example with all heads and makes two passes over the keys,
// 64 at a time (16 a warp): J = Q K^T per head, the mixing by P_l, bias and mask, and the rows'
// softmax statistics (pass 1, to LSE); then the same logits again, W = exp(L - LSE), the mixing by
// P_w and O += U V (pass 2). Every product runs on tensor cores (mma.m16n8k16, bf16 operands, fp32
// sums); the softmax and its statistics stay fp32. It keeps the rows' LSE [b,h,n] for the tiled
// path's backward (the row kernels'), which recomputes everything else. bf16 only.
#pragma once
#include <cstdint>

#include "common/bf16_bits.h"
#include "common/host_device.h"
#if !defined(__CUDA__)  // (not in clang's PTX check, which has no C++ library: flash_bucket, flash_unsupported)
#include <algorithm>
#include <string>
#endif

namespace thx::cuda_th {

template <typename T>
struct FlashArgs {
  const T *Q = nullptr, *K = nullptr;  // [b,n,h_k,d_k], [b,m,h_k,d_k], contiguous, 16-byte aligned
  const T* Vt = nullptr;               // V transposed, [b,h_v,d_v,m8], zero from key m to m8
  const float *P_l = nullptr, *P_w = nullptr;  // [h_k,h], [h,h_v] contiguous; null: the identity
  const float* bias = nullptr;         // read at bias_stride over [b,h,n,m] (0 where it broadcasts)
  int64_t bias_stride[4] = {0, 0, 0, 0};
  const uint8_t* mask = nullptr;       // nonzero: attend; read at mask_stride
  int64_t mask_stride[4] = {0, 0, 0, 0};
  float* lse = nullptr;                // [b,h,n]: -inf for a row with no key
  T* O = nullptr;                      // [b,n,h_v,d_v]
  int b = 0, n = 0, m = 0, m8 = 0, h_k = 0, h = 0, h_v = 0, d_k = 0, d_v = 0;
};

// The block: 16 query rows, 4 warps of 16 keys each (a tile of 64 keys). Each warp stages its keys'
// J, then their U, as bf16 [head][key][row], 512 bytes a head and no padding: a key's two 16-byte
// halves of rows (0-7, 8-15) are slots 2 (key % 4) and + 1 of its 128-byte line (four keys), and
// the slots of head h are exchanged by XOR with h % 8 and with key / 4 % 2. Then ldmatrix's eight
// rows (eight heads at one key, or eight keys at one head) and the lanes' word stores (keys or
// heads g at rows 2t) fall on different banks; padded rows (24 elements a key, 8 more a head) did
// the same in 1.5x the memory, which held one block a multiprocessor at 24 heads (130 KiB).
constexpr int kFlashRows = 16, kFlashWarps = 4, kFlashThreads = 32 * kFlashWarps;
constexpr int kFlashStageHead = 16 * 16;  // a head's elements in a warp's stage
THX_HOST_DEVICE
inline int flash_stage_at(int head, int key, int row) {
  const int slot = (2 * (key % 4) + row / 8) ^ (head % 8) ^ (key / 4 % 2);
  return head * kFlashStageHead + key / 4 * 64 + 8 * slot + row % 8;
}
// The rows' LSE (and the backward's D) [16 rows][H + 8] fp32: a lane reads its heads 2t, 2t + 1 of
// row g at once (8 bytes), and rows H + 8 words apart (8 or 24 modulo the 32 banks at 16, 32, 48)
// put each half warp's reads on every bank once. Rows of H words took four ways (eight at 32).
constexpr int kFlashLsePad = 8;

// The block's rows of Q (and the backward's of dO), [16 rows][width] bf16 in shared memory: rows
// of flash_row_stride(width) elements, 32 or 96 bytes past a multiple of 128, so that the lanes'
// 8-byte loads of four rows (rows g, 8 t bytes in) take each bank once a half warp; and row r
// starting 16 bytes later where r / 4 is odd (flash_row_at), so that ldmatrix's eight rows at one
// column (the backward's keys_by_rows: rows r and r + 4 a multiple of 128 bytes apart) fall on
// eight 16-byte groups. (Rows of width + 16 from their first place took two ways there, and four or
// eight in both where width / 16 is odd.) width: a multiple of 16.
THX_HOST_DEVICE
inline int flash_row_stride(int width) { return width + 16 * (1 + width / 16 % 2); }
THX_HOST_DEVICE
inline int flash_row_at(int row, int col, int stride) { return row * stride + 8 * (row / 4 % 2) + col; }

// The forward's staged keys of K at one head, [16 keys][d_k] bf16 (two a warp: the next head's
// copied in while this one's are read): keys flash_key_stride(d_k) elements apart, 32 or 96 bytes
// past a multiple of 128, so that the lanes' 8-byte reads of keys g and g + 8 at 4 t (the A
// operand of key_row_product) take each bank once a half warp. (Keys d_k apart took two ways at
// d_k = 32 and four at 64.)
THX_HOST_DEVICE
inline int flash_key_stride(int d_k) { return d_k / 16 % 2 ? d_k : d_k + 16; }

// Where the block's shared memory is, in bytes from its start, each a multiple of 16: Q's 16 rows
// (flash_row_stride), P_l^T and P_w^T as bf16 [out][in] with rows of H + 8 (the identity where
// absent), the warps' stages, the rows' LSE [16][H + 8] (fp32), and the warps' staged keys of K
// (two each, flash_key_stride). The warps' statistics, folded at the end of pass 1 ([warps][16][H]
// twice, fp32), take the stages' place.
// With DV (the bucket's width) where flash_values_staged(H), the warps' staged values follow: V^T
// of two heads a warp over a tile's 64 keys, [DV][kFlashValueStride] bf16 each.
struct FlashLayout {
  int64_t q, pl_t, pw_t, stage, lse, k, v, bytes;
  int q_stride, k_stride;
};
// The forward's staged values: rows of V^T 72 elements (36 words) apart, so that the lanes' word
// reads of rows g at keys 2 t (the B operand of O += U V) take each bank once (4 g + t).
constexpr int kFlashValueStride = 64 + 8;
// Where the forward stages V (two heads a warp, a tile ahead of its O products): the 48-head bucket,
// which holds one block a multiprocessor either way (T5-base's 48 heads of 16: 18 KiB a block). At
// 24 and 12 heads two heads of 32 and 64 a warp would cost the forward its second block.
THX_HOST_DEVICE
constexpr bool flash_values_staged(int H) { return H == 48; }
THX_HOST_DEVICE
inline FlashLayout flash_layout(int H, int h_k, int d_k, int DV = 0) {
  FlashLayout L;
  L.q_stride = flash_row_stride(h_k * d_k), L.k_stride = flash_key_stride(d_k);
  auto up = [](int64_t x) { return (x + 15) / 16 * 16; };
  L.q = 0;
  L.pl_t = up(int64_t(kFlashRows) * L.q_stride * 2);
  L.pw_t = L.pl_t + up(int64_t(H) * (H + 8) * 2);
  L.stage = L.pw_t + up(int64_t(H) * (H + 8) * 2);
  L.lse = L.stage + up(int64_t(kFlashWarps) * H * kFlashStageHead * 2);
  L.k = L.lse + up(int64_t(kFlashRows) * (H + kFlashLsePad) * 4);
  L.v = L.k + up(int64_t(kFlashWarps) * 2 * 16 * L.k_stride * 2);
  L.bytes = L.v + (flash_values_staged(H) ? up(int64_t(kFlashWarps) * 2 * DV * kFlashValueStride * 2) : 0);
  return L;
}

// The flash backward (th_flash_backward.cuh): a block owns 16 keys of one example and takes the
// query rows 16 at a time (a chunk), 8 warps; two launches of one kernel: pass D adds each chunk's
// share of D = sum over keys of W dW into D [b,h,n] (fp32 atomics), pass G makes the gradients:
// dK and dV of its keys in registers (stored once, rounded to T), dQ by fp32 atomics per chunk, the
// projections' gradients per block (partial sums), the bias's by fp32 atomics.
template <typename T>
struct FlashBackArgs {
  FlashArgs<T> f;                  // Q, K, P_l, P_w, bias, mask, lse and the sizes (Vt and O unused)
  const T* V = nullptr;            // [b,m,h_v,d_v]
  const T* dO = nullptr;           // [b,n,h_v,d_v]
  const T* Kt = nullptr;           // K transposed, [b,h_k,d_k,m8], zero from key m to m8
  float* D = nullptr;              // [b,h,n]: pass D adds into it (zeroed), pass G reads it
  float* dQ = nullptr;             // [b,n,h_k,d_k], zeroed: the blocks add into it
  T *dK = nullptr, *dV = nullptr;  // [b,m,h_k,d_k], [b,m,h_v,d_v]: each block stores its keys
  float* dbias = nullptr;          // zeroed, added at dbias_stride over [b,h,n,m]; or null
  int64_t dbias_stride[4] = {0, 0, 0, 0};
  float* dP = nullptr;             // [blocks][dP_l (h_k h, with P_l), dP_w (h h_v, with P_w)], x fastest
  int bias_staged = 0;             // 1: dbias's additions staged in fp32 and made four keys at a time
};
constexpr int kFlashBackWarps = 8, kFlashBackThreads = 32 * kFlashBackWarps;
// Its stages [head][key][row], one of each for the block: a key's 16 rows, a head's 16 keys then 8
// (heads 16 bytes off the banks' 128-byte period), and a key's two 16-byte halves of rows (0-7,
// 8-15) exchanged on keys 4-7 of every 8. Then ldmatrix's eight rows, eight heads at one key or
// eight keys at one head, fall on eight 16-byte groups, and a warp's word stores (keys or heads g at
// rows 2t) on 32 banks. (Keys k and k + 4 are 128 bytes apart: unexchanged, they shared banks.)
constexpr int kFlashBackKeyStride = 16, kFlashBackHeadStride = 16 * kFlashBackKeyStride + 8;
THX_HOST_DEVICE
inline int flash_back_stage_at(int head, int key, int row) {
  return head * kFlashBackHeadStride + key * kFlashBackKeyStride + 8 * ((row / 8) ^ (key / 4 % 2)) + row % 8;
}
// The bias's stage, [head][8 keys][16 rows] fp32, heads 8 x 16 + 4 words apart: a warp's stores of
// its key (rows g, heads 2t + c) fall on bank 8t + g + a constant, every bank once. ([head][row][key]
// took eight ways.)
constexpr int kFlashBiasHeadStride = 8 * 16 + 4;
// Where the stage holds the dL of head, key (0-7 within the half block) and row.
THX_HOST_DEVICE
inline int flash_bias_slot(int head, int key, int row) { return head * kFlashBiasHeadStride + key * 16 + row; }

// Where the backward's shared memory is: the chunk's Q and dO rows (bf16, flash_row_stride of h_k
// d_k and of h_v d_v), the four mixings' copies (P_l^T, P_l, P_w^T, P_w as bf16 [out][in], rows of
// H + 8), the stages J (then dJ), dU (then U), W and dL, the chunk's LSE and D [16][H + 8] (fp32), and
// the projections' gradients' partial sums (2 x H / 16 x H / 8 tiles of 16 x 8, fp32).
// Pass D folds the warps' shares of D ([warps][16][H] fp32) where W and dL are. With bias_stage,
// the chunk's dL for the bias's gradient at half the block's keys, [H][8 keys][16 rows] fp32, follows.
// With keys_stage (flash_back_keys_staged), the warps' staged keys of K and V (two heads each,
// [16 keys][flash_key_stride(max(d_k, d_v))], bf16) come last.
struct FlashBackLayout {
  int64_t q, dout, pl_t, pl, pw_t, pw, j, du, w, dl, lse, d, acc, bias, keys, bytes;
  int q_stride, o_stride, k_stride;
};
THX_HOST_DEVICE
inline FlashBackLayout flash_back_layout(int H, int h_k, int d_k, int h_v, int d_v, bool bias_stage = false,
                                         bool keys_stage = false) {
  FlashBackLayout L;
  L.q_stride = flash_row_stride(h_k * d_k), L.o_stride = flash_row_stride(h_v * d_v);
  L.k_stride = flash_key_stride(d_k > d_v ? d_k : d_v);
  int64_t at = 0;
  auto take = [&at](int64_t bytes) {
    const int64_t here = at;
    at += (bytes + 15) / 16 * 16;
    return here;
  };
  const int64_t matrix = int64_t(H) * (H + 8) * 2, stage = int64_t(H) * kFlashBackHeadStride * 2;
  L.q = take(int64_t(kFlashRows) * L.q_stride * 2), L.dout = take(int64_t(kFlashRows) * L.o_stride * 2);
  L.pl_t = take(matrix), L.pl = take(matrix), L.pw_t = take(matrix), L.pw = take(matrix);
  L.j = take(stage), L.du = take(stage), L.w = take(stage), L.dl = take(stage);
  const int64_t rows = int64_t(kFlashRows) * (H + kFlashLsePad) * 4;
  L.lse = take(rows), L.d = take(rows);
  L.acc = take(2 * int64_t(H / 16) * (H / 8) * 128 * 4);
  L.bias = take(bias_stage ? int64_t(H) * kFlashBiasHeadStride * 4 : 0);
  L.keys = take(keys_stage ? int64_t(kFlashBackWarps) * 2 * 16 * L.k_stride * 2 : 0);
  L.bytes = at;
  return L;
}
// Whether the backward's bucket of width D stages its products' keys of K and V a head ahead
// (copy_keys), as the forward does K's: where it costs no pass a block a multiprocessor. At D = 64
// (T5-base's 12 heads of 64: 5 KiB a warp, 40 KiB a block) pass D would hold one block, not two;
// there the block's K and V (48 KB at T5's width) stay in L1 beside its 90 KiB of shared memory.
THX_HOST_DEVICE
constexpr bool flash_back_keys_staged(int D) { return D <= 32; }

#if !defined(__CUDA__)
// The buckets built: heads H (h_k, h, h_v all at most H) and the output's width DV (d_v at most
// DV): each warp keeps its share of O, H / 4 heads x DV columns of 16 rows, in registers (at most
// 128 a thread). T5-base's widths: 12 heads of 64 (16, 64), 24 of 32 (32, 32), 48 of 16 (48, 16).
// {0, 0} where none holds the problem.
struct FlashBucket {
  int H = 0, DV = 0;
};
inline FlashBucket flash_bucket(int heads, int d_v) {
  for (int H : {16, 32, 48})
    if (heads <= H)
      for (int DV : {16, 32, 64})
        if (d_v <= DV && H / 4 * DV / 2 <= 128) return {H, DV};
  return {};
}

// Why the flash forward does not take a bf16 problem, or "": heads past 48 or a width past the
// buckets, d_k not a multiple of 16 or d_v of 8, Q, K or O not 16-byte aligned, more shared
// memory than `limit`, more than 65,535 blocks of rows, offsets within an example's Q, K, V or O
// past 32 bits, or within a block's rows of the bias or mask (from the rows' start: (h - 1) x head
// stride + 15 x row stride + (m - 1) x key stride).
inline std::string flash_unsupported(int h_k, int h, int h_v, int d_k, int d_v, int64_t n, int64_t m,
                                     const int64_t (&bias)[4], const int64_t (&mask)[4], bool aligned,
                                     int64_t limit) {
  const FlashBucket B = flash_bucket(std::max({h_k, h, h_v}), d_v);
  if (B.H == 0) return "more than 48 heads, or heads and widths past the flash buckets";
  if (d_k % 16 != 0 || d_v % 8 != 0) return "d_k not a multiple of 16 or d_v of 8";
  if (!aligned) return "Q, K or O not 16-byte aligned";
  if (flash_layout(B.H, h_k, d_k, B.DV).bytes > limit) return "more shared memory than the device allows";
  if ((n + kFlashRows - 1) / kFlashRows > 65535) return "more than 65,535 blocks of 16 rows";
  constexpr int64_t kMax = (int64_t{1} << 31) - 1;
  const int64_t m8 = (m + 7) / 8 * 8;
  if (std::max({n * h_k * d_k, m * h_k * d_k, n * h_v * d_v, h_v * d_v * m8}) > kMax)
    return "an example's Q, K, V or O past 32-bit offsets";
  auto fits = [&](const int64_t (&s)[4]) { return (h - 1) * s[1] + 15 * s[2] + (m - 1) * s[3] <= kMax; };
  if (!fits(bias) || !fits(mask)) return "bias or mask offsets past 32 bits";
  return "";
}

// Why the flash backward does not take a bf16 problem, or "": as the forward (with d_v and d_k both
// in the width bucket), offsets within a chunk's rows of the bias's gradient (its strides dbias)
// past 32 bits, d_k and d_v multiples of 16 (each is a product's k there), more shared memory than
// `limit`, or more than 65,535 examples (the grid's y).
inline std::string flash_back_unsupported(int h_k, int h, int h_v, int d_k, int d_v, int64_t b, int64_t n, int64_t m,
                                          const int64_t (&bias)[4], const int64_t (&mask)[4],
                                          const int64_t (&dbias)[4], bool aligned, int64_t limit) {
  const std::string forward =
      flash_unsupported(h_k, h, h_v, d_k, std::max(d_k, d_v), n, m, bias, mask, aligned, int64_t(1) << 40);
  if (!forward.empty()) return forward;
  if ((h - 1) * dbias[1] + 15 * dbias[2] + (m - 1) * dbias[3] > (int64_t{1} << 31) - 1)
    return "bias gradient offsets past 32 bits";
  if (d_v % 16 != 0) return "d_v not a multiple of 16";
  if (int64_t(h_k) * d_k * ((m + 7) / 8 * 8) > (int64_t{1} << 31) - 1) return "an example's K past 32-bit offsets";
  const FlashBucket B = flash_bucket(std::max({h_k, h, h_v}), std::max(d_k, d_v));
  if (flash_back_layout(B.H, h_k, d_k, h_v, d_v, false, flash_back_keys_staged(B.DV)).bytes > limit)
    return "more shared memory than the device allows";
  if (b > 65535) return "more than 65,535 examples";
  return "";
}

// Whether the bias's gradient (strides dbias over [b,h,n,m], m keys) takes the backward's vector
// reductions of four keys: keys contiguous, every other stride and m multiples of four (so that
// four keys from a multiple of four are 16-byte aligned and all inside the gradient or all past m).
// The caller adds: the layout with its stage within the device's shared memory.
inline bool flash_bias_vectors(const int64_t (&dbias)[4], int64_t m) {
  return dbias[3] == 1 && dbias[0] % 4 == 0 && dbias[1] % 4 == 0 && dbias[2] % 4 == 0 && m % 4 == 0;
}
#endif

}  // namespace thx::cuda_th
