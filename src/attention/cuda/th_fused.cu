// th_fused.cu: CUDA's Launcher for the fused talking-heads kernels (th_kernels.cuh). No torch header
// here: th_fused.cpp prepares the arguments; this file only launches, on the current stream, with
// the dynamic shared memory each launch needs opted in (above 48 KB a kernel must ask).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include "attention/cuda/th_args.h"
#include "attention/cuda/th_kernels.cuh"

namespace thx {
namespace {

using cuda_th::Args;

template <typename T, bool Backward>
void launch(const Args<T>& a, unsigned gx, unsigned gy, int threads, int64_t bytes) {
  auto kernel = cuda_th::kernel_for<T, Backward>(a.tensor_cores);
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  kernel<<<dim3(gx, gy), threads, size_t(bytes), at::cuda::getCurrentCUDAStream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

cuda_th::Launcher make_launcher() {
  int device = 0, optin = 0, major = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return {optin,           256, major >= 8,  // bf16 mma.sync: sm_80 and later
          launch<float, false>, launch<thx_bf16, false>, launch<float, true>, launch<thx_bf16, true>};
}

}  // namespace

const cuda_th::Launcher* cuda_th_launcher() {
  static const cuda_th::Launcher launcher = make_launcher();
  return &launcher;
}

}  // namespace thx
