// loss_cuda.cu: launches loss_kernels.cuh's kernels (256 threads a block, a block a row) on the
// current stream of the logits' GPU.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include "models/loss_cuda.h"
#include "models/loss_kernels.cuh"

namespace thx::cuda {
namespace {

constexpr int kThreads = 256;

// f(X{}) with X the element type of the logits' dtype.
template <typename F>
void with_dtype(at::ScalarType xt, F&& f) {
  TORCH_CHECK(xt == at::kFloat || xt == at::kBFloat16, "loss_cuda: fp32 or bf16 logits only");
  if (xt == at::kBFloat16) f(thx_bf16{});
  else f(float{});
}

// f(X{}, stream) for a launch of a block a row of x [rows, V] on x's GPU; none where x has no rows.
template <typename F>
void per_row(const at::Tensor& x, F&& f) {
  if (x.size(0) == 0) return;
  const c10::cuda::CUDAGuard guard(x.device());
  const auto stream = at::cuda::getCurrentCUDAStream();
  with_dtype(x.scalar_type(), [&](auto xv) { f(xv, stream); });
}

}  // namespace

void cross_entropy_forward(const at::Tensor& x, const at::Tensor& targets, at::Tensor& lse, at::Tensor& nll,
                           at::Tensor& zz) {
  const int64_t rows = x.size(0), V = x.size(1);
  per_row(x, [&](auto xv, const auto& stream) {
    using X = decltype(xv);
    ce_forward_kernel<X><<<unsigned(rows), kThreads, 0, stream>>>(
        static_cast<const X*>(x.data_ptr()), targets.data_ptr<int64_t>(), lse.data_ptr<float>(),
        nll.data_ptr<float>(), zz.data_ptr<float>(), V);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

void cross_entropy_backward(const at::Tensor& x, const at::Tensor& targets, const at::Tensor& lse,
                            const at::Tensor& g, double z, at::Tensor& dx) {
  const int64_t rows = x.size(0), V = x.size(1);
  per_row(x, [&](auto xv, const auto& stream) {
    using X = decltype(xv);
    ce_backward_kernel<X><<<unsigned(rows), kThreads, 0, stream>>>(
        static_cast<const X*>(x.data_ptr()), targets.data_ptr<int64_t>(), lse.data_ptr<float>(), g.data_ptr<float>(),
        float(z), static_cast<X*>(dx.data_ptr()), V);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace thx::cuda
