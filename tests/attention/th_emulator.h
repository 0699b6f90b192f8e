// The fused talking-heads kernels' launcher on the CPU emulator (common/cuda_compat.h), for the
// tests that run them through th_fused.cpp as a GPU would.
#pragma once
#include "attention/cuda/th_args.h"
#include "attention/cuda/th_kernels.cuh"

namespace thx::test::th_emu {

template <typename T, bool Backward>
void emulate(const cuda_th::Args<T>& a, unsigned gx, unsigned gy, int threads, int64_t bytes) {
  emu::launch({gx, gy, 1}, threads, size_t(bytes), [&a] { cuda_th::kernel_for<T, Backward>(a.tensor_cores)(a); });
}

// tensor_cores: bf16 problems take version 2's products (common/cuda_mma.h), emulated.
inline cuda_th::Launcher emulator(int threads, int64_t shared_limit = 1 << 20, bool tensor_cores = false) {
  return {shared_limit,          threads, tensor_cores, emulate<float, false>, emulate<thx_bf16, false>,
          emulate<float, true>, emulate<thx_bf16, true>};
}

}  // namespace thx::test::th_emu
