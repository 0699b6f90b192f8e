// cuda_primitives.cuh: one use of each primitive thx's CUDA kernels are built from
// (common/cuda_compat.h, common/cuda_mma.h), by every thread of one block of two warps, each
// result written out for cuda_primitives_test.cpp to check against what the PTX ISA defines:
// ldmatrix (.x2, .x4, plain and .trans), stmatrix (.x4, plain and .trans), mma.sync m16n8k16
// with bf16 operands (fragments from registers and from ldmatrix, both ways the kernels load
// them), the warp's butterfly shuffle, 8-byte and word loads, a word stored and read back through
// shared memory, 16-byte copies and zeros, asynchronous copies (cp.async), the vector reduction
// of four floats and the scalar atomic, the high word of a product, exp (and its fast form), log,
// rsqrt, fmax with -inf, and bf16's rounding (one value and two packed). The same code runs on
// the emulator (the CPU test) and, compiled by nvcc (cuda_primitives.cu), on a GPU (the OnCuda
// test): where both pass, the emulator that proves the kernels on the CPU does what the GPU does,
// primitive by primitive.
#pragma once
#include "common/cuda_mma.h"

namespace thx::test::primitives {

constexpr int kThreads = 64;    // two warps
constexpr int kLd = 24;         // a shared row: 8 bf16 for a ldmatrix row at column 0, 8 or 16; 48 bytes
constexpr int kTableRows = 64;  // the table ldmatrix reads, kTableRows x kLd bf16
// Per warp, the integer operands staged as the kernels stage theirs, kLd apart: A [16 x 16],
// A^T [16 x 16], B [k 16 x n 8], B^T [8 x 16].
constexpr int kOperandRows = 16 + 16 + 16 + 8;
constexpr int kScratch = (kTableRows + 2 * kOperandRows) * kLd;  // bf16 elements before the words
constexpr int kStmBytes = 2 * 2 * 32 * 16;  // stmatrix's rows: [warp][plain, .trans][32 rows] of 16 bytes
constexpr int kAsyncBytes = kThreads * 16;  // each thread's asynchronous copy
constexpr int kSharedBytes = kScratch * 2 + kThreads * 4 + kStmBytes + kAsyncBytes;
constexpr int kArgs = 8;  // each thread's floats in Args::x

// Each thread's words of Args::out, from these places.
enum Slot : int {
  kLdm2 = 0,      // ldmatrix.x2: 2 words
  kLdm2T = 2,     // .x2.trans: 2
  kLdm4 = 4,      // .x4: 4
  kLdm4T = 8,     // .x4.trans: 4
  kMmaInt = 12,   // D = A B + C (set 0: integers), fragments from global memory: 4 floats' bits
  kMmaRand = 16,  // the same for set 1: random bf16 operands, fp32 C
  kMmaLdm = 20,   // set 0 again, A by .x4 from A, B by .x2.trans from B
  kMmaLdmT = 24,  // and A by .x4.trans from A^T, B by .x2 from B^T
  kShfl = 28,     // thx_shfl_xor by 1, 2, 4, 8, 16: 5
  kLoad8 = 33,    // thx_load8 of the table at 4 * thread: 2
  kWord = 35,     // the next thread's word, stored by thx_store_word, read by thx_load_word
  kUmulhi = 36,   // thx_umulhi(0x9e3779b9 (thread + 1), 0x7fffffff + thread)
  kExp = 37,      // thx_exp(x[0..2]): 3
  kLog = 40,      // thx_log(x[3])
  kRsqrt = 41,    // thx_rsqrt(x[4])
  kSpecial = 42,  // thx_exp(-inf), thx_fmax(-inf, x[5])
  kBf16 = 44,     // thx_from_float<thx_bf16>(x[6]) in the low half, x[7]'s in the high
  kZeroed = 45,   // the thread's word again, after thx_zero16 over every word
  kStm = 46,      // the row this lane addressed, after stmatrix.x4 of the words ldmatrix.x4 gave: 4
  kStmT = 50,     // the same by .trans, of the words ldmatrix.x4.trans gave: 4
  kExpFast = 54,  // thx_exp_fast(x[0..2]): 3
  kPack = 57,     // pack_bf16x2(x[6], x[7])
  kAsync = 58,    // the next thread's 16 bytes of the table (at 8 (thread + 1)), copied by cp.async: 4
  kSlots = 62
};

struct Args {
  const uint16_t* table;  // kTableRows x kLd bf16 bits
  const uint16_t* a;      // [set 2][warp 2][16][16] bf16 bits, row-major
  const uint16_t* b;      // [set][warp][16][8]
  const float* c;         // [set][warp][16][8]
  const float* x;         // [kThreads][kArgs]: the math's and the conversions' arguments
  uint32_t* out;          // [kThreads][kSlots]
  float* sums;            // [20], zeros: 4 groups of 4 (vector reductions; 16-byte aligned), then 4
};

// The table row and column lane l of warp w gives ldmatrix: distinct rows, three columns.
THX_DEVICE int table_row(int w, int l) { return (5 * l + 3 + 16 * w) % kTableRows; }
THX_DEVICE int table_column(int w, int l) { return 8 * ((l / 8 + l % 8 + w) % 3); }

THX_DEVICE uint32_t bf16_pair(const uint16_t* p, int lo, int hi) { return uint32_t(p[lo]) | uint32_t(p[hi]) << 16; }

// Lane l's fragments of A [16][16], B [16][8] and C [16][8] as PTX lays them out (g = l / 4, t = l % 4).
THX_DEVICE void fragments(const uint16_t* A, const uint16_t* B, const float* C, int l, uint32_t* fa, uint32_t* fb,
                          float* d) {
  const int g = l / 4, t = l % 4;
  auto a = [&](int row, int k) { return bf16_pair(A, row * 16 + k, row * 16 + k + 1); };
  auto b = [&](int k, int n) { return bf16_pair(B, k * 8 + n, (k + 1) * 8 + n); };
  fa[0] = a(g, 2 * t), fa[1] = a(g + 8, 2 * t), fa[2] = a(g, 2 * t + 8), fa[3] = a(g + 8, 2 * t + 8);
  fb[0] = b(2 * t, g), fb[1] = b(2 * t + 8, g);
  d[0] = C[g * 8 + 2 * t], d[1] = C[g * 8 + 2 * t + 1];
  d[2] = C[(g + 8) * 8 + 2 * t], d[3] = C[(g + 8) * 8 + 2 * t + 1];
}

THX_DEVICE void put_floats(uint32_t* out, const float* d) {
  for (int x = 0; x < 4; ++x) out[x] = thx_float_to_bits(d[x]);
}

// Set 0's operands into the warp's part of shared memory: A, A^T, B, B^T.
THX_DEVICE void stage_operands(const Args& a, uint16_t* s, int w, int l) {
  const uint16_t *A = a.a + w * 256, *B = a.b + w * 128;
  for (int e = l; e < 256; e += 32) s[(e / 16) * kLd + e % 16] = A[e], s[(16 + e % 16) * kLd + e / 16] = A[e];
  for (int e = l; e < 128; e += 32) s[(32 + e / 8) * kLd + e % 8] = B[e], s[(48 + e % 8) * kLd + e / 8] = B[e];
}

THX_DEVICE void load_matrices(const uint16_t* table, int w, int l, uint32_t* out) {
  const uint16_t* row = table + table_row(w, l) * kLd + table_column(w, l);
  thx_ldmatrix<2, false>(out + kLdm2, row);
  thx_ldmatrix<2, true>(out + kLdm2T, row);
  thx_ldmatrix<4, false>(out + kLdm4, row);
  thx_ldmatrix<4, true>(out + kLdm4T, row);
}

// The stmatrix row of lane l: rows apart from the lane's order, so that a lane's row is not its own.
THX_DEVICE int stm_row(int l) { return (7 * l + 3) % 32; }

// The words ldmatrix.x4 and .x4.trans gave stored back by stmatrix (plain, .trans) to this lane's
// rows of the warp's area; then, after a barrier, the row the lane addressed read back as words.
THX_DEVICE void store_matrices(unsigned char* area, int w, int l, uint32_t* out) {
  unsigned char* plain = area + (2 * w) * 32 * 16 + stm_row(l) * 16;
  unsigned char* trans = area + (2 * w + 1) * 32 * 16 + stm_row(l) * 16;
  thx_stmatrix4<false>(plain, out + kLdm4);
  thx_stmatrix4<true>(trans, out + kLdm4T);
  thx_syncwarp();
  for (int i = 0; i < 4; ++i) {
    out[kStm + i] = thx_load_word(plain + 4 * i);
    out[kStmT + i] = thx_load_word(trans + 4 * i);
  }
}

// The products: set 0 and set 1 from registers, set 0 from the staged operands both ways the kernels
// load them (lane 8 j + r gives row r of matrix j).
THX_DEVICE void products(const Args& a, const uint16_t* s, int w, int l, uint32_t* out) {
  uint32_t fa[4], fb[2];
  float d[4];
  for (int set = 0; set < 2; ++set) {
    const int at = set * 2 + w;
    fragments(a.a + at * 256, a.b + at * 128, a.c + at * 128, l, fa, fb, d);
    thx_mma_bf16_16816(d, fa, fb);
    put_floats(out + (set ? kMmaRand : kMmaInt), d);
  }
  const int j = l / 8, r = l % 8;
  const float* C = a.c + w * 128;
  fragments(a.a + w * 256, a.b + w * 128, C, l, fa, fb, d);  // d = C's fragment
  thx_ldmatrix<4, false>(fa, s + (8 * (j % 2) + r) * kLd + 8 * (j / 2));  // A: k contiguous
  thx_ldmatrix<2, true>(fb, s + (32 + 8 * (j % 2) + r) * kLd);             // B [k][n]: k strided
  thx_mma_bf16_16816(d, fa, fb);
  put_floats(out + kMmaLdm, d);
  fragments(a.a + w * 256, a.b + w * 128, C, l, fa, fb, d);
  thx_ldmatrix<4, true>(fa, s + (16 + 8 * (j / 2) + r) * kLd + 8 * (j % 2));  // A^T [k][m]
  thx_ldmatrix<2, false>(fb, s + (48 + r) * kLd + 8 * (j % 2));              // B^T [n][k]
  thx_mma_bf16_16816(d, fa, fb);
  put_floats(out + kMmaLdmT, d);
}

THX_DEVICE void scalars(const Args& a, int tid, uint32_t* out) {
  for (int i = 0; i < 5; ++i) {
    const int mask = 1 << i;
    out[kShfl + i] = thx_float_to_bits(thx_shfl_xor(float(tid * 3 + 1000 * mask), mask));
  }
  const ThxBytes8 v = thx_load8(a.table + 4 * tid);
  out[kLoad8] = v.w[0], out[kLoad8 + 1] = v.w[1];
  out[kUmulhi] = thx_umulhi(0x9e3779b9u * uint32_t(tid + 1), 0x7fffffffu + uint32_t(tid));
  const float* x = a.x + tid * kArgs;
  for (int i = 0; i < 3; ++i) out[kExp + i] = thx_float_to_bits(thx_exp(x[i]));
  out[kLog] = thx_float_to_bits(thx_log(x[3]));
  out[kRsqrt] = thx_float_to_bits(thx_rsqrt(x[4]));
  out[kSpecial] = thx_float_to_bits(thx_exp(-thx_inf()));
  out[kSpecial + 1] = thx_float_to_bits(thx_fmax(-thx_inf(), x[5]));
  for (int i = 0; i < 3; ++i) out[kExpFast + i] = thx_float_to_bits(thx_exp_fast(x[i]));
  out[kBf16] = uint32_t(thx_from_float<thx_bf16>(x[6]).bits) | uint32_t(thx_from_float<thx_bf16>(x[7]).bits) << 16;
  out[kPack] = cuda_mma::pack_bf16x2(x[6], x[7]);
  thx_atomic_add4(a.sums + 4 * (tid % 4), float(tid), float(2 * tid), float(3 * tid + 1), 0.5f * float(tid));
  thx_atomic_add(a.sums + 16 + tid % 4, float(tid) + 0.25f);
}

// The kernel's body: kThreads threads, kSharedBytes of dynamic shared memory.
THX_DEVICE void probe(const Args& a) {
  THX_SHARED(smem);
  uint16_t* s = reinterpret_cast<uint16_t*>(smem);
  const int tid = int(threadIdx.x), w = tid / 32, l = tid % 32;
  uint32_t* out = a.out + tid * kSlots;
  for (int i = tid; i < kTableRows * kLd / 8; i += kThreads) thx_copy16(s + 8 * i, a.table + 8 * i);
  uint16_t* operands = s + (kTableRows + w * kOperandRows) * kLd;
  stage_operands(a, operands, w, l);
  thx_store_word(s + kScratch + 2 * tid, 0x10001u * uint32_t(tid) + 7u);
  __syncthreads();
  load_matrices(s, w, l, out);
  store_matrices(smem + kScratch * 2 + kThreads * 4, w, l, out);
  products(a, operands, w, l, out);
  out[kWord] = thx_load_word(s + kScratch + 2 * ((tid + 1) % kThreads));
  unsigned char* async = smem + kScratch * 2 + kThreads * 4 + kStmBytes;
  thx_cp_async16(async + 16 * tid, a.table + 8 * tid);  // (global memory to shared)
  thx_cp_async_commit();
  thx_cp_async_wait<0>();
  __syncthreads();
  if (tid < kThreads / 4) thx_zero16(s + kScratch + 8 * tid);  // four threads' words at a time
  __syncthreads();  // (also: every thread's asynchronous copy is seen)
  out[kZeroed] = thx_load_word(s + kScratch + 2 * tid);
  for (int i = 0; i < 4; ++i) out[kAsync + i] = thx_load_word(async + 16 * ((tid + 1) % kThreads) + 4 * i);
  scalars(a, tid, out);
}

}  // namespace thx::test::primitives
