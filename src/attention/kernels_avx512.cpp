// kernels_avx512.cpp: AVX-512 builds of the loops in kernels.h, the AVX2 file's algorithms at
// 16 lanes. Compiled with -mavx512f -mfma (CMakeLists.txt); chosen by best_ops() only when the
// CPU reports AVX-512F. On CPUs with 512-bit FMA units (Sapphire Rapids, AMD Zen 5) they do
// twice the AVX2 build's work per instruction; tails use AVX-512's lane masks.
//
// mix: register tiles of up to 6 output rows x 32 columns (12 accumulators).
// gram: tiles of 3 x 4 dot products (12 accumulators) over the row length.
// softmax, logsumexp, softmax_backward: the AVX2 build's passes; exp is the same Cephes
//      polynomial (max relative error ~2e-7 on [-87, 88]).
// bf16 <-> fp32: exact widening; rounding to nearest even, NaN -> 0x7FC0, as c10::BFloat16.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "attention/kernel_tiles.h"
#include "attention/kernels.h"
#include "attention/kernels_avx512_shared.h"

namespace thx::kernels {
namespace {

inline __m512 exp512(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-88.3762626647949f)), _mm512_set1_ps(88.3762626647949f));
  const __m512 k = _mm512_roundscale_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
                                        _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  // 2^k through the exponent bits; k = -127 (only reached by clamped, masked logits) gives 0.
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

// ---- mix ---------------------------------------------------------------------------------

// OB output rows x 32 columns, or x (up to) 16 masked columns when MASKED.
template <int OB, bool ACC, bool MASKED>
inline void mix_tile(float* out, int64_t os, const float* in, int64_t is, const float* C, int64_t co, int64_t ci,
                     int64_t I, __mmask16 m) {
  constexpr int W = MASKED ? 1 : 2;
  __m512 acc[OB][W];
#pragma GCC unroll 6
  for (int o = 0; o < OB; ++o)
    for (int w = 0; w < W; ++w)
      acc[o][w] = !ACC ? _mm512_setzero_ps()
                  : MASKED ? _mm512_maskz_loadu_ps(m, out + o * os)
                           : _mm512_loadu_ps(out + o * os + 16 * w);
  for (int64_t i = 0; i < I; ++i) {
    const float* x = in + i * is;
    __m512 xv[W];
    for (int w = 0; w < W; ++w) xv[w] = MASKED ? _mm512_maskz_loadu_ps(m, x) : _mm512_loadu_ps(x + 16 * w);
    const float* c = C + i * ci;
#pragma GCC unroll 6
    for (int o = 0; o < OB; ++o) {
      const __m512 cv = _mm512_set1_ps(c[o * co]);
      for (int w = 0; w < W; ++w) acc[o][w] = _mm512_fmadd_ps(cv, xv[w], acc[o][w]);
    }
  }
#pragma GCC unroll 6
  for (int o = 0; o < OB; ++o)
    for (int w = 0; w < W; ++w) {
      if (MASKED) _mm512_mask_storeu_ps(out + o * os, m, acc[o][w]);
      else _mm512_storeu_ps(out + o * os + 16 * w, acc[o][w]);
    }
}

template <int OB, bool ACC>
void mix_rows(float* out, int64_t os, const float* in, int64_t is, const float* C, int64_t co, int64_t ci, int64_t I,
              int64_t len) {
  int64_t j = 0;
  for (; j + 32 <= len; j += 32) mix_tile<OB, ACC, false>(out + j, os, in + j, is, C, co, ci, I, 0);
  for (; j < len; j += 16) mix_tile<OB, ACC, true>(out + j, os, in + j, is, C, co, ci, I, lanes(len - j));
}

template <bool ACC>
void mix_all(float* out, int64_t os, const float* in, int64_t is, const float* C, int64_t co, int64_t ci, int64_t O,
             int64_t I, int64_t len) {
  int64_t o = 0;
  for (; o + 6 <= O; o += 6) mix_rows<6, ACC>(out + o * os, os, in, is, C + o * co, co, ci, I, len);
  with_remainder<6>(O - o, [&](auto r) { mix_rows<r, ACC>(out + o * os, os, in, is, C + o * co, co, ci, I, len); });
}

void mix(float* out, int64_t os, const float* in, int64_t is, const float* C, int64_t co, int64_t ci, int64_t O,
         int64_t I, int64_t len, bool accumulate) {
  if (accumulate) mix_all<true>(out, os, in, is, C, co, ci, O, I, len);
  else mix_all<false>(out, os, in, is, C, co, ci, O, I, len);
}

// ---- gram --------------------------------------------------------------------------------

template <int AB, int CB>
void gram_tile(float* G, int64_t NB, const float* A, int64_t as, const float* B, int64_t bs, int64_t len) {
  __m512 acc[AB][CB];
  for (int a = 0; a < AB; ++a)
    for (int c = 0; c < CB; ++c) acc[a][c] = _mm512_setzero_ps();
  auto step = [&](int64_t j, __mmask16 m) {
    __m512 x[AB], y[CB];
    for (int a = 0; a < AB; ++a) x[a] = _mm512_maskz_loadu_ps(m, A + a * as + j);
    for (int c = 0; c < CB; ++c) y[c] = _mm512_maskz_loadu_ps(m, B + c * bs + j);
    for (int a = 0; a < AB; ++a)
      for (int c = 0; c < CB; ++c) acc[a][c] = _mm512_fmadd_ps(x[a], y[c], acc[a][c]);
  };
  int64_t j = 0;
  for (; j + 16 <= len; j += 16) step(j, 0xFFFF);
  if (j < len) step(j, lanes(len - j));
  for (int a = 0; a < AB; ++a)
    for (int c = 0; c < CB; ++c) G[a * NB + c] += _mm512_reduce_add_ps(acc[a][c]);
}

