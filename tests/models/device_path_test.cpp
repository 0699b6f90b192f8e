// The device path on the CPU: with the hand-written CPU kernels turned off (set_cpu_kernels),
// every model runs the ATen compositions a CUDA tensor would take. One training step of a T5
// (multi-head, talking-heads) and an ALBERT (talking-heads) must give the CPU kernels' loss
// (relative 1e-6) and every gradient (1e-6 + 1e-4 x max|g|: fp32 sums in another order), and
// Adafactor's ATen update the same parameters (1e-6 + 1e-5 x max|w|); the key bias, whose
// gradient is only rounding residue, must stay at residue on both paths.
// Where a GPU is (the *OnCuda tests; skipped elsewhere), the same step with the model, its
// batch and Adafactor's state on CUDA meets the same bounds against the CPU kernels (cuBLAS
// sums in yet another order; TF32 is off, LibTorch's default for fp32 matmuls). The same steps
// again with the talking-heads family on each path of cuBLAS's products a GPU may take
// (`--th-path` tiled-aten, tiled-gemm, gemm, folded; gemm-aten on a GPU), on the CPU
// (set_th_paths_on_cpu) and on a GPU.
#include <gtest/gtest.h>

#include <vector>

#include "attention/emulated_cores.h"
#include "attention/fused.h"
#include "common/precision.h"
#include "common/runtime.h"
#include "models/encoder.h"
#include "models/loss.h"
#include "models/spec.h"
#include "models/t5.h"
#include "test_util.h"
#include "training/optimizer.h"
#include "training/pretrain.h"
#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

// The talking-heads family on `aten_path` (`--th-path`; none: as it was) on `device`: on the
// CPU, the CPU kernels off, and the path a GPU would take for CPU tensors too
// (set_th_paths_on_cpu), with the row kernels on the emulator where `rows` is given.
struct OtherPath {
  OtherPath(const torch::Device& device, const char* aten_path, const cuda_th::RowsLauncher* rows = nullptr)
      : path(th_path()), chosen(th_path_chosen()) {
    if (device.is_cpu()) set_cpu_kernels(false), set_th_paths_on_cpu(aten_path != nullptr, rows);
    if (aten_path) set_th_path(aten_path, false);
  }
  ~OtherPath() {
    set_cpu_kernels(true), set_th_paths_on_cpu(false);
    set_th_path(path, chosen);
  }
  const std::string path;
  const bool chosen;
};

struct Step {
  double loss = 0;
  std::vector<torch::Tensor> grads, after;
};

// Loss, gradients and Adafactor-updated parameters of one step, from the same start.
template <class Forward>
Step step(torch::nn::Module& m, const std::vector<std::pair<std::string, torch::Tensor>>& params,
          const std::vector<torch::Tensor>& start, Forward forward) {
  {
    torch::NoGradGuard g;
    for (size_t i = 0; i < params.size(); ++i) params[i].second.copy_(start[i]);
  }
  for (const auto& [k, p] : params) p.mutable_grad() = torch::Tensor();
  Step s;
  const torch::Tensor loss = forward();
  loss.backward();
  s.loss = loss.item<double>();
  std::vector<OptimizedParam> op;
  for (const auto& [k, p] : params) {
    s.grads.push_back(p.grad().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true));
    op.push_back({k, p, p.sizes().vec(), false});
  }
  OptimizerConfig oc;
  make_optimizer(oc, op)->step(0.01);
  for (const auto& [k, p] : params) s.after.push_back(p.detach().to(torch::kCPU, false, true));
  return s;
}

