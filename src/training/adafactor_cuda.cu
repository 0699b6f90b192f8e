// adafactor_cuda.cu: adafactor_plan.h's launches on the current CUDA stream, the scratch from
// LibTorch's caching allocator.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

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
  void zero(float* p, int64_t n) {
    if (n > 0) C10_CUDA_CHECK(cudaMemsetAsync(p, 0, size_t(n) * sizeof(float), stream));
  }
};

}  // namespace

void group_step_cuda(const GroupStep& s) {
  const ScratchSizes z = scratch_sizes(s);
  const int64_t floats = z.sums_r + z.sums_c + z.sums_rm + z.vrm + z.stats;
  at::Tensor scratch = at::empty({floats}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA));
  float* p = scratch.data_ptr<float>();
  CudaLaunch launch{at::cuda::getCurrentCUDAStream()};
  run_group_step(launch, s, p, p + z.sums_r, p + z.sums_r + z.sums_c, p + z.sums_r + z.sums_c + z.sums_rm,
                 p + z.sums_r + z.sums_c + z.sums_rm + z.vrm);
}

}  // namespace thx::cuda::adafactor
