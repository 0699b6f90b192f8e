// th_rows.cu: CUDA's launcher for the talking-heads row kernels (th_rows_kernels.cuh, and for bf16
// th_rows_tc_kernels.cuh's on tensor cores unless asked for the FMAs). No torch
// header here: attention/tiled.cpp prepares the arguments; this file only launches, on the current
// stream, with the dynamic shared memory each launch needs opted in (above 48 KB a kernel must ask).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include "attention/cuda/th_flash_backward.cuh"
#include "attention/cuda/th_flash_kernels.cuh"
#include "attention/cuda/th_rows_args.h"
#include "attention/cuda/th_rows_kernels.cuh"
#include "attention/cuda/th_rows_tc_kernels.cuh"

namespace thx {
namespace {

using cuda_th::RowsArgs;

// The kernel f on the current stream, its dynamic shared memory opted in.
template <typename T>
void start(void (*f)(RowsArgs<T>), const RowsArgs<T>& a, unsigned gx, unsigned gy, int threads, int64_t bytes) {
  C10_CUDA_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  f<<<dim3(gx, gy), threads, size_t(bytes), at::cuda::getCurrentCUDAStream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
template <typename T, bool Backward>
void launch(const RowsArgs<T>& a, int H, unsigned gx, unsigned gy, int threads, int64_t bytes) {
  start(cuda_th::rows_kernel_for<T, Backward>(H), a, gx, gy, threads, bytes);
}
template <bool Backward>
void launch_tc(const RowsArgs<thx_bf16>& a, int H, unsigned gx, unsigned gy, int threads, int64_t bytes) {
  start(cuda_th::rows_tc_kernel_for<Backward>(H), a, gx, gy, threads, bytes);
}

void launch_flash(const cuda_th::FlashArgs<thx_bf16>& a, int H, int DV, unsigned gx, unsigned gy, int64_t bytes) {
  const auto f = cuda_th::flash_kernel_for(H, DV);
  C10_CUDA_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  f<<<dim3(gx, gy), cuda_th::kFlashThreads, size_t(bytes), at::cuda::getCurrentCUDAStream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void launch_flash_backward(const cuda_th::FlashBackArgs<thx_bf16>& a, int H, int D, bool grads, unsigned gx,
                           unsigned gy, int64_t bytes) {
  const auto f =
      grads ? cuda_th::flash_backward_kernel_for<true>(H, D) : cuda_th::flash_backward_kernel_for<false>(H, D);
  C10_CUDA_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  f<<<dim3(gx, gy), cuda_th::kFlashBackThreads, size_t(bytes), at::cuda::getCurrentCUDAStream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

cuda_th::RowsLauncher with_flash(cuda_th::RowsLauncher l) {
  int device = 0, optin = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  l.flash_forward = launch_flash, l.flash_backward = launch_flash_backward, l.flash_shared_limit = optin;
  return l;
}

}  // namespace

const cuda_th::RowsLauncher* cuda_th_rows_launcher(bool tensor_cores, bool flash) {
  static const cuda_th::RowsLauncher fma{128, 4096, launch<float, false>, launch<thx_bf16, false>,
                                         launch<float, true>, launch<thx_bf16, true>};
  static const cuda_th::RowsLauncher tc{128,        4096, launch<float, false>, launch<thx_bf16, false>,
                                        launch<float, true>, launch<thx_bf16, true>, launch_tc<false>,
                                        launch_tc<true>};
  if (!tensor_cores) return &fma;
  if (!flash) return &tc;
  static const cuda_th::RowsLauncher with = with_flash(tc);
  return &with;
}

}  // namespace thx
