// th_flash_forward_for.cuh: the flash forward's kernel for each bucket (th_flash_kernels.cuh), for
// its launch (th_flash_forward.cu) and the emulator's (tests/attention/rows_emulator.h). A header
// of its own: th_flash_backward.cu includes th_flash_kernels.cuh for the device functions the two
// directions share, and nvcc would compile the forward kernels named here there too.
#pragma once
#include "attention/cuda/th_flash_kernels.cuh"

namespace thx::cuda_th {

// The flash forward for bucket (H, DV) (flash_bucket's).
inline auto flash_kernel_for(int H, int DV) {
  using K = void (*)(FlashArgs<thx_bf16>);
  if (H == 16) return DV == 16 ? K(flash::flash_forward_kernel<16, 16>)
                      : DV == 32 ? K(flash::flash_forward_kernel<16, 32>) : K(flash::flash_forward_kernel<16, 64>);
  if (H == 32) return DV == 16 ? K(flash::flash_forward_kernel<32, 16>) : K(flash::flash_forward_kernel<32, 32>);
  return K(flash::flash_forward_kernel<48, 16>);
}

}  // namespace thx::cuda_th
