// kernels_amx.cpp: the bf16 core's head mixings and grams on AMX tiles (kernels.h, amx).
// Compiled with -mamx-tile -mamx-bf16 -mavx512bf16 and AVX-512 (CMakeLists.txt); used only where
// CPUID reports AVX-512 F/BW/VL and AMX-BF16, the OS enables the tile state in XCR0, and Linux
// grants this process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM), or AVX512-BF16 (every CPU
// with AMX-BF16 has it too), so each instruction these flags allow runs where the file runs.
//
// One tile product: C[16 x 16] (fp32) += A[16 x 32] (bf16) . B[32 x 16] (bf16), B held as 16
// rows of 16 (k, k+1) pairs ("VNNI" order). TDPBF16PS multiplies bf16 exactly and adds in fp32
// (round to nearest even, denormals flushed), so a product of bf16 values is a fp32 dot product
// in another order. Both factors are packed first, zero padded to whole tiles (a padded A
// column meets a zero B row, never garbage: 0 x NaN would be NaN):
//   A tiles: [row tile][k tile][16 rows][32],   B tiles: [column tile][k tile][16 pairs][16][2].
// The product runs in blocks of 2 x 2 output tiles: four accumulators (tmm0-3), two A (tmm4-5)
// and two B (tmm6-7) tiles, so each loaded tile serves two products.
// Where a CPU has no AMX but AVX512-BF16 (AMD Zen 4 and 5), the same packed tiles go through
// VDPBF16PS instead (product_dp): per (k, k+1) pair of A's row, broadcast, times B's row of 16
// pairs, into 16 fp32 lanes. It multiplies and adds as TDPBF16PS does (exact products, fp32 sums
// rounded to nearest even, denormals flushed), in another order.
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "attention/kernels.h"
#include "attention/kernels_avx512_shared.h"

