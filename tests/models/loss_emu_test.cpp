// The cross-entropy with z-loss as thx's CUDA kernels (src/models/loss_kernels.cuh), run on the
// CPU by the emulator of common/cuda_compat.h (warp shuffles included), against float64 autograd
// of loss.h's formulas: each row's lse, nll and lse^2, and dx for given gradients of the loss sum
// and the nll sum; logits fp32 or bf16, rows of 1,000 keys, 257 (a width no block divides) and 40
// (fewer than the threads: lanes with no key), 64 and 256 threads, padding rows, targets at both
// ends of the vocabulary, and keys at -inf (a row's masked entries). Bounds as FusedLoss's: fp32
// sums in another order, 1e-6 + 1e-5 x max; dx in bf16, one rounding, 2^-8 x max.
#include <gtest/gtest.h>

#include "models/loss_kernels.cuh"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

using torch::Tensor;

// lse, nll, zz [N] and dx from the emulated kernels; g = {g_loss, g_nll}.
template <typename X>
std::vector<Tensor> emulated(const Tensor& x, const Tensor& t, const Tensor& g, double z, int threads) {
  const int64_t N = x.size(0), V = x.size(1);
  Tensor lse = torch::empty({N}), nll = torch::empty({N}), zz = torch::empty({N});
  emu::launch({unsigned(N), 1, 1}, threads, 0, [&] {
    cuda::ce_forward_kernel<X>(data_as<X>(x), t.data_ptr<int64_t>(), lse.data_ptr<float>(), nll.data_ptr<float>(),
                               zz.data_ptr<float>(), V);
  });
  Tensor dx = torch::full_like(x, 7);  // (every element must be written)
  emu::launch({unsigned(N), 1, 1}, threads, 0, [&] {
    cuda::ce_backward_kernel<X>(data_as<X>(x), t.data_ptr<int64_t>(), lse.data_ptr<float>(), g.data_ptr<float>(),
                                float(z), data_as<X>(dx), V);
  });
  return {lse, nll, zz, dx};
}

// The same four in float64, from the formulas by autograd.
std::vector<Tensor> float64(const Tensor& x0, const Tensor& t, const Tensor& g, double z) {
  const Tensor x = x0.to(torch::kFloat64).requires_grad_(true);
  const Tensor lse = torch::logsumexp(x, -1);                                          // [N]
  const Tensor w = (t != 0).to(torch::kFloat64);                                       // [N]
  const Tensor nll = (lse - x.gather(-1, t.unsqueeze(-1)).squeeze(-1)) * w, zz = lse.pow(2) * w;  // [N]
  const Tensor g64 = g.to(torch::kFloat64);
  ((nll.sum() + z * zz.sum()) * g64[0] + nll.sum() * g64[1]).backward();
  return {lse.detach(), nll.detach(), zz.detach(), x.grad()};
}

TEST(CrossEntropyEmulated, KernelsEqualFloat64) {
  const PoisonedCpuMemory poison;  // (test_util.h: a statistic nothing wrote is NaN)
  const double z = 1e-4 * 50;  // (larger than T5's 1e-4, so that the z term shows in dx)
  for (const int64_t V : {1000, 257, 40})
    for (const bool bf16 : {false, true})
      for (const int threads : {64, 256}) {
        SCOPED_TRACE(fmt::format("V {} {} threads {}", V, bf16 ? "bf16" : "fp32", threads));
        torch::manual_seed(3);
        Tensor x = (torch::randn({6, V}) * 3).to(bf16 ? torch::kBFloat16 : torch::kFloat32);  // [N,V]
        x[4].narrow(0, 5, V / 2).fill_(-std::numeric_limits<float>::infinity());            // masked keys
        const Tensor t = torch::tensor({int64_t(1), V - 1, int64_t(0), V / 3, V - 2, int64_t(2)});
        const Tensor g = torch::tensor({0.7f, -0.3f});
        const std::vector<Tensor> got = bf16 ? emulated<thx_bf16>(x, t, g, z, threads)
                                             : emulated<float>(x, t, g, z, threads);
        const std::vector<Tensor> ref = float64(x, t, g, z);
        for (size_t i = 0; i < 4; ++i) {
          const double rtol = bf16 && i == 3 ? 1.0 / 256 : 1e-5;
          EXPECT_TRUE(close(got[i].to(torch::kFloat64), ref[i], 1e-6, rtol)) << "output " << i;
        }
        EXPECT_EQ(got[3][2].abs().sum().item<double>(), 0.0) << "a padding row gets no gradient";
        EXPECT_EQ(got[3][4].narrow(0, 5, V / 2).abs().sum().item<double>(), 0.0) << "a key at -inf gets none";
      }
}

// A target outside [0, V), which the caller refuses before a launch, still reads nothing outside
// its row: NaN for its nll and lse^2 (never a plausible number), and no gradient.
TEST(CrossEntropyEmulated, ATargetOutsideTheVocabularyIsNaNNotARead) {
  torch::manual_seed(4);
  const Tensor x = torch::randn({3, 50});
  const Tensor t = torch::tensor({int64_t(50), int64_t(-1), int64_t(3)});
  const std::vector<Tensor> got = emulated<float>(x, t, torch::tensor({1.f, 0.f}), 1e-4, 64);
  for (int64_t r : {0, 1}) {
    EXPECT_TRUE(std::isnan(got[1][r].item<float>())) << r;
    EXPECT_TRUE(std::isnan(got[2][r].item<float>())) << r;
    EXPECT_EQ(got[3][r].abs().sum().item<double>(), 0.0) << r;
  }
  EXPECT_TRUE(std::isfinite(got[1][2].item<float>()));
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
