// th_flash_backward.cu: the flash backward's passes (th_flash_backward.cuh; pass D without the
// gradients, pass G with them), launched as th_launch.cuh says, in a file of their own.
#include "attention/cuda/th_flash_backward.cuh"
#include "attention/cuda/th_launch.cuh"

namespace thx::cuda_th {

void launch_flash_backward(const FlashBackArgs<thx_bf16>& a, int H, int D, bool grads, unsigned gx, unsigned gy,
                           int64_t bytes) {
  start_kernel(grads ? flash_backward_kernel_for<true>(H, D) : flash_backward_kernel_for<false>(H, D), a, gx, gy,
               kFlashBackThreads, bytes);
}

}  // namespace thx::cuda_th