// forward(device): the loss with the batch on that device. `other`: the CPU (the ATen path,
// the CPU kernels off) or a GPU (the model moved there and back); either with the talking-heads
// family on th_path where named (on the CPU through `rows`, the emulated row kernels, if given).
template <class Forward>
void expect_same_step(torch::nn::Module& m, const std::vector<std::pair<std::string, torch::Tensor>>& params,
                      Forward forward, const torch::Device& other, const char* th_path = nullptr,
                      const cuda_th::RowsLauncher* rows = nullptr) {
  std::vector<torch::Tensor> start;
  for (const auto& [k, p] : params) start.push_back(p.detach().clone());
  m.train();
  const Step cpu = step(m, params, start, [&] { return forward(torch::Device(torch::kCPU)); });
  Step device;
  OtherPath route(other, th_path, rows);
  if (other.is_cpu()) {
    device = step(m, params, start, [&] { return forward(other); });
  } else {
    m.to(other);
    device = step(m, params, start, [&] { return forward(other); });
    m.to(torch::kCPU);
  }
  EXPECT_NEAR(device.loss, cpu.loss, 1e-6 * std::abs(cpu.loss));
  bool differs = false;  // the two paths are different code: some gradient differs in its last bits
  for (size_t i = 0; i < params.size(); ++i) differs |= !torch::equal(device.grads[i], cpu.grads[i]);
  EXPECT_TRUE(differs) << "the other path changed nothing (" << other << ")";
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& k = params[i].first;
    if (k.size() > 7 && k.compare(k.size() - 7, 7, "/bias_k") == 0) {
      // The key bias's gradient is zero in exact arithmetic (softmax ignores a shift of a
      // query's logits): both paths leave rounding residue, which Adafactor's update
      // (relative to a parameter scale of at least 1e-3) turns into steps of ~1e-5 each way.
      EXPECT_LT(cpu.grads[i].abs().max().item<double>(), 1e-5) << k;
      EXPECT_LT(device.grads[i].abs().max().item<double>(), 1e-5) << k;
      continue;
    }
    EXPECT_TRUE(close(device.grads[i], cpu.grads[i], 1e-6, 1e-4)) << params[i].first;
    EXPECT_TRUE(close(device.after[i], cpu.after[i], 1e-6, 1e-5)) << params[i].first;
  }
}

void t5_step(const torch::Device& other, const char* th_path = nullptr, const cuda_th::RowsLauncher* rows = nullptr) {
  for (const char* variant : {"multi_head", "talking_heads"}) {
    SCOPED_TRACE(variant);
    PretrainConfig c = tiny_pretrain("unused", 1);
    AttentionConfig a = c.attention.encoder_self;
    a.variant = variant;
    c.attention = {a, a, a};
    torch::manual_seed(3);
    T5 model(resolve_model_spec(c.model, c.attention), 120);
    const torch::Tensor inputs = torch::randint(2, 120, {4, 32}), targets = torch::randint(2, 120, {4, 8});
    inputs.narrow(1, 28, 4).fill_(0), targets.narrow(1, 6, 2).fill_(0);  // padding
    const torch::Tensor decoder = torch::cat({torch::zeros({4, 1}, torch::kInt64), targets.narrow(1, 0, 7)}, 1);
    expect_same_step(
        *model, model->named_parameters_by_path(),
        [&](const torch::Device& d) { return model->forward(inputs.to(d), decoder.to(d), targets.to(d)).loss; }, other,
        th_path, rows);
  }
}

void albert_step(const torch::Device& other, const char* th_path = nullptr,
                 const cuda_th::RowsLauncher* rows = nullptr) {
  PretrainConfig c = tiny_albert_pretrain("unused", 1);
  torch::manual_seed(4);
  EncoderModel model(resolve_model_spec(c.model, c.attention), 120, true);
  const torch::Tensor ids = torch::randint(2, 120, {4, 32}), types = torch::zeros({4, 32}, torch::kInt64);
  const torch::Tensor positions = torch::randint(1, 32, {4, 5}), targets = torch::randint(2, 120, {4, 5});
  const torch::Tensor labels = torch::tensor({0, 1, 1, 0});
  expect_same_step(
      *model, model->named_parameters_by_path(),
      [&](const torch::Device& d) {
        return model->forward(ids.to(d), types.to(d), positions.to(d), targets.to(d), labels.to(d)).loss;
      },
      other, th_path, rows);
}