namespace thx::kernels::amx {
namespace {

constexpr int64_t kTile = 512;  // bf16 per packed tile (16 x 32)

inline __mmask32 lanes32(int64_t n) { return n >= 32 ? ~__mmask32(0) : __mmask32((1u << n) - 1); }
inline int64_t tiles(int64_t n, int64_t t) { return (n + t - 1) / t; }

// Every tile 16 rows x 64 bytes. The configuration's bytes are written through memset and a byte
// array: GCC 12 at -O3 dropped the stores into a struct that only _tile_loadconfig read.
void configure() {
  alignas(64) unsigned char cfg[64];
  std::memset(cfg, 0, sizeof cfg);
  cfg[0] = 1;  // palette 1
  for (int t = 0; t < 8; ++t) {
    cfg[16 + 2 * t] = 64;  // bytes per row (little-endian uint16)
    cfg[48 + t] = 16;      // rows
  }
  _tile_loadconfig(cfg);
}

// Accumulators tmm0-3 = sum over k tiles of A_r . B_c, r < R, c < NC (tmm0: r0 c0, tmm1: r0 c1,
// tmm2: r1 c0, tmm3: r1 c1).
template <int R, int NC>
void accumulate(const uint16_t* A0, const uint16_t* A1, const uint16_t* B0, const uint16_t* B1, int64_t KT) {
  _tile_zero(0);
  if constexpr (NC > 1) _tile_zero(1);
  if constexpr (R > 1) _tile_zero(2);
  if constexpr (R > 1 && NC > 1) _tile_zero(3);
  for (int64_t kt = 0; kt < KT; ++kt) {
    _tile_loadd(4, A0 + kt * kTile, 64);
    _tile_loadd(6, B0 + kt * kTile, 64);
    if constexpr (R > 1) _tile_loadd(5, A1 + kt * kTile, 64);
    if constexpr (NC > 1) _tile_loadd(7, B1 + kt * kTile, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NC > 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (R > 1) _tile_dpbf16ps(2, 5, 6);
    if constexpr (R > 1 && NC > 1) _tile_dpbf16ps(3, 5, 7);
  }
}

// Every output tile of packed A [RT x KT tiles] . packed B [CT x KT tiles], in 2 x 2 blocks,
// handed to emit(rt, ct, tile) (16 x 16 fp32, row-major) through a 4 KB buffer that stays in
// L1. (Tiles stored straight to a strided [h x 512] output were no faster: the output's writes
// are what costs, on this project's VMs 19-30 GB/s once they leave L1.)
// Callers check cpu_has_amx() first (its permission request comes before any tile instruction).
template <class Emit>
void product_tiles(const uint16_t* Ap, int64_t RT, const uint16_t* Bp, int64_t CT, int64_t KT, Emit&& emit) {
  alignas(64) float C[4][256];
  configure();
  for (int64_t rt = 0; rt < RT; rt += 2)
    for (int64_t ct = 0; ct < CT; ct += 2) {
      const uint16_t *a0 = Ap + rt * KT * kTile, *a1 = a0 + KT * kTile;
      const uint16_t *b0 = Bp + ct * KT * kTile, *b1 = b0 + KT * kTile;
      const bool r2 = rt + 1 < RT, c2 = ct + 1 < CT;
      if (r2 && c2) accumulate<2, 2>(a0, a1, b0, b1, KT);
      else if (r2) accumulate<2, 1>(a0, a1, b0, b1, KT);
      else if (c2) accumulate<1, 2>(a0, a1, b0, b1, KT);
      else accumulate<1, 1>(a0, a1, b0, b1, KT);
      _tile_stored(0, C[0], 64);
      if (c2) _tile_stored(1, C[1], 64);
      if (r2) _tile_stored(2, C[2], 64);
      if (r2 && c2) _tile_stored(3, C[3], 64);
      emit(rt, ct, C[0]);
      if (c2) emit(rt, ct + 1, C[1]);
      if (r2) emit(rt + 1, ct, C[2]);
      if (r2 && c2) emit(rt + 1, ct + 1, C[3]);
    }
  _tile_release();
}

// Rows [r0, r0 + 8) of the output tiles (rt, ct) and, where b1, (rt, ct + 1): 8 x 2 accumulators
// of 16 lanes, each pair of A's row broadcast from memory.
template <bool TWO>
void rows_dp(const uint16_t* a, const uint16_t* b0, const uint16_t* b1, int64_t KT, int64_t r0, float* C0, float* C1) {
  __m512 acc[8][2];
  for (int r = 0; r < 8; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t kt = 0; kt < KT; ++kt)
    for (int64_t p = 0; p < 16; ++p) {
      const __m512bh x0 = (__m512bh)_mm512_loadu_si512(b0 + kt * kTile + p * 32);
      const __m512bh x1 = TWO ? (__m512bh)_mm512_loadu_si512(b1 + kt * kTile + p * 32) : x0;
      const uint16_t* ap = a + kt * kTile + r0 * 32 + 2 * p;
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) {
        int32_t pair;
        std::memcpy(&pair, ap + r * 32, sizeof pair);
        const __m512bh w = (__m512bh)_mm512_set1_epi32(pair);
        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], w, x0);
        if (TWO) acc[r][1] = _mm512_dpbf16_ps(acc[r][1], w, x1);
      }
    }
  for (int r = 0; r < 8; ++r) {
    _mm512_store_ps(C0 + (r0 + r) * 16, acc[r][0]);
    if (TWO) _mm512_store_ps(C1 + (r0 + r) * 16, acc[r][1]);
  }
}

// product_tiles' result through VDPBF16PS: each row tile against column tiles two at a time.
template <class Emit>
void product_dp(const uint16_t* Ap, int64_t RT, const uint16_t* Bp, int64_t CT, int64_t KT, Emit&& emit) {
  alignas(64) float C[2][256];
  for (int64_t rt = 0; rt < RT; ++rt)
    for (int64_t ct = 0; ct < CT; ct += 2) {
      const uint16_t *a = Ap + rt * KT * kTile, *b0 = Bp + ct * KT * kTile, *b1 = b0 + KT * kTile;
      const bool two = ct + 1 < CT;
      for (int64_t r0 = 0; r0 < 16; r0 += 8)
        two ? rows_dp<true>(a, b0, b1, KT, r0, C[0], C[1]) : rows_dp<false>(a, b0, b1, KT, r0, C[0], C[1]);
      emit(rt, ct, C[0]);
      if (two) emit(rt, ct + 1, C[1]);
    }
}

// Callers check available() first.
template <class Emit>
void product(const uint16_t* Ap, int64_t RT, const uint16_t* Bp, int64_t CT, int64_t KT, Emit&& emit) {
  if (backend() == Backend::tiles) product_tiles(Ap, RT, Bp, CT, KT, emit);
  else product_dp(Ap, RT, Bp, CT, KT, emit);
}

