// adafactor_cuda.cu: adafactor_plan.h's launches on the current CUDA stream, the scratch from
// LibTorch's caching allocator.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include "training/adafactor_plan.h"

namespace thx::cuda::adafactor {
namespace {

struct CudaLaunch {
  cudaStream_t stream;
  template <class K, class... A>
  void operator()(K kernel, Grid g, int threads, A... args) {
    kernel<<<dim3(g.x, g.y, g.z), unsigned(threads), 0, stream>>>(args...);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
};

}  // namespace

void group_step_cuda(const GroupStep& s) {
  const c10::cuda::CUDAGuard guard(c10::DeviceIndex(s.device));  // its stream and scratch on the tensors' GPU
  const ScratchSizes z = scratch_sizes(s);
  at::Tensor scratch = at::empty({z.total()}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA));
  CudaLaunch launch{at::cuda::getCurrentCUDAStream()};
  run_group_step(launch, s, Scratch(scratch.data_ptr<float>(), z));
}

}  // namespace thx::cuda::adafactor