TEST(DevicePath, T5StepOnTheAtenPathEqualsTheCpuKernels) { t5_step(torch::Device(torch::kCPU)); }
TEST(DevicePath, AlbertStepOnTheAtenPathEqualsTheCpuKernels) { albert_step(torch::Device(torch::kCPU)); }

// The ATen-only talking-heads paths a GPU takes where asked (`--th-path` tiled-aten, tiled-gemm,
// gemm, folded), on the CPU: a whole T5's and ALBERT's step through each, against the CPU kernels,
// with the bounds above. Their cores are proven against the paper's einsum alone
// (tests/attention/folded_test.cpp); this is the model around them, as a GPU's whole-step
// benchmark first meets it: T5's relative bias shared by the layers and its gradient, padding
// and causal masks, cross-attention (n != m), Q, K and V as the projections give them.
// On a GPU the same, fp32 through cuBLAS (TF32 off): what bench-train-gemm and its kind then
// run in bf16. There gemm's and tiled-gemm's softmax is thx's softmax kernel (rows_softmax), and
// gemm-aten's ATen's, as gemm's and tiled-gemm's is on the CPU (the emulated kernels: below).
void steps_on_each_aten_path(const torch::Device& device) {
  std::vector<const char*> paths = {"tiled-aten", "tiled-gemm", "gemm", "folded"};
  if (device.is_cuda()) paths.push_back("gemm-aten");
  for (const char* path : paths) {
    SCOPED_TRACE(path);
    t5_step(device, path);
    albert_step(device, path);
  }
}
TEST(DevicePath, T5AndAlbertStepsOnEachAtenOnlyThPathEqualTheCpuKernels) {
  steps_on_each_aten_path(torch::Device(torch::kCPU));
}
// The paths that run thx's kernels on a GPU, tiled (the default: the row kernels' mixings, bias,
// mask and softmax between the products), tiled-gemm and gemm (the softmax kernel's bias, mask and
// softmax), with the kernels on the CPU emulator (the row kernels 32 threads a block; fp32, so
// the FMAs): the same whole steps against the CPU kernels with the same bounds, each route seen to
// launch them.
TEST(DevicePath, T5AndAlbertStepsThroughTheEmulatedRowKernelsEqualTheCpuKernels) {
  for (const char* path : {"tiled", "tiled-gemm", "gemm"}) {
    SCOPED_TRACE(path);
    const int before = emulated_row_launches();
    t5_step(torch::Device(torch::kCPU), path, emulated_rows_launcher());
    albert_step(torch::Device(torch::kCPU), path, emulated_rows_launcher());
    EXPECT_GT(emulated_row_launches(), before);
  }
}
TEST(DevicePath, T5AndAlbertStepsOnCudaOnEachAtenOnlyThPathEqualTheCpuKernels) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  steps_on_each_aten_path(torch::Device(torch::kCUDA, 0));
}

TEST(DevicePath, T5StepOnCudaEqualsTheCpuKernels) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  t5_step(torch::Device(torch::kCUDA, 0));
}
TEST(DevicePath, AlbertStepOnCudaEqualsTheCpuKernels) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  albert_step(torch::Device(torch::kCUDA, 0));
}

