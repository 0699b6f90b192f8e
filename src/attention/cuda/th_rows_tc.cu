// th_rows_tc.cu: the row kernels on tensor cores (th_rows_tc_kernels.cuh; bf16, the tiled path's
// default on a GPU), launched as th_launch.cuh says, in a file of their own.
#include "attention/cuda/th_launch.cuh"
#include "attention/cuda/th_rows_tc_kernels.cuh"

namespace thx::cuda_th {

template <bool Backward>
void launch_rows_tc(const RowsArgs<thx_bf16>& a, int H, unsigned gx, unsigned gy, int threads, int64_t bytes) {
  start_kernel(rows_tc_kernel_for<Backward>(H), a, gx, gy, threads, bytes);
}
template void launch_rows_tc<false>(const RowsArgs<thx_bf16>&, int, unsigned, unsigned, int, int64_t);
template void launch_rows_tc<true>(const RowsArgs<thx_bf16>&, int, unsigned, unsigned, int, int64_t);

}  // namespace thx::cuda_th
