// kernels_avx2.cpp: AVX2+FMA builds of the loops in kernels.h. Compiled with -mavx2 -mfma
// (CMakeLists.txt); only called when the CPU reports both (kernels.cpp, best_ops()).
//
// mix: register tiles of up to 6 output rows x 16 columns (12 accumulators); each input row
//      element is loaded once per tile and each coefficient broadcast once. 80-90% of the
//      FMA peak when its operands are in cache, about half that when they stream from DRAM.
// gram: tiles of 3 x 4 dot products (12 accumulators) over the row length.
// softmax: three passes over one row in L1: bias+mask+max, exp+sum, scale. exp is the
//      Cephes single-precision polynomial (max relative error ~2e-7 on [-87, 88]).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "attention/kernel_tiles.h"
#include "attention/kernels.h"

namespace thx::kernels {
namespace {

inline __m256i tail_mask(int64_t n) {  // lanes [0, n) set, n in [0, 8]
  alignas(32) static const int32_t bits[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                               0,  0,  0,  0,  0,  0,  0,  0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bits + 8 - n));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Cephes expf: exp(x) = 2^k * p(r), r = x - k ln2, |r| <= ln2 / 2.
inline __m256 exp256(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-88.3762626647949f)),
                    _mm256_set1_ps(88.3762626647949f));
  __m256 k = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f),
                                             _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^k through the exponent bits; k = -127 (only reached by clamped, masked logits) gives 0.
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// ---- mix ---------------------------------------------------------------------------------

template <int OB, bool ACC>
inline void mix_tile16(float* out, int64_t os, const float* in, int64_t is, const float* C,
                       int64_t co, int64_t ci, int64_t I) {
  __m256 acc[OB][2];
#pragma GCC unroll 6
  for (int o = 0; o < OB; ++o) {
    acc[o][0] = ACC ? _mm256_loadu_ps(out + o * os) : _mm256_setzero_ps();
    acc[o][1] = ACC ? _mm256_loadu_ps(out + o * os + 8) : _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < I; ++i) {
    const float* x = in + i * is;
    const __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
    const float* c = C + i * ci;
#pragma GCC unroll 6
    for (int o = 0; o < OB; ++o) {
      const __m256 w = _mm256_broadcast_ss(c + o * co);
      acc[o][0] = _mm256_fmadd_ps(w, x0, acc[o][0]);
      acc[o][1] = _mm256_fmadd_ps(w, x1, acc[o][1]);
    }
  }
#pragma GCC unroll 6
  for (int o = 0; o < OB; ++o) {
    _mm256_storeu_ps(out + o * os, acc[o][0]);
    _mm256_storeu_ps(out + o * os + 8, acc[o][1]);
  }
}

// Up to 8 columns, masked.
template <int OB, bool ACC>
inline void mix_tile8(float* out, int64_t os, const float* in, int64_t is, const float* C,
                      int64_t co, int64_t ci, int64_t I, __m256i mask) {
  __m256 acc[OB];
#pragma GCC unroll 6
  for (int o = 0; o < OB; ++o)
    acc[o] = ACC ? _mm256_maskload_ps(out + o * os, mask) : _mm256_setzero_ps();
  for (int64_t i = 0; i < I; ++i) {
    const __m256 x = _mm256_maskload_ps(in + i * is, mask);
    const float* c = C + i * ci;
#pragma GCC unroll 6
    for (int o = 0; o < OB; ++o) acc[o] = _mm256_fmadd_ps(_mm256_broadcast_ss(c + o * co), x, acc[o]);
  }
#pragma GCC unroll 6
  for (int o = 0; o < OB; ++o) _mm256_maskstore_ps(out + o * os, mask, acc[o]);
}

template <int OB, bool ACC>
void mix_rows(float* out, int64_t os, const float* in, int64_t is, const float* C, int64_t co,
              int64_t ci, int64_t I, int64_t len) {
  int64_t j = 0;
  for (; j + 16 <= len; j += 16) mix_tile16<OB, ACC>(out + j, os, in + j, is, C, co, ci, I);
  for (; j < len; j += 8)
    mix_tile8<OB, ACC>(out + j, os, in + j, is, C, co, ci, I,
                       tail_mask(std::min<int64_t>(8, len - j)));
}

