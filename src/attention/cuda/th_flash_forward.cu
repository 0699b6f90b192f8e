// th_flash_forward.cu: the flash forward (th_flash_kernels.cuh, its bucket's kernel by
// th_flash_forward_for.cuh), launched as th_launch.cuh says, in a file of its own.
#include "attention/cuda/th_flash_forward_for.cuh"
#include "attention/cuda/th_launch.cuh"

namespace thx::cuda_th {

void launch_flash_forward(const FlashArgs<thx_bf16>& a, int H, int DV, unsigned gx, unsigned gy, int64_t bytes) {
  start_kernel(flash_kernel_for(H, DV), a, gx, gy, kFlashThreads, bytes);
}

}  // namespace thx::cuda_th
