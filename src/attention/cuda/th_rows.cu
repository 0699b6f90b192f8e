// th_rows.cu: CUDA's launcher for the talking-heads row kernels (tiled.h's RowsLauncher): the FMA
// row kernels (th_rows_kernels.cuh; fp32 here, bf16 in th_rows_bf16.cu), for bf16 those on tensor
// cores unless asked for the FMAs (th_rows_tc.cu), the flash kernels where asked for
// (th_flash_forward.cu, th_flash_backward.cu), and the heads-major path's softmax (th_softmax.cu)
// and mixings across few heads (th_mix.cu).
// No torch tensor here: attention/tiled.cpp prepares the arguments; these files only launch
// (th_launch.cuh).
#include "attention/cuda/th_launch.cuh"

namespace thx {
namespace cuda_th {

template void launch_rows<float, false>(const RowsArgs<float>&, int, unsigned, unsigned, int, int64_t);
template void launch_rows<float, true>(const RowsArgs<float>&, int, unsigned, unsigned, int, int64_t);
// (th_rows_bf16.cu's: named below, made there)
extern template void launch_rows<thx_bf16, false>(const RowsArgs<thx_bf16>&, int, unsigned, unsigned, int, int64_t);
extern template void launch_rows<thx_bf16, true>(const RowsArgs<thx_bf16>&, int, unsigned, unsigned, int, int64_t);

}  // namespace cuda_th

namespace {

cuda_th::RowsLauncher with_flash(cuda_th::RowsLauncher l) {
  int device = 0, optin = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  l.flash_forward = cuda_th::launch_flash_forward, l.flash_backward = cuda_th::launch_flash_backward;
  l.flash_shared_limit = optin;
  return l;
}

cuda_th::RowsLauncher with_heads_major(cuda_th::RowsLauncher l) {
  l.softmax_f32 = cuda_th::launch_softmax<float>, l.softmax_bf16 = cuda_th::launch_softmax<thx_bf16>;
  l.mix_f32 = cuda_th::launch_mix<float>, l.mix_bf16 = cuda_th::launch_mix<thx_bf16>;
  return l;
}

}  // namespace

const cuda_th::RowsLauncher* cuda_th_rows_launcher(bool tensor_cores, bool flash) {
  using cuda_th::launch_rows, cuda_th::launch_rows_tc;
  static const cuda_th::RowsLauncher fma = with_heads_major({128, 4096, launch_rows<float, false>,
                                                             launch_rows<thx_bf16, false>, launch_rows<float, true>,
                                                             launch_rows<thx_bf16, true>});
  static const cuda_th::RowsLauncher tc = with_heads_major({128, 4096, launch_rows<float, false>,
                                                            launch_rows<thx_bf16, false>, launch_rows<float, true>,
                                                            launch_rows<thx_bf16, true>, launch_rows_tc<false>,
                                                            launch_rows_tc<true>});
  if (!tensor_cores) return &fma;
  if (!flash) return &tc;
  static const cuda_th::RowsLauncher with = with_flash(tc);
  return &with;
}

}  // namespace thx
