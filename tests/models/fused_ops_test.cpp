// Fused model ops against their ATen compositions (double precision): the cross-entropy +
// z-loss, RMS norm, and the logsumexp kernel. Tolerance 1e-6 + 1e-5 * max|ref| (fp32 vs fp64
// over one row of a few hundred to a few thousand terms).
#include <gtest/gtest.h>

#include "attention/kernels.h"
#include "models/loss.h"
#include "models/t5.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

TEST(FusedLoss, EqualsTheAtenCompositionWithGradients) {
  torch::manual_seed(1);
  const int64_t N = 37, V = 1003;  // odd sizes: vector tails
  torch::Tensor x = (torch::randn({N, V}) * 3).requires_grad_(true);
  torch::Tensor t = torch::randint(2, V, {N});
  t.narrow(0, 30, 7).fill_(0);  // padding
  const double z = 0.05;
  const LossSums f = cross_entropy_z_loss(x, t, z);
  const torch::Tensor gl = torch::tensor(0.7f), gn = torch::tensor(-0.3f);
  torch::autograd::backward({f.loss_sum, f.nll_sum}, {gl, gn});
  const torch::Tensor dx = x.grad().clone();
  torch::Tensor xd = x.detach().to(torch::kFloat64).requires_grad_(true);
  const LossSums r = cross_entropy_z_loss_reference(xd, t, z);
  torch::autograd::backward({r.loss_sum, r.nll_sum}, {gl.to(torch::kFloat64), gn.to(torch::kFloat64)});
  EXPECT_NEAR(f.loss_sum.item<double>(), r.loss_sum.item<double>(), 1e-5 * std::abs(r.loss_sum.item<double>()));
  EXPECT_NEAR(f.nll_sum.item<double>(), r.nll_sum.item<double>(), 1e-5 * std::abs(r.nll_sum.item<double>()));
  EXPECT_TRUE(close(dx, xd.grad(), 1e-6, 1e-5));
  EXPECT_EQ(dx.narrow(0, 30, 7).abs().sum().item<double>(), 0.0) << "padding rows get no gradient";
}

TEST(FusedRMSNorm, EqualsTheFormulaWithGradients) {
  torch::manual_seed(2);
  RMSNorm norm(130);
  {
    torch::NoGradGuard g;
    norm->scale.copy_(torch::randn({130}));
  }
  torch::Tensor x = (torch::randn({3, 11, 130}) + 1).requires_grad_(true);
  const torch::Tensor G = torch::randn({3, 11, 130});
  (norm->forward(x) * G).sum().backward();
  torch::Tensor xd = x.detach().to(torch::kFloat64).requires_grad_(true);
  torch::Tensor sd = norm->scale.detach().to(torch::kFloat64).requires_grad_(true);
  const torch::Tensor yd = xd * torch::rsqrt(xd.pow(2).mean(-1, true) + 1e-6) * sd;
  (yd * G.to(torch::kFloat64)).sum().backward();
  EXPECT_TRUE(close(norm->forward(x), yd, 1e-6, 1e-5));
  EXPECT_TRUE(close(x.grad(), xd.grad(), 1e-6, 1e-5));
  EXPECT_TRUE(close(norm->scale.grad(), sd.grad(), 1e-6, 1e-5));
}

TEST(Kernels, LogSumExp) {
  for (const kernels::Ops* k : kernels::available_ops())
    for (int64_t len : {1, 7, 8, 9, 100, 8100}) {
      torch::manual_seed(len);
      const torch::Tensor x = torch::randn({len}) * 20;
      const double want = torch::logsumexp(x.to(torch::kFloat64), 0).item<double>();
      EXPECT_NEAR(k->logsumexp(x.data_ptr<float>(), len), want, 1e-5 * std::abs(want) + 1e-5)
          << k->name << " len " << len;
    }
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
