// cuda_mma.h: products of small matrices in shared memory by a whole thread block, on tensor
// cores (bf16 operands, fp32 sums) or as fp32 FMAs, for thx's portable kernels
// (attention/cuda/th_kernels.cuh). The same three compilers as common/cuda_compat.h:
//  - nvcc and clang's PTX check: PTX's mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (sm_80
//    and later), a warp's 16x8 fp32 tile += a 16x16 bf16 tile times a 16x8 bf16 tile.
//  - the emulator: the same instruction, its lanes' operand words exchanged through the warp, the
//    products summed in fp32 in k order.
// Which lane holds what (PTX ISA, "Matrix Fragments for mma.m16n8k16" with .bf16): lane l,
// g = l / 4, t = l % 4. A (16x16, row-major) in four words of two bf16 each (low half: the even
// k): a0 (row g, k 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..). B (16x8) in two:
// b0 (k 2t..2t+1, column g), b1 (k 2t+8.., g). The fp32 accumulator: c0, c1 (row g, columns 2t,
// 2t+1), c2, c3 (row g+8, the same columns). A mistake in this layout gives the same (right)
// results in the emulator and wrong ones on a GPU: CudaPrimitivesOnCuda.* checks it there
// (tests/common/cuda_primitives_test.cpp, against PTX's definitions), as do the kernels' OnCuda tests.
// Whole blocks of bf16 operands in shared memory are loaded by ldmatrix (PTX ISA, "Warp-level
// matrix load instruction: ldmatrix"): lane 8 j + r gives the address of row r of 8x8 matrix j
// (8 consecutive bf16, 16-byte aligned). Plain, for operands whose k is contiguous (the rows run
// along k), lane l receives from each matrix the elements (row l / 4, columns 2 (l % 4) and
// 2 (l % 4) + 1); with .trans, for operands whose k is strided, the elements (row 2 (l % 4),
// column l / 4) and (row 2 (l % 4) + 1, column l / 4). The first is in the low half.
#pragma once
#include "common/cuda_compat.h"

