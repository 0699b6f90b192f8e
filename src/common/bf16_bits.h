// bf16_bits.h: bf16 as its 16 bits, for thx's CUDA kernels and the plain C++ that prepares their
// arguments (c10::BFloat16 and CUDA's __nv_bfloat16 have this layout). Conversions:
// cuda_compat.h.
#pragma once
#include <cstdint>

struct thx_bf16 {
  uint16_t bits;
};
