// rms_norm_cuda.cu: launches rms_norm_kernels.cuh's kernels (256 threads a block) on the current
// stream.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <algorithm>

#include "models/rms_norm_cuda.h"
#include "models/rms_norm_kernels.cuh"

namespace thx::cuda {
namespace {

constexpr int kThreads = 256;

// f(X{}, Y{}) with X and Y the element types of x's and y's dtypes (fp32 or bf16 each).
template <typename F>
void with_dtypes(at::ScalarType xt, at::ScalarType yt, F&& f) {
  const bool xb = xt == at::kBFloat16, yb = yt == at::kBFloat16;
  TORCH_CHECK((xt == at::kFloat || xb) && (yt == at::kFloat || yb), "rms_norm_cuda: fp32 or bf16 only");
  if (xb && yb) f(thx_bf16{}, thx_bf16{});
  else if (xb) f(thx_bf16{}, float{});
  else if (yb) f(float{}, thx_bf16{});
  else f(float{}, float{});
}

}  // namespace

void rms_norm_forward(const at::Tensor& x, const at::Tensor& scale, at::Tensor& y, at::Tensor& r) {
  const int64_t d = x.size(-1), rows = x.numel() / d;
  if (rows == 0) return;
  const auto stream = at::cuda::getCurrentCUDAStream();
  with_dtypes(x.scalar_type(), y.scalar_type(), [&](auto xv, auto yv) {
    using X = decltype(xv);
    using Y = decltype(yv);
    rms_forward_kernel<X, Y><<<unsigned(rows), kThreads, 0, stream>>>(
        static_cast<const X*>(x.data_ptr()), scale.data_ptr<float>(), static_cast<Y*>(y.data_ptr()),
        r.data_ptr<float>(), d);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

void rms_norm_backward(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& r, const at::Tensor& dy,
                       at::Tensor& dx, at::Tensor& dscale) {
  const int64_t d = x.size(-1), rows = x.numel() / d;
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(rows, 4 * int64_t(sms)));
  at::Tensor part = at::empty({blocks, d}, scale.options());
  const auto stream = at::cuda::getCurrentCUDAStream();
  TORCH_CHECK(d * int64_t(sizeof(float)) <= 48 * 1024, "rms_norm_cuda: d = ", d, " needs more shared memory than 48 KB");
  if (rows > 0)
    with_dtypes(x.scalar_type(), dy.scalar_type(), [&](auto xv, auto yv) {
      using X = decltype(xv);
      using Y = decltype(yv);
      rms_backward_kernel<X, Y><<<unsigned(blocks), kThreads, size_t(d) * sizeof(float), stream>>>(
          static_cast<const X*>(x.data_ptr()), scale.data_ptr<float>(), r.data_ptr<float>(),
          static_cast<const Y*>(dy.data_ptr()), static_cast<X*>(dx.data_ptr()), part.data_ptr<float>(), rows, d);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  else
    part.zero_();
  dscale = part.sum(0);
}

}  // namespace thx::cuda