// T5's RMS norm on a device: thx's kernel (on a GPU where the build has one: THX_CUDA_KERNELS)
// against the ATen composition on the same device, and both against float64 on the CPU; x in fp32 and
// bf16, the output in fp32 and (in a bf16 scope) bf16, forward and the gradients of x and scale,
// over rows of 768 (T5-base) and of 200 (a width no block divides). Bounds: fp32 sums in
// another order, 1e-6 + 1e-5 x max; a bf16 result, one rounding: 2^-8 x max. Where y is bf16, the
// gradient that reaches it is bf16 too (autograd's dtype of y), so the float64 reference takes
// dy rounded the same way: the bound is for the norm's own rounding, not its input's (with dy
// unrounded, dx on an H100 was off by 1.3 x 2^-8 x max, kernel and composition alike).
// On the CPU the same check holds thx's CPU kernel to float64 (the H100's failure under an
// unrounded dy reproduced here to the same digits).
void rms_norm_against_float64(torch::Device device) {
  for (const int64_t d : {768, 200})
    for (const auto xt : {torch::kFloat32, torch::kBFloat16})
      for (const bool bf16_out : {false, true}) {
        SCOPED_TRACE(fmt::format("d {} x {} out {}", d, c10::toString(xt), bf16_out ? "bf16" : "x's"));
        torch::manual_seed(2);
        const torch::Tensor x0 = torch::randn({3, 37, d}).to(xt), dy0 = torch::randn({3, 37, d});
        const torch::Tensor s0 = 1 + 0.1 * torch::randn({d});
        const bool bf16 = bf16_out || xt == torch::kBFloat16;  // y is bf16, and so is its gradient
        auto run = [&](torch::Device dev, bool kernels, torch::ScalarType wide) {
          set_cpu_kernels(kernels);
          RMSNorm norm(d);
          {
            torch::NoGradGuard g;
            norm->scale.copy_(s0);
          }
          norm->to(dev, wide);
          // (a copy, so that runs on the CPU do not share x0's gradient)
          const torch::Tensor x = (wide == torch::kFloat64 ? x0.to(wide) : x0).to(dev).clone().requires_grad_(true);
          PrecisionScope scope(bf16_out && wide != torch::kFloat64 ? torch::kBFloat16 : torch::kFloat32);
          const torch::Tensor y = norm(x);
          const bool round_dy = bf16 && wide == torch::kFloat64;
          const torch::Tensor dy = round_dy ? dy0.to(torch::kBFloat16).to(torch::kFloat32) : dy0;
          (y.to(torch::kFloat32) * dy.to(dev)).sum().backward();
          set_cpu_kernels(true);
          return std::vector<torch::Tensor>{y.detach().cpu().to(torch::kFloat64), x.grad().cpu().to(torch::kFloat64),
                                            norm->scale.grad().cpu().to(torch::kFloat64)};
        };
        const auto ref = run(torch::kCPU, false, torch::kFloat64);
        const auto kernel = run(device, true, torch::kFloat32);
        const auto aten = run(device, false, torch::kFloat32);
        for (size_t i = 0; i < 3; ++i) {
          const double rtol = bf16 ? 1.0 / 256 : 1e-5;
          EXPECT_TRUE(close(kernel[i], ref[i], 1e-6, rtol)) << "kernel, output " << i;
          EXPECT_TRUE(close(aten[i], ref[i], 1e-6, rtol)) << "composition, output " << i;
        }
      }
}
TEST(DevicePath, RmsNormOnCpuEqualsTheCompositionAndFloat64) { rms_norm_against_float64(torch::Device(torch::kCPU)); }
TEST(DevicePath, RmsNormOnCudaEqualsTheComposition) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  rms_norm_against_float64(torch::Device(torch::kCUDA, 0));
}