// d[0..3] += A B for one warp's fragments (every lane of the warp taking part).
#if defined(__CUDACC__) || defined(__CUDA__)
THX_DEVICE void thx_mma_bf16_16816(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// r[j] = this lane's word of matrix j < N, plain or transposed (Trans; above); `row` is this
// lane's row address.
template <int N, bool Trans>
THX_DEVICE void thx_ldmatrix(uint32_t* r, const void* row) {
  uint32_t a;
  asm volatile("{ .reg .u64 s; cvta.to.shared.u64 s, %1; cvt.u32.u64 %0, s; }" : "=r"(a) : "l"(row));
  if (N == 2 && Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
  else if (N == 2)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
  else if (Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
// The inverse of thx_ldmatrix<4, Trans> (PTX ISA, "stmatrix", sm_90): lane 8 j + r gives the
// address of row r of 8x8 matrix j, and each lane's word j goes where ldmatrix from the same rows
// would have read it. With .trans, an A operand's fragment [16 keys, 16 heads] lands as rows of
// heads [head][key]. (The clang check compiles it for sm_80, where it is never run.)
template <bool Trans>
THX_DEVICE void thx_stmatrix4(void* row, const uint32_t* r) {
  uint32_t a;
  asm volatile("{ .reg .u64 s; cvta.to.shared.u64 s, %1; cvt.u32.u64 %0, s; }" : "=r"(a) : "l"(row));
  if (Trans)
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(r[0]),
                 "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
  else
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(r[0]), "r"(r[1]),
                 "r"(r[2]), "r"(r[3])
                 : "memory");
}
#else
template <int N, bool Trans>
THX_DEVICE void thx_ldmatrix(uint32_t* r, const void* row) {
  thx::emu::Warp& w = *(*thx::emu::t_block.warps)[threadIdx.x / 32];
  const unsigned lane = threadIdx.x % 32;
  if (lane < 8 * N && (reinterpret_cast<uintptr_t>(row) % 16 != 0 || !thx::emu::in_shared_memory(row, 16))) {
    std::fprintf(stderr, "ldmatrix: row address %p is not 16-byte aligned in shared memory (a GPU faults here)\n", row);
    std::abort();
  }
  if (lane == 0) ++(Trans ? thx::emu::matrix_loads_trans : thx::emu::matrix_loads);
  // Each lane's row is read as the lane arrives, not once all have: ldmatrix.sync orders nothing in
  // memory (and the compiler may move a plain store past it), so a row another lane stored into
  // needs thx_syncwarp between; without one a serialized order shows stale bytes (emu::Order).
  if (lane < 8 * N) std::memcpy(w.rows[lane], row, 16);
  w.barrier.wait();
  for (int j = 0; j < N; ++j) {
    const int l = int(lane);
    auto at = [&](int row_in_matrix, int column) {
      uint16_t v;
      std::memcpy(&v, w.rows[8 * j + row_in_matrix] + 2 * column, 2);
      return uint32_t(v);
    };
    r[j] = Trans ? at(2 * (l % 4), l / 4) | at(2 * (l % 4) + 1, l / 4) << 16
                 : at(l / 4, 2 * (l % 4)) | at(l / 4, 2 * (l % 4) + 1) << 16;
  }
  w.barrier.wait();  // before any lane writes its row again
}
template <bool Trans>
THX_DEVICE void thx_stmatrix4(void* row, const uint32_t* r) {
  thx::emu::Warp& w = *(*thx::emu::t_block.warps)[threadIdx.x / 32];
  const unsigned lane = threadIdx.x % 32;
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0 || !thx::emu::in_shared_memory(row, 16)) {
    std::fprintf(stderr, "stmatrix: row address %p is not 16-byte aligned in shared memory (a GPU faults here)\n", row);
    std::abort();
  }
  if (lane == 0) ++thx::emu::matrix_stores;
  for (int j = 0; j < 4; ++j) w.words[lane][j] = r[j];
  w.barrier.wait();
  // Row r of matrix j, as ldmatrix would have given it out: element (r, c) is lane 4 r + c / 2's
  // half c % 2, or with .trans lane 4 c + r / 2's half r % 2.
  const int j = int(lane) / 8, rr = int(lane) % 8;
  uint16_t out[8];
  for (int c = 0; c < 8; ++c) {
    const uint32_t word = Trans ? w.words[4 * c + rr / 2][j] : w.words[4 * rr + c / 2][j];
    out[c] = uint16_t((Trans ? rr % 2 : c % 2) ? word >> 16 : word & 0xffffu);
  }
  std::memcpy(row, out, 16);
  w.barrier.wait();  // before any lane writes its words again
}
THX_DEVICE void thx_mma_bf16_16816(float* d, const uint32_t* a, const uint32_t* b) {
  thx::emu::Warp& w = *(*thx::emu::t_block.warps)[threadIdx.x / 32];
  const unsigned lane = threadIdx.x % 32;
  for (int x = 0; x < 4; ++x) w.words[lane][x] = a[x];
  w.words[lane][4] = b[0], w.words[lane][5] = b[1];
  w.barrier.wait();
  auto half = [](uint32_t word, int k) { return thx_bits_to_float((k % 2 ? word >> 16 : word & 0xffffu) << 16); };
  auto A = [&](int row, int k) { return half(w.words[(row % 8) * 4 + (k % 8) / 2][(row >= 8) + 2 * (k >= 8)], k); };
  auto B = [&](int k, int col) { return half(w.words[col * 4 + (k % 8) / 2][4 + (k >= 8)], k); };
  const int g = int(lane) / 4, t = int(lane) % 4;
  for (int x = 0; x < 4; ++x) {
    const int row = g + 8 * (x / 2), col = 2 * t + x % 2;
    float acc = d[x];
    for (int k = 0; k < 16; ++k) acc += A(row, k) * B(k, col);
    d[x] = acc;
  }
  w.barrier.wait();  // before any lane writes its words again
}
#endif

namespace thx::cuda_mma {

// A matrix operand in memory, fp32 or bf16: element (i, j) of batch entry g at p[g * gs + i * rs + j * cs].
// Padded (padded()): zeros stand in memory past the product's K up to a multiple of 16 (pad_k),
// and past its M (A) up to a multiple of 16 or its N (B) up to one of 8 (pad_mn), so that the
// last blocks along them are whole and ldmatrix may read them (warp_tile_pair); the zeros are
// what the pair loads would give there, so the sums are the same.
struct Operand {
  const void* p;
  int64_t gs, rs, cs;
  bool bf16;
  bool pad_k = false, pad_mn = false;
  THX_DEVICE Operand(const float* x, int64_t g, int64_t r, int64_t c) : p(x), gs(g), rs(r), cs(c), bf16(false) {}
  THX_DEVICE Operand(const thx_bf16* x, int64_t g, int64_t r, int64_t c) : p(x), gs(g), rs(r), cs(c), bf16(true) {}
  THX_DEVICE Operand(const void* x, bool is_bf16, int64_t g, int64_t r, int64_t c)
      : p(x), gs(g), rs(r), cs(c), bf16(is_bf16) {}
  THX_DEVICE float at(int64_t i) const {
    return bf16 ? thx_to_float(static_cast<const thx_bf16*>(p)[i]) : static_cast<const float*>(p)[i];
  }
  THX_DEVICE Operand padded(bool k, bool mn) const {
    Operand o = *this;
    o.pad_k = k, o.pad_mn = mn;
    return o;
  }
};

// A plane of shared memory in fp32, or in bf16 where its values are only ever tensor-core
// operands (they are rounded to bf16 as they are read, so keeping them rounded changes nothing).
struct Plane {
  void* p;
  bool bf16;
  THX_DEVICE float get(int64_t i) const {
    return bf16 ? thx_to_float(static_cast<const thx_bf16*>(p)[i]) : static_cast<const float*>(p)[i];
  }
  THX_DEVICE void set(int64_t i, float v) const {
    if (bf16) static_cast<thx_bf16*>(p)[i] = thx_from_float<thx_bf16>(v);
    else static_cast<float*>(p)[i] = v;
  }
  THX_DEVICE Operand operand(int64_t gs, int64_t rs, int64_t cs) const { return {p, bf16, gs, rs, cs}; }
};

// Two values as a word of two bf16 (round to nearest even), the first in the low half.
// On a GPU (sm_80 and later) one instruction, cvt.rn.bf16x2.f32 (its first operand goes to the
// high half), the same bits as two thx_from_float.
THX_DEVICE uint32_t pack_bf16x2(float lo, float hi) {
#if defined(__CUDACC__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return uint32_t(thx_from_float<thx_bf16>(lo).bits) | uint32_t(thx_from_float<thx_bf16>(hi).bits) << 16;
#endif
}

// Whether X's neighbours along k (its stride ks) can be read as aligned words of two bf16: X is bf16
// with k contiguous, every other offset even, and K even (a pair never straddles the end).
THX_DEVICE bool word_pairs(const Operand& X, int64_t ks, int64_t other, int K) {
  return X.bf16 && ks == 1 && K % 2 == 0 && X.gs % 2 == 0 && other % 2 == 0 &&
         reinterpret_cast<uintptr_t>(X.p) % 4 == 0;
}

// Whether X can be read by ldmatrix, whose k stride is ks and other index's stride `other`: bf16,
// one of the two contiguous, and every row of 8 along it 16-byte aligned. With k strided (other
// contiguous) by .trans; with k contiguous, plainly (`along_k`). Such an X must be in shared
// memory, the only place ldmatrix reads (the emulator aborts otherwise): every bf16 operand of
// th_kernels.cuh's products on tensor cores is.
THX_DEVICE bool matrix_rows(const Operand& X, int64_t ks, int64_t other, bool along_k = false) {
  const int64_t contiguous = along_k ? ks : other, step = along_k ? other : ks;
  return X.bf16 && contiguous == 1 && step % 8 == 0 && X.gs % 8 == 0 && reinterpret_cast<uintptr_t>(X.p) % 16 == 0;
}

// Elements at and at + ks of X, k and k + 1 along the reduction, as one word; zero past K or
// outside the output (`inside` false). `words`: word_pairs said one load does.
THX_DEVICE uint32_t k_pair(const Operand& X, bool words, bool inside, int64_t at, int64_t ks, int k, int K) {
  if (!inside || k >= K) return 0u;
  if (words) return thx_load_word(static_cast<const thx_bf16*>(X.p) + at);
  if (X.bf16) {  // already bf16: the two halves as they are (rounding them again would change nothing)
    const thx_bf16* x = static_cast<const thx_bf16*>(X.p);
    return uint32_t(x[at].bits) | (k + 1 < K ? uint32_t(x[at + ks].bits) << 16 : 0u);
  }
  return pack_bf16x2(X.at(at), k + 1 < K ? X.at(at + ks) : 0.f);
}

// Where a 16x8 output tile is: batch entry g, rows m0.., columns n0...
struct TilePos {
  int g, m0, n0;
};

// A product's 16x8 output tiles on tensor cores: tile x is batch entry x / (tiles_m * tiles_n),
// rows 16 * (x / tiles_n % tiles_m), columns 8 * (x % tiles_n). Warps take them in pairs, two
// neighbours along a row of tiles (the second absent at an odd row's end), so that A's fragments
// are loaded once for both (warp_tile_pair): pair p's first tile is at pair_pos(p), and its
// second, if any (second), 8 columns on. Each pair's position costs two divisions, made
// once for its loads and its outputs (in version 2.2 every output made its own: on the H100 the
// kernels issued about 360 instructions for each product instruction).
struct TileGrid {
  int M, N, K, tiles_m, tiles_n, tiles, pairs_n, pairs;
  bool a_words, b_words;  // word_pairs of A and B
  bool a_rows, b_rows;    // matrix_rows of A and B: k strided (ldmatrix .trans)
  bool a_krows, b_krows;  // matrix_rows along k: k contiguous (plain ldmatrix)
  THX_DEVICE TileGrid(int batch, int m, int n, int k = 0)
      : M(m), N(n), K(k), tiles_m((m + 15) / 16), tiles_n((n + 7) / 8), tiles(batch * tiles_m * tiles_n),
        pairs_n((tiles_n + 1) / 2), pairs(batch * tiles_m * pairs_n), a_words(false), b_words(false),
        a_rows(false), b_rows(false), a_krows(false), b_krows(false) {}
  THX_DEVICE TileGrid(int batch, const Operand& A, const Operand& B, int m, int n, int k) : TileGrid(batch, m, n, k) {
    a_words = word_pairs(A, A.cs, A.rs, k), b_words = word_pairs(B, B.rs, B.cs, k);
    a_rows = matrix_rows(A, A.cs, A.rs), b_rows = matrix_rows(B, B.rs, B.cs);
    a_krows = matrix_rows(A, A.cs, A.rs, true), b_krows = matrix_rows(B, B.rs, B.cs, true);
  }
  // How many turns each_tile gives out among `warps`: one a tile where there are fewer pairs than warps.
  THX_DEVICE int turns(int warps) const { return pairs < warps && tiles > pairs ? tiles : pairs; }
  THX_DEVICE TilePos tile_pos(int x) const {  // tile x alone (each_tile's one tile a warp)
    const int row = x / tiles_n, g = row / tiles_m;  // row: the tile's row of tiles over the batch
    return {g, (row - g * tiles_m) * 16, (x - row * tiles_n) * 8};
  }
  THX_DEVICE TilePos pair_pos(int p) const {
    const int row = p / pairs_n, g = row / tiles_m;  // row: the pair's row of tiles over the batch
    return {g, (row - g * tiles_m) * 16, (p - row * pairs_n) * 16};
  }
  THX_DEVICE bool second(const TilePos& first) const { return first.n0 + 8 < tiles_n * 8; }  // (at an odd row's end)
};

// d0[0..3] = this lane's share of the tile at `at` (mma's accumulator layout: rows g4 and
// g4 + 8, columns 2 t4 and 2 t4 + 1), and with `second` d1 that of the next tile (the same rows,
// the next 8 columns), summed over k in steps of 16; A's fragments loaded once for both. Every
// lane of the warp takes part. Whole 16x16 (A) and 16x8 (B) blocks of bf16 operands in shared
// memory (whole also where the operand is padded past the edge: Operand::padded) come by
// ldmatrix, .trans where k is strided, plain where it is contiguous; the rest by pairs (k_pair).
THX_DEVICE void warp_tile_pair(const TileGrid& t, const Operand& A, const Operand& B, TilePos at, bool second,
                               float* d0, float* d1) {
  const int lane = threadIdx.x % 32, g4 = lane / 4, t4 = lane % 4;
  const int g = at.g, m0 = at.m0, M = t.M, N = t.N, K = t.K;
  const thx_bf16* a16 = static_cast<const thx_bf16*>(A.p) + g * A.gs;
  const thx_bf16* b16 = static_cast<const thx_bf16*>(B.p) + g * B.gs;
  for (int w = 0; w < 4; ++w) d0[w] = d1[w] = 0.f;
  for (int k0 = 0; k0 < K; k0 += 16) {
    uint32_t aw[4];
    const bool k_whole = k0 + 16 <= K, a_whole = (m0 + 16 <= M || A.pad_mn) && (k_whole || A.pad_k);
    const int j = lane / 8;  // ldmatrix's matrix j: k half j / 2, m half j % 2
    if (t.a_rows && a_whole) {
      thx_ldmatrix<4, true>(aw, a16 + (k0 + lane % 8 + 8 * (j / 2)) * A.cs + m0 + 8 * (j % 2));
    } else if (t.a_krows && a_whole) {
      thx_ldmatrix<4, false>(aw, a16 + (m0 + lane % 8 + 8 * (j % 2)) * A.rs + k0 + 8 * (j / 2));
    } else {
      for (int w = 0; w < 4; ++w) {
        const int m = m0 + g4 + 8 * (w % 2), k = k0 + 2 * t4 + 8 * (w / 2);
        aw[w] = k_pair(A, t.a_words, m < M, g * A.gs + m * A.rs + k * A.cs, A.cs, k, K);
      }
    }
    auto b_times_a = [&](int n0, float* d) {
      uint32_t bw[2];
      // matrix j = lane / 8 (lanes 0-15): k half j
      const bool b_whole = (n0 + 8 <= N || B.pad_mn) && (k_whole || B.pad_k);
      if (t.b_rows && b_whole) {
        thx_ldmatrix<2, true>(bw, b16 + (k0 + lane % 16) * B.rs + n0);
      } else if (t.b_krows && b_whole) {
        thx_ldmatrix<2, false>(bw, b16 + (n0 + lane % 8) * B.cs + k0 + 8 * (lane / 8 % 2));
      } else {
        for (int w = 0; w < 2; ++w) {
          const int k = k0 + 2 * t4 + 8 * w, n = n0 + g4;
          bw[w] = k_pair(B, t.b_words, n < N, g * B.gs + k * B.rs + n * B.cs, B.rs, k, K);
        }
      }
      thx_mma_bf16_16816(d, aw, bw);
    };
    b_times_a(at.n0, d0);
    if (second) b_times_a(at.n0 + 8, d1);
  }
}

// out(g, m, n, d[w]) for this lane's outputs of the tile at `at` inside M and N.
template <class Out>
THX_DEVICE void tile_outputs(const TileGrid& t, TilePos at, const float* d, Out& out) {
  const int lane = threadIdx.x % 32, g4 = lane / 4, t4 = lane % 4;
  for (int w = 0; w < 4; ++w) {
    const int m = at.m0 + g4 + 8 * (w / 2), n = at.n0 + 2 * t4 + w % 2;
    if (m < t.M && n < t.N) out(at.g, m, n, d[w]);
  }
}

// tile(at, d) for each 16x8 output tile of the product on tensor cores, at its position and d
// this lane's share (tile_outputs's layout), the calling warp taking its pairs warp, warp +
// warps, ... counted from warp `first` (so that two small products in a row, with no barrier
// between, run on different warps). Where there are fewer pairs than warps (the backward's
// mixing gradients at 12 heads: one pair, summed over a tile's 256 positions, while seven warps
// waited), each warp takes one tile instead, so that twice as many work; a tile's sum is the same
// whichever warp makes it.
template <class Tile>
THX_DEVICE void each_tile(const TileGrid& t, const Operand& A, const Operand& B, Tile tile, int first = 0) {
  const int warps = blockDim.x / 32, w = int(threadIdx.x) / 32;  // the same across a warp
  const int warp = first ? (w + warps - first % warps) % warps : w;
  if (t.turns(warps) > t.pairs) {
    for (int x = warp; x < t.tiles; x += warps) {
      float d[2][4];
      const TilePos at = t.tile_pos(x);
      warp_tile_pair(t, A, B, at, false, d[0], d[1]);
      tile(at, d[0]);
    }
    return;
  }
  for (int p = warp; p < t.pairs; p += warps) {
    float d[2][4];
    const TilePos at = t.pair_pos(p);
    const bool second = t.second(at);
    warp_tile_pair(t, A, B, at, second, d[0], d[1]);
    tile(at, d[0]);
    if (second) tile(TilePos{at.g, at.m0, at.n0 + 8}, d[1]);
  }
}

// out(g, m, n, sum_k A_g(m, k) B_g(k, n)) for every g < batch, m < M, n < N, each (g, m, n) by
// exactly one thread (so that `out` may add into memory it alone owns). The sums are fp32:
//  - tensor_cores: each warp takes pairs of 16x8 output tiles in turn (each_tile); the operands
//    are rounded to bf16 as they are read (nothing outside M, N or K is read: zeros stand in).
//    bf16 operands with k contiguous are read as words of two; with k strided, by ldmatrix, so
//    those must be in shared memory. Needs whole warps.
//  - otherwise plain FMAs, each thread an output, summed in k order (as th_kernels.cuh's
//    version 1 did).
// No barrier: the caller syncs before reading what `out` wrote. On tensor cores, warp
// `first_warp` takes the first tiles (each_tile).
template <class Out>
THX_DEVICE void block_gemm(bool tensor_cores, int batch, Operand A, Operand B, int M, int N, int K, Out out,
                           int first_warp = 0) {
  if (!tensor_cores) {
    // Operand::at tests the dtype per element, the same way every time (a loop per pair of
    // dtypes was tried: ptxas then spilled in the bf16 backward at its 128 registers).
    for (int x = threadIdx.x; x < batch * M * N; x += blockDim.x) {
      const int g = x / (M * N), m = (x / N) % M, n = x % N;
      const int64_t a = g * A.gs + m * A.rs, b = g * B.gs + n * B.cs;
      float acc = 0.f;
      for (int k = 0; k < K; ++k) acc += A.at(a + k * A.cs) * B.at(b + k * B.rs);
      out(g, m, n, acc);
    }
    return;
  }
  const TileGrid t(batch, A, B, M, N, K);
  each_tile(t, A, B, [&](TilePos at, const float* d) { tile_outputs(t, at, d, out); }, first_warp);
}

// block_gemm's product delivered up to four adjacent columns at a time: out4(g, m, n, v, count)
// with v[0..count) the outputs (g, m, n .. n + count - 1), each output by exactly one thread. On
// tensor cores, n is a multiple of 4 and count is 4 but at N's edge: lanes 2 u and 2 u + 1 of a
// quad (tile_outputs's t4) hold columns 4 u .. 4 u + 3 of rows g4 and g4 + 8 between them and
// swap halves (thx_shfl_xor), the even lane then holding row g4's four, the odd one row g4 + 8's.
// Otherwise one output at a time (count 1). For sums added to memory four at a time.
template <class Out4>
THX_DEVICE void block_gemm_quads(bool tensor_cores, int batch, Operand A, Operand B, int M, int N, int K, Out4 out4) {
  if (!tensor_cores) {
    block_gemm(false, batch, A, B, M, N, K, [&](int g, int m, int n, float v) { out4(g, m, n, &v, 1); });
    return;
  }
  const TileGrid t(batch, A, B, M, N, K);
  const int lane = threadIdx.x % 32, g4 = lane / 4, t4 = lane % 4;
  const bool odd = t4 % 2 != 0;
  each_tile(t, A, B, [&](TilePos at, const float* d) {  // the whole warp: the shuffles need every lane
    const float s0 = thx_shfl_xor(odd ? d[0] : d[2], 1), s1 = thx_shfl_xor(odd ? d[1] : d[3], 1);
    const float q[4] = {odd ? s0 : d[0], odd ? s1 : d[1], odd ? d[2] : s0, odd ? d[3] : s1};
    const int m = at.m0 + g4 + (odd ? 8 : 0), n = at.n0 + 4 * (t4 / 2);
    if (m < t.M && n < t.N) out4(at.g, m, n, q, t.N - n < 4 ? t.N - n : 4);
  });
}

// The tensor-core product of block_gemm added into registers instead of written out: acc[2 i]
// and acc[2 i + 1] += this lane's share of the tiles of pair warp + i * warps, for every pair of
// the calling warp, which must have at most Max / 2 (Max even). Repeated calls sum in the same
// order as block_gemm's `out` adding into memory, so a sum kept here across calls equals one
// kept in shared memory.
template <int Max>
THX_DEVICE void block_gemm_accumulate(int batch, Operand A, Operand B, int M, int N, int K, float (&acc)[Max][4]) {
  static_assert(Max % 2 == 0, "tiles come in pairs");
  const TileGrid t(batch, A, B, M, N, K);
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int i = 0; i < Max / 2; ++i) {
    const int p = warp + i * warps;
    if (p >= t.pairs) break;
    float d[2][4];
    const TilePos at = t.pair_pos(p);
    warp_tile_pair(t, A, B, at, t.second(at), d[0], d[1]);
    for (int w = 0; w < 4; ++w) acc[2 * i][w] += d[0][w], acc[2 * i + 1][w] += d[1][w];
  }
}

// out(g, m, n, value) for each output that block_gemm_accumulate keeps in this thread's acc.
template <int Max, class Out>
THX_DEVICE void accumulated_outputs(int batch, int M, int N, const float (&acc)[Max][4], Out out) {
  const TileGrid t(batch, M, N);
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int i = 0; i < Max / 2; ++i) {
    const int p = warp + i * warps;
    if (p >= t.pairs) break;
    const TilePos at = t.pair_pos(p);
    tile_outputs(t, at, acc[2 * i], out);
    if (t.second(at)) tile_outputs(t, TilePos{at.g, at.m0, at.n0 + 8}, acc[2 * i + 1], out);
  }
}

}  // namespace thx::cuda_mma
