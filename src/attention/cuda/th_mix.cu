// th_mix.cu: the heads-major path's mixings across few heads (th_mix_kernels.cuh; fp32 and bf16),
// launched as th_launch.cuh says, in a file of their own.
#include "attention/cuda/th_launch.cuh"
#include "attention/cuda/th_mix_kernels.cuh"

namespace thx::cuda_th {

template <typename T>
void launch_mix(const MixArgs<T>& a, bool grad, bool pairs, unsigned grid_x, unsigned grid_y) {
  start_kernel(mix_kernel_for<T>(grad, pairs), a, grid_x, grid_y, kMixThreads, 0);
}
template void launch_mix<float>(const MixArgs<float>&, bool, bool, unsigned, unsigned);
template void launch_mix<thx_bf16>(const MixArgs<thx_bf16>&, bool, bool, unsigned, unsigned);

}  // namespace thx::cuda_th