template <int AB>
void gram_row(float* G, int64_t NB, const float* A, int64_t as, const float* B, int64_t bs, int64_t len) {
  int64_t c = 0;
  for (; c + 4 <= NB; c += 4) gram_tile<AB, 4>(G + c, NB, A, as, B + c * bs, bs, len);
  with_remainder<4>(NB - c, [&](auto r) { gram_tile<AB, r>(G + c, NB, A, as, B + c * bs, bs, len); });
}

void gram(float* G, const float* A, int64_t as, int64_t NA, const float* B, int64_t bs, int64_t NB, int64_t len) {
  int64_t a = 0;
  for (; a + 3 <= NA; a += 3) gram_row<3>(G + a * NB, NB, A + a * as, as, B, bs, len);
  with_remainder<3>(NA - a, [&](auto r) { gram_row<r>(G + a * NB, NB, A + a * as, as, B, bs, len); });
}

// ---- softmax -----------------------------------------------------------------------------

// Lanes whose mask byte is 0.
inline __mmask16 masked_out(const uint8_t* mask, __mmask16 m) {
  const __m512i v = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, mask));
  return _mm512_mask_cmpeq_epi32_mask(m, v, _mm512_setzero_si512());
}

void softmax(float* x, const float* bias, const uint8_t* mask, int64_t len) {
  __m512 vmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < len; j += 16) {
    const __mmask16 m = lanes(len - j);
    __m512 v = _mm512_maskz_loadu_ps(m, x + j);
    if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + j));
    if (mask) v = _mm512_mask_mov_ps(v, masked_out(mask + j, m), _mm512_set1_ps(-1e9f));
    _mm512_mask_storeu_ps(x + j, m, v);
    vmax = _mm512_mask_max_ps(vmax, m, vmax, v);
  }
  const __m512 vm = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
  __m512 vsum = _mm512_setzero_ps();
  for (int64_t j = 0; j < len; j += 16) {
    const __mmask16 m = lanes(len - j);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + j), vm));
    _mm512_mask_storeu_ps(x + j, m, e);
    vsum = _mm512_mask_add_ps(vsum, m, vsum, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vsum));
  for (int64_t j = 0; j < len; j += 16) {
    const __mmask16 m = lanes(len - j);
    _mm512_mask_storeu_ps(x + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + j), inv));
  }
}

float logsumexp(const float* x, int64_t len) {
  __m512 vmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < len; j += 16) {
    const __mmask16 m = lanes(len - j);
    vmax = _mm512_mask_max_ps(vmax, m, vmax, _mm512_maskz_loadu_ps(m, x + j));
  }
  const float mx = _mm512_reduce_max_ps(vmax);
  const __m512 vm = _mm512_set1_ps(mx);
  __m512 vsum = _mm512_setzero_ps();
  for (int64_t j = 0; j < len; j += 16) {
    const __mmask16 m = lanes(len - j);
    vsum = _mm512_mask_add_ps(vsum, m, vsum, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + j), vm)));
  }
  return mx + std::log(_mm512_reduce_add_ps(vsum));
}

void softmax_backward(float* dx, const float* w, const float* g, const uint8_t* mask, int64_t len) {
  __m512 vdot = _mm512_setzero_ps();
  for (int64_t j = 0; j < len; j += 16) {
    const __mmask16 m = lanes(len - j);
    vdot = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w + j), _mm512_maskz_loadu_ps(m, g + j), vdot);
  }
  const __m512 vd = _mm512_set1_ps(_mm512_reduce_add_ps(vdot));
  for (int64_t j = 0; j < len; j += 16) {
    const __mmask16 m = lanes(len - j);
    __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, w + j), _mm512_sub_ps(_mm512_maskz_loadu_ps(m, g + j), vd));
    if (mask) v = _mm512_mask_mov_ps(v, masked_out(mask + j, m), _mm512_setzero_ps());
    _mm512_mask_storeu_ps(dx + j, m, v);
  }
}

// ---- bf16 <-> fp32 ------------------------------------------------------------------------

void bf16_to_float(const uint16_t* in, float* out, int64_t len) {
  for (int64_t j = 0; j < len; j += 16) {
    const __mmask16 m = lanes(len - j);
    const __m256i h = _mm256_maskz_loadu_epi16(m, in + j);
    _mm512_mask_storeu_epi32(out + j, m, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

void float_to_bf16(const float* in, uint16_t* out, int64_t len) {
  for (int64_t j = 0; j < len; j += 16) {
    const __mmask16 m = lanes(len - j);
    _mm256_mask_storeu_epi16(out + j, m, round_to_bf16(_mm512_maskz_loadu_ps(m, in + j)));
  }
}

const Ops kAvx512 = {"avx512", mix, gram, softmax, logsumexp, softmax_backward, bf16_to_float, float_to_bf16};

}  // namespace

const Ops* avx512_ops() { return &kAvx512; }

}  // namespace thx::kernels