// The cross-entropy with z-loss on a device: thx's kernel (the CPU's loops; a GPU's kernels where the
// build has them: THX_CUDA_KERNELS) against the ATen composition on the same device, and both
// against float64 on the CPU; logits fp32 and bf16, rows of 1,003 keys and of T5's 32,128, padding
// rows; the loss and nll sums, each row's lse and the logits' gradient for given gradients of the
// two sums. Bounds: fp32 sums in another order, 1e-6 + 1e-5 x max (the sums relative 1e-5); a bf16
// gradient, one rounding: 2^-8 x max.
void cross_entropy_against_float64(torch::Device device) {
  const double z = 5e-3;
  for (const int64_t V : {1003, 32128})
    for (const auto xt : {torch::kFloat32, torch::kBFloat16}) {
      SCOPED_TRACE(fmt::format("V {} logits {}", V, c10::toString(xt)));
      torch::manual_seed(5);
      const torch::Tensor x0 = (torch::randn({111, V}) * 3).to(xt), t = torch::randint(1, V, {111});
      t.narrow(0, 100, 11).fill_(0);  // padding
      auto run = [&](torch::Device dev, bool kernels, bool wide) {
        set_cpu_kernels(kernels);
        // (a copy, so that runs on the CPU do not share x0's gradient)
        const torch::Tensor x = (wide ? x0.to(torch::kFloat64) : x0).to(dev).clone().requires_grad_(true);
        const LossSums s = cross_entropy_z_loss(x, t.to(dev), z);
        const auto gopt = s.loss_sum.options();
        torch::autograd::backward({s.loss_sum, s.nll_sum},
                                  {torch::tensor(0.7, gopt), torch::tensor(-0.3, gopt)});
        set_cpu_kernels(true);
        return std::vector<torch::Tensor>{s.loss_sum.detach().cpu().to(torch::kFloat64).reshape({1}),
                                          s.nll_sum.detach().cpu().to(torch::kFloat64).reshape({1}),
                                          s.lse.detach().cpu().to(torch::kFloat64), x.grad().cpu().to(torch::kFloat64)};
      };
      const auto ref = run(torch::kCPU, false, true);
      const auto kernel = run(device, true, false);
      const auto aten = run(device, false, false);
      for (size_t i = 0; i < 4; ++i) {
        const double atol = i < 2 ? 0 : 1e-6, rtol = i == 3 && xt == torch::kBFloat16 ? 1.0 / 256 : 1e-5;
        EXPECT_TRUE(close(kernel[i], ref[i], atol, rtol)) << "kernel, output " << i;
        EXPECT_TRUE(close(aten[i], ref[i], atol, rtol)) << "composition, output " << i;
      }
      EXPECT_EQ(kernel[3].narrow(0, 100, 11).abs().sum().item<double>(), 0.0) << "padding rows get no gradient";
    }
}
TEST(DevicePath, CrossEntropyOnCpuEqualsTheCompositionAndFloat64) {
  cross_entropy_against_float64(torch::Device(torch::kCPU));
}
TEST(DevicePath, CrossEntropyOnCudaEqualsTheComposition) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  cross_entropy_against_float64(torch::Device(torch::kCUDA, 0));
}

// bench train's --aten and THX_ATEN (common/runtime.h): the loss and T5's RMS norm leave thx's kernels
// for the ATen composition while a part is named, and come back after; the one not named stays.
TEST(DevicePath, AtenPartsRouteTheLossAndTheNormToTheComposition) {
  const torch::Tensor x = torch::randn({4, 30}, torch::requires_grad()), t = torch::randint(1, 30, {4});
  RMSNorm norm(30);
  auto routes = [&] {
    const std::string loss = cross_entropy_z_loss(x, t, 1e-4).loss_sum.grad_fn()->name();
    const std::string rms = norm(x).grad_fn()->name();
    return std::pair<bool, bool>{loss.find("CrossEntropyZFn") != std::string::npos,
                                 rms.find("RMSNormFn") != std::string::npos};
  };
  EXPECT_EQ(routes(), std::make_pair(true, true));
  AtenParts loss, rms;
  loss.loss = true, rms.rms_norm = true;
  set_aten_parts(loss);
  EXPECT_EQ(routes(), std::make_pair(false, true));
  set_aten_parts(rms);
  EXPECT_EQ(routes(), std::make_pair(true, false));
  set_aten_parts({});
  setenv("THX_ATEN", "rms_norm,loss", 1);  // (a GPU session names those whose kernels failed their test)
  EXPECT_EQ(routes(), std::make_pair(false, false));
  unsetenv("THX_ATEN");
  EXPECT_EQ(routes(), std::make_pair(true, true));
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