template <bool ACC>
void mix_all(float* out, int64_t os, const float* in, int64_t is, const float* C, int64_t co,
             int64_t ci, int64_t O, int64_t I, int64_t len) {
  int64_t o = 0;
  for (; o + 6 <= O; o += 6) mix_rows<6, ACC>(out + o * os, os, in, is, C + o * co, co, ci, I, len);
  with_remainder<6>(O - o, [&](auto r) { mix_rows<r, ACC>(out + o * os, os, in, is, C + o * co, co, ci, I, len); });
}

void mix(float* out, int64_t os, const float* in, int64_t is, const float* C, int64_t co,
         int64_t ci, int64_t O, int64_t I, int64_t len, bool accumulate) {
  if (accumulate) mix_all<true>(out, os, in, is, C, co, ci, O, I, len);
  else mix_all<false>(out, os, in, is, C, co, ci, O, I, len);
}

// ---- gram --------------------------------------------------------------------------------

template <int AB, int CB>
void gram_tile(float* G, int64_t NB, const float* A, int64_t as, const float* B, int64_t bs,
               int64_t len) {
  __m256 acc[AB][CB];
#pragma GCC unroll 3
  for (int a = 0; a < AB; ++a)
#pragma GCC unroll 4
    for (int c = 0; c < CB; ++c) acc[a][c] = _mm256_setzero_ps();
  int64_t j = 0;
  auto step = [&](const __m256i* mask) {
    __m256 x[AB], y[CB];
#pragma GCC unroll 3
    for (int a = 0; a < AB; ++a)
      x[a] = mask ? _mm256_maskload_ps(A + a * as + j, *mask) : _mm256_loadu_ps(A + a * as + j);
#pragma GCC unroll 4
    for (int c = 0; c < CB; ++c)
      y[c] = mask ? _mm256_maskload_ps(B + c * bs + j, *mask) : _mm256_loadu_ps(B + c * bs + j);
#pragma GCC unroll 3
    for (int a = 0; a < AB; ++a)
#pragma GCC unroll 4
      for (int c = 0; c < CB; ++c) acc[a][c] = _mm256_fmadd_ps(x[a], y[c], acc[a][c]);
  };
  for (; j + 8 <= len; j += 8) step(nullptr);
  if (j < len) {
    const __m256i m = tail_mask(len - j);
    step(&m);
  }
  for (int a = 0; a < AB; ++a)
    for (int c = 0; c < CB; ++c) G[a * NB + c] += hsum(acc[a][c]);
}

template <int AB>
void gram_row(float* G, int64_t NB, const float* A, int64_t as, const float* B, int64_t bs,
              int64_t len) {
  int64_t c = 0;
  for (; c + 4 <= NB; c += 4) gram_tile<AB, 4>(G + c, NB, A, as, B + c * bs, bs, len);
  with_remainder<4>(NB - c, [&](auto r) { gram_tile<AB, r>(G + c, NB, A, as, B + c * bs, bs, len); });
}

void gram(float* G, const float* A, int64_t as, int64_t NA, const float* B, int64_t bs,
          int64_t NB, int64_t len) {
  int64_t a = 0;
  for (; a + 3 <= NA; a += 3) gram_row<3>(G + a * NB, NB, A + a * as, as, B, bs, len);
  with_remainder<3>(NA - a, [&](auto r) { gram_row<r>(G + a * NB, NB, A + a * as, as, B, bs, len); });
}

// ---- softmax -----------------------------------------------------------------------------

inline __m256 masked_logits(__m256 v, const uint8_t* mask) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(mask));
  const __m256i lanes = _mm256_cvtepu8_epi32(bytes);
  const __m256 off = _mm256_castsi256_ps(_mm256_cmpeq_epi32(lanes, _mm256_setzero_si256()));
  return _mm256_blendv_ps(v, _mm256_set1_ps(-1e9f), off);
}

