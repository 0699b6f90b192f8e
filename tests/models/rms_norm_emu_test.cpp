// T5's RMS norm as thx's CUDA kernels (src/models/rms_norm_kernels.cuh), run on the CPU by the
// emulator of common/cuda_compat.h (warp shuffles included), against float64 autograd of the
// formula y = x * rsqrt(mean(x^2) + 1e-6) * scale: y, dx and dscale, for x and y each fp32 or
// bf16, rows of 768 (T5-base) and 200 (a width the block does not divide), 64 and 256 threads,
// and a backward grid of fewer blocks than rows (each block strides over rows and keeps its own
// dscale partial). Bounds as DevicePath.RmsNormOnCudaEqualsTheComposition's: fp32 sums in
// another order, 1e-6 + 1e-5 x max; a bf16 value, one rounding, 2^-8 x max.
#include <gtest/gtest.h>

#include "models/rms_norm_kernels.cuh"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

using torch::Tensor;

// y, dx, dscale from the emulated kernels; x and dy in their dtypes, scale fp32.
template <typename X, typename Y>
std::vector<Tensor> emulated(const Tensor& x, const Tensor& scale, const Tensor& dy, int threads, int bwd_blocks) {
  const int64_t d = x.size(-1), rows = x.numel() / d;
  Tensor y = torch::empty(x.sizes(), dy.options()), r = torch::empty({rows});
  emu::launch({unsigned(rows), 1, 1}, threads, 0, [&] {
    cuda::rms_forward_kernel<X, Y>(data_as<X>(x), scale.data_ptr<float>(), data_as<Y>(y), r.data_ptr<float>(), d);
  });
  Tensor dx = torch::empty_like(x), part = torch::empty({bwd_blocks, d});
  emu::launch({unsigned(bwd_blocks), 1, 1}, threads, size_t(d) * 4, [&] {
    cuda::rms_backward_kernel<X, Y>(data_as<X>(x), scale.data_ptr<float>(), r.data_ptr<float>(), data_as<Y>(dy),
                                    data_as<X>(dx), part.data_ptr<float>(), rows, d);
  });
  return {y, dx, part.sum(0)};
}

std::vector<Tensor> float64(const Tensor& x0, const Tensor& scale0, const Tensor& dy) {
  const Tensor x = x0.to(torch::kFloat64).requires_grad_(true), scale = scale0.to(torch::kFloat64).requires_grad_(true);
  const Tensor y = x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-6) * scale;
  (y * dy.to(torch::kFloat64)).sum().backward();
  return {y.detach(), x.grad(), scale.grad()};
}

TEST(RmsNormEmulated, KernelsEqualFloat64) {
  const PoisonedCpuMemory poison;  // (test_util.h: an output element nothing wrote is NaN)
  for (const int64_t d : {768, 200})
    for (const bool xb : {false, true})
      for (const bool yb : {false, true})
        for (const int threads : {64, 256}) {
          SCOPED_TRACE(
              fmt::format("d {} x {} y {} threads {}", d, xb ? "bf16" : "fp32", yb ? "bf16" : "fp32", threads));
          torch::manual_seed(2);
          const Tensor x = torch::randn({5, d}).to(xb ? torch::kBFloat16 : torch::kFloat32);
          const Tensor dy = torch::randn({5, d}).to(yb ? torch::kBFloat16 : torch::kFloat32);
          const Tensor scale = 1 + 0.1 * torch::randn({d});
          std::vector<Tensor> got;
          if (xb && yb) got = emulated<thx_bf16, thx_bf16>(x, scale, dy, threads, 3);
          else if (xb) got = emulated<thx_bf16, float>(x, scale, dy, threads, 3);
          else if (yb) got = emulated<float, thx_bf16>(x, scale, dy, threads, 3);
          else got = emulated<float, float>(x, scale, dy, threads, 3);
          const std::vector<Tensor> ref = float64(x, scale, dy);
          for (size_t i = 0; i < 3; ++i) {
            const double rtol = xb || yb ? 1.0 / 256 : 1e-5;
            EXPECT_TRUE(close(got[i].to(torch::kFloat64), ref[i], 1e-6, rtol)) << "output " << i;
          }
        }
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
