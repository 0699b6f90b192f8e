// th_softmax.cu: the heads-major path's softmax (th_softmax_kernels.cuh; fp32 and bf16), launched
// as th_launch.cuh says, in a file of its own.
#include "attention/cuda/th_launch.cuh"
#include "attention/cuda/th_softmax_kernels.cuh"

namespace thx::cuda_th {

template <typename T>
void launch_softmax(const RowsArgs<T>& a, int cache, bool pairs, unsigned grid_x) {
  start_kernel(softmax_kernel_for<T>(cache, pairs), a, grid_x, 1, kSoftmaxThreads, 0);
}
template void launch_softmax<float>(const RowsArgs<float>&, int, bool, unsigned);
template void launch_softmax<thx_bf16>(const RowsArgs<thx_bf16>&, int, bool, unsigned);

}  // namespace thx::cuda_th
