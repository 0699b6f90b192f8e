// kernels_avx512_shared.h: AVX-512 inline helpers that kernels_avx512.cpp and kernels_amx.cpp
// share. Include it only from files compiled with -mavx512f -mavx512bw -mavx512vl
// (CMakeLists.txt), never from code that runs on a CPU without AVX-512.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace thx::kernels {

inline __mmask16 lanes(int64_t n) { return __mmask16((1u << std::min<int64_t>(n, 16)) - 1); }  // [0, n) set

// 16 floats to bf16, rounded to nearest even, NaN -> 0x7FC0: c10::BFloat16's rounding.
inline __m256i round_to_bf16(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb)), 16);
  r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC0));
  return _mm512_cvtepi32_epi16(r);
}

}  // namespace thx::kernels
