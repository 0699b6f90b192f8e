// kernels.h: the CPU inner loops of the fused attention core (fused.h), on raw float rows, and
// the bf16 <-> fp32 row conversions of the bf16 paths, in three builds: AVX-512
// (kernels_avx512.cpp) and AVX2+FMA (kernels_avx2.cpp), each chosen when the CPU has it, and
// portable loops (kernels.cpp). Tests check each against the portable loops and against ATen.
//
// Row layout: a "row" is len consecutive floats; consecutive rows are `stride` apart.
// No torch here, so the SIMD files compile without the torch precompiled header.
#pragma once
#include <cstdint>
#include <vector>

namespace thx::kernels {

struct Ops {
  const char* name;
  // out[o*out_stride + j] (+)= sum_i C[o*c_o + i*c_i] * in[i*in_stride + j], o < O, j < len:
  // a small GEMM whose left factor may be read transposed (c_o = 1). With accumulate the
  // sum is added to out, else it replaces it.
  void (*mix)(float* out, int64_t out_stride, const float* in, int64_t in_stride,
              const float* C, int64_t c_o, int64_t c_i, int64_t O, int64_t I, int64_t len,
              bool accumulate);
  // G[a*NB + c] += sum_j A[a*a_stride + j] * B[c*b_stride + j], for a < NA, c < NB.
  void (*gram)(float* G, const float* A, int64_t a_stride, int64_t NA, const float* B,
               int64_t b_stride, int64_t NB, int64_t len);
  // In place: x = softmax(x + bias) over len, with x = -1e9 where mask[j] == 0.
  // bias and mask may be null.
  void (*softmax)(float* x, const float* bias, const uint8_t* mask, int64_t len);
  // log(sum_j exp(x[j])), computed stably.
  float (*logsumexp)(const float* x, int64_t len);
  // dx = w * (g - sum(w * g)), and 0 where mask[j] == 0 (mask may be null).
  void (*softmax_backward)(float* dx, const float* w, const float* g, const uint8_t* mask,
                           int64_t len);
  // bf16 (its 16 bits, as c10::BFloat16 stores them) to fp32: exact.
  void (*bf16_to_float)(const uint16_t* in, float* out, int64_t len);
  // fp32 to bf16, rounded to nearest even as c10::BFloat16 does (NaN stays NaN).
  void (*float_to_bf16)(const float* in, uint16_t* out, int64_t len);
};

const Ops& generic_ops();
const Ops* avx2_ops();    // null when this build has no AVX2 kernels
const Ops* avx512_ops();  // null when this build has no AVX-512 kernels
// AVX-512 (F, BW, VL) when the CPU supports it, else AVX2+FMA, else the portable loops. The
// environment variable THX_KERNELS (generic | avx2 | avx512) picks one of those the CPU can
// run instead (to compare them on one machine); it is read once.
const Ops& best_ops();
// Every build this CPU can run, the portable loops first (tests compare them).
std::vector<const Ops*> available_ops();

}  // namespace thx::kernels
