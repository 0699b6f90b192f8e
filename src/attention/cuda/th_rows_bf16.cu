// th_rows_bf16.cu: the FMA row kernels for bf16 (th_rows_kernels.cuh; `thx --th-path tiled-fma`),
// launched as th_launch.cuh says, in a file of their own so that nvcc compiles them beside the
// fp32 ones (th_rows.cu).
#include "attention/cuda/th_launch.cuh"

namespace thx::cuda_th {

template void launch_rows<thx_bf16, false>(const RowsArgs<thx_bf16>&, int, unsigned, unsigned, int, int64_t);
template void launch_rows<thx_bf16, true>(const RowsArgs<thx_bf16>&, int, unsigned, unsigned, int, int64_t);

}  // namespace thx::cuda_th