// Rows X [R x len] (bf16, x_stride apart) as A tiles, K = len.
void pack_rows(const uint16_t* X, int64_t x_stride, int64_t R, int64_t len, uint16_t* Ap) {
  const int64_t RT = tiles(R, 16), KT = tiles(len, 32);
  for (int64_t rt = 0; rt < RT; ++rt)
    for (int64_t r = 0; r < 16; ++r) {
      const int64_t row = rt * 16 + r;
      for (int64_t kt = 0; kt < KT; ++kt) {
        uint16_t* dst = Ap + (rt * KT + kt) * kTile + r * 32;
        const __m512i v = row < R ? _mm512_maskz_loadu_epi16(lanes32(len - kt * 32), X + row * x_stride + kt * 32)
                                  : _mm512_setzero_si512();
        _mm512_storeu_si512(dst, v);
      }
    }
}

// Rows X [K x len] (bf16, x_stride apart) as B tiles: pairs of rows interleaved, N = len.
// Written in order, tile after tile; each column tile reads 32 bytes of every row.
void pack_pairs(const uint16_t* X, int64_t x_stride, int64_t K, int64_t len, uint16_t* Bp) {
  const int64_t CT = tiles(len, 16), KT = tiles(K, 32);
  for (int64_t ct = 0; ct < CT; ++ct) {
    const __mmask16 m = lanes(len - ct * 16);
    const uint16_t* x = X + ct * 16;
    for (int64_t kt = 0; kt < KT; ++kt) {
      uint16_t* dst = Bp + (ct * KT + kt) * kTile;
      for (int64_t p = 0; p < 16; ++p) {
        const int64_t k0 = kt * 32 + 2 * p;
        const __m256i lo = k0 < K ? _mm256_maskz_loadu_epi16(m, x + k0 * x_stride) : _mm256_setzero_si256();
        const __m256i hi = k0 + 1 < K ? _mm256_maskz_loadu_epi16(m, x + (k0 + 1) * x_stride) : _mm256_setzero_si256();
        const __m512i v = _mm512_or_si512(_mm512_cvtepu16_epi32(lo), _mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
        _mm512_storeu_si512(dst + p * 32, v);
      }
    }
  }
}

// 16 x 16 32-bit words transposed in registers.
void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // r[4q + s] now holds, in each 128-bit lane L, the words (4L.., s) of rows 4q..4q+3.
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xDD);
    t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xDD);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xDD);
    r[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
    r[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xDD);
  }
}

// Rows Y [N x len] (bf16, y_stride apart) as B tiles of Y^T, K = len: tile (c, k tile) row p
// holds Y[c][2p], Y[c][2p + 1] for its 16 c, that is word p of each row: a 16 x 16 transpose.
void pack_transposed(const uint16_t* Y, int64_t y_stride, int64_t N, int64_t len, uint16_t* Bp) {
  const int64_t CT = tiles(N, 16), KT = tiles(len, 32);
  __m512i r[16];
  for (int64_t ct = 0; ct < CT; ++ct)
    for (int64_t kt = 0; kt < KT; ++kt) {
      const __mmask32 m = lanes32(len - kt * 32);
      for (int64_t c = 0; c < 16; ++c) {
        const int64_t row = ct * 16 + c;
        r[c] = row < N ? _mm512_maskz_loadu_epi16(m, Y + row * y_stride + kt * 32) : _mm512_setzero_si512();
      }
      transpose16(r);
      uint16_t* dst = Bp + (ct * KT + kt) * kTile;
      for (int p = 0; p < 16; ++p) _mm512_storeu_si512(dst + p * 32, r[p]);
    }
}

bool cpu_and_os_allow() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24);
  const bool avx512 = (b & (1u << 16)) && (b & (1u << 30)) && (b & (1u << 31));  // F, BW, VL
  if (!amx_bf16 || !amx_tile || !avx512) return false;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;  // OSXSAVE
  uint32_t lo, hi;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  constexpr uint32_t kTileState = (1u << 17) | (1u << 18), kAvx512State = 0xE0, kYmm = 0x6;
  if ((lo & kTileState) != kTileState || (lo & kAvx512State) != kAvx512State || (lo & kYmm) != kYmm) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

std::atomic<int> g_backend{-1};  // -1: the best this CPU has; else a Backend set by set_backend

}  // namespace

bool cpu_has_amx() {
  static const bool ok = cpu_and_os_allow();
  return ok;
}