void softmax(float* x, const float* bias, const uint8_t* mask, int64_t len) {
  const int64_t full = len & ~int64_t{7};
  __m256 vmax = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < full; j += 8) {
    __m256 v = _mm256_loadu_ps(x + j);
    if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + j));
    if (mask) v = masked_logits(v, mask + j);
    _mm256_storeu_ps(x + j, v);
    vmax = _mm256_max_ps(vmax, v);
  }
  float mx = hmax(vmax);
  for (int64_t j = full; j < len; ++j) {
    float v = x[j] + (bias ? bias[j] : 0.0f);
    if (mask && !mask[j]) v = -1e9f;
    x[j] = v;
    mx = std::max(mx, v);
  }
  const __m256 vm = _mm256_set1_ps(mx);
  __m256 vsum = _mm256_setzero_ps();
  for (int64_t j = 0; j < full; j += 8) {
    const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm));
    _mm256_storeu_ps(x + j, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  float sum = hsum(vsum);
  for (int64_t j = full; j < len; ++j) sum += (x[j] = std::exp(x[j] - mx));
  const __m256 inv = _mm256_set1_ps(1.0f / sum);
  for (int64_t j = 0; j < full; j += 8) _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), inv));
  for (int64_t j = full; j < len; ++j) x[j] *= 1.0f / sum;
}

float logsumexp(const float* x, int64_t len) {
  const int64_t full = len & ~int64_t{7};
  __m256 vmax = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < full; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + j));
  float mx = hmax(vmax);
  for (int64_t j = full; j < len; ++j) mx = std::max(mx, x[j]);
  const __m256 vm = _mm256_set1_ps(mx);
  __m256 vsum = _mm256_setzero_ps();
  for (int64_t j = 0; j < full; j += 8)
    vsum = _mm256_add_ps(vsum, exp256(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm)));
  float sum = hsum(vsum);
  for (int64_t j = full; j < len; ++j) sum += std::exp(x[j] - mx);
  return mx + std::log(sum);
}

void softmax_backward(float* dx, const float* w, const float* g, const uint8_t* mask,
                      int64_t len) {
  const int64_t full = len & ~int64_t{7};
  __m256 vdot = _mm256_setzero_ps();
  for (int64_t j = 0; j < full; j += 8)
    vdot = _mm256_fmadd_ps(_mm256_loadu_ps(w + j), _mm256_loadu_ps(g + j), vdot);
  float dot = hsum(vdot);
  for (int64_t j = full; j < len; ++j) dot += w[j] * g[j];
  const __m256 vd = _mm256_set1_ps(dot);
  for (int64_t j = 0; j < full; j += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(w + j), _mm256_sub_ps(_mm256_loadu_ps(g + j), vd));
    if (mask) {
      const __m256i lanes = _mm256_cvtepu8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(mask + j)));
      v = _mm256_andnot_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(lanes, _mm256_setzero_si256())), v);
    }
    _mm256_storeu_ps(dx + j, v);
  }
  for (int64_t j = full; j < len; ++j) dx[j] = (mask && !mask[j]) ? 0.0f : w[j] * (g[j] - dot);
}

// ---- bf16 <-> fp32 ------------------------------------------------------------------------

void bf16_to_float(const uint16_t* in, float* out, int64_t len) {
  const int64_t full = len & ~int64_t{7};
  for (int64_t j = 0; j < full; j += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + j));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  for (int64_t j = full; j < len; ++j) {
    const uint32_t bits = uint32_t(in[j]) << 16;
    std::memcpy(out + j, &bits, sizeof bits);
  }
}

// Round to nearest even: add 0x7FFF plus the lowest kept bit, keep the high 16 bits; NaN lanes
// become 0x7FC0, as c10::BFloat16's scalar conversion makes them.
void float_to_bf16(const float* in, uint16_t* out, int64_t len) {
  const int64_t full = len & ~int64_t{7};
  const __m256i bias = _mm256_set1_epi32(0x7FFF), one = _mm256_set1_epi32(1), nan = _mm256_set1_epi32(0x7FC0);
  for (int64_t j = 0; j < full; j += 8) {
    const __m256 x = _mm256_loadu_ps(in + j);
    const __m256i bits = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), one);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(bias, lsb)), 16);
    r = _mm256_blendv_epi8(r, nan, _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
    // 8 x 32-bit lanes holding 16-bit values -> 8 x 16 bits (packus works per 128-bit half).
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j), packed);
  }
  for (int64_t j = full; j < len; ++j) {
    if (std::isnan(in[j])) {
      out[j] = 0x7FC0;
      continue;
    }
    uint32_t bits;
    std::memcpy(&bits, in + j, sizeof bits);
    out[j] = uint16_t((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
  }
}

const Ops kAvx2 = {"avx2", mix, gram, softmax, logsumexp, softmax_backward, bf16_to_float, float_to_bf16};

}  // namespace

const Ops* avx2_ops() { return &kAvx2; }

}  // namespace thx::kernels
