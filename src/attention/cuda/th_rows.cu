// th_rows.cu: CUDA's launcher for the talking-heads row kernels (th_rows_kernels.cuh). No torch
// header here: attention/tiled.cpp prepares the arguments; this file only launches, on the current
// stream, with the dynamic shared memory each launch needs opted in (above 48 KB a kernel must ask).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include "attention/cuda/th_rows_args.h"
#include "attention/cuda/th_rows_kernels.cuh"

namespace thx {
namespace {

using cuda_th::RowsArgs;

template <typename T, bool Backward>
void launch(const RowsArgs<T>& a, int H, unsigned gx, unsigned gy, int threads, int64_t bytes) {
  auto kernel = cuda_th::rows_kernel_for<T, Backward>(H);
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  kernel<<<dim3(gx, gy), threads, size_t(bytes), at::cuda::getCurrentCUDAStream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

const cuda_th::RowsLauncher* cuda_th_rows_launcher() {
  static const cuda_th::RowsLauncher launcher{128, 4096, launch<float, false>, launch<thx_bf16, false>,
                                              launch<float, true>, launch<thx_bf16, true>};
  return &launcher;
}

}  // namespace thx