// As kernels.cpp asks for its AVX-512 build: libgcc's CPU model, which counts an AVX-512 feature
// only where the OS keeps the AVX-512 state (XCR0).
bool cpu_has_avx512_bf16() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  }();
  return ok;
}

Backend backend() {
  const int set = g_backend.load();
  if (set >= 0) return Backend(set);
  return cpu_has_amx() ? Backend::tiles : cpu_has_avx512_bf16() ? Backend::avx512_bf16 : Backend::none;
}

bool set_backend(Backend b) {
  const bool runs = b == Backend::none || (b == Backend::tiles && cpu_has_amx()) ||
                    (b == Backend::avx512_bf16 && cpu_has_avx512_bf16());
  if (runs) g_backend.store(int(b));
  return runs;
}

bool available() { return backend() != Backend::none; }

Packed pack(const float* C, int64_t c_o, int64_t c_i, int64_t O, int64_t I) {
  std::vector<float> values(size_t(O * I));
  for (int64_t o = 0; o < O; ++o)
    for (int64_t i = 0; i < I; ++i) values[size_t(o * I + i)] = C[o * c_o + i * c_i];
  std::vector<uint16_t> rows(values.size());
  generic_ops().float_to_bf16(values.data(), rows.data(), int64_t(values.size()));
  Packed p;
  p.rows = O, p.cols = I, p.row_tiles = tiles(O, 16), p.k_tiles = tiles(I, 32);
  p.tiles.assign(size_t(p.row_tiles * p.k_tiles * kTile), 0);
  pack_rows(rows.data(), I, O, I, p.tiles.data());
  return p;
}

namespace {
// out[o*out_stride + j] = (A . X)[o, j], o < A.rows, j < len, each row of 16 (masked) written by
// put(destination, lanes, values).
template <class T, class Put>
void mix_into(T* out, int64_t out_stride, const Packed& A, const uint16_t* X, int64_t x_stride, int64_t len,
              Scratch& s, Put&& put) {
  const int64_t CT = tiles(len, 16);
  s.b.resize(size_t(CT * A.k_tiles * kTile));
  pack_pairs(X, x_stride, A.cols, len, s.b.data());
  product(A.tiles.data(), A.row_tiles, s.b.data(), CT, A.k_tiles, [&](int64_t rt, int64_t ct, const float* C) {
    const int64_t rows = std::min<int64_t>(16, A.rows - rt * 16);
    const __mmask16 m = lanes(len - ct * 16);
    for (int64_t r = 0; r < rows; ++r) put(out + (rt * 16 + r) * out_stride + ct * 16, m, _mm512_load_ps(C + r * 16));
  });
}
}  // namespace

void mix(float* out, int64_t out_stride, const Packed& A, const uint16_t* X, int64_t x_stride, int64_t len,
         Scratch& s) {
  mix_into(out, out_stride, A, X, x_stride, len, s,
           [](float* to, __mmask16 m, __m512 v) { _mm512_mask_storeu_ps(to, m, v); });
}

void mix_bf16(uint16_t* out, int64_t out_stride, const Packed& A, const uint16_t* X, int64_t x_stride, int64_t len,
              Scratch& s) {
  mix_into(out, out_stride, A, X, x_stride, len, s,
           [](uint16_t* to, __mmask16 m, __m512 v) { _mm256_mask_storeu_epi16(to, m, round_to_bf16(v)); });
}

void gram(float* G, const uint16_t* A, int64_t a_stride, int64_t NA, const uint16_t* B, int64_t b_stride, int64_t NB,
          int64_t len, Scratch& s) {
  const int64_t RT = tiles(NA, 16), CT = tiles(NB, 16), KT = tiles(len, 32);
  s.a.resize(size_t(RT * KT * kTile));
  s.b.resize(size_t(CT * KT * kTile));
  pack_rows(A, a_stride, NA, len, s.a.data());
  pack_transposed(B, b_stride, NB, len, s.b.data());
  product(s.a.data(), RT, s.b.data(), CT, KT, [&](int64_t rt, int64_t ct, const float* C) {
    const int64_t rows = std::min<int64_t>(16, NA - rt * 16);
    const __mmask16 m = lanes(NB - ct * 16);
    for (int64_t r = 0; r < rows; ++r) {
      float* g = G + (rt * 16 + r) * NB + ct * 16;
      _mm512_mask_storeu_ps(g, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, g), _mm512_load_ps(C + r * 16)));
    }
  });
}

}  // namespace thx::kernels::amx
