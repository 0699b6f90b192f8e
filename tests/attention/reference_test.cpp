// Every production attention variant against the paper's pseudocode (one einsum per line,
// tests/reference), forward and every parameter and input gradient, with and without bias,
// padding mask and causal mask.
//
// Tolerances:
//   fp32: max error <= 2e-6 + 2e-5 * max|reference|. Both sides sum a few dozen products of
//         O(1) numbers in different orders; fp32 rounding (6e-8 per operation) accumulates to
//         about 1e-6 relative. 2e-5 leaves room for that and nothing else: a wrong index,
//         transpose or missing term changes results at order 1e-1.
//   fp64: max error <= 1e-12 + 1e-10 * max|reference|: the same computation in double, where
//         only a genuinely different formula can differ.
//   OnCuda (where a GPU is; skipped elsewhere): the production layer on the GPU in fp32 against
//         the reference on the CPU in fp32, at the fp32 bound (cuBLAS with TF32 off, LibTorch's
//         default for fp32 matmuls, rounds as the CPU does, in another order).
#include <gtest/gtest.h>

#include "attention/attention_test_util.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

enum class Extra { none, bias, padding, causal, bias_and_padding };

struct Inputs {
  torch::Tensor X, M, G, bias, mask;
};

Inputs make_inputs(const AttentionDims& d, Extra extra, torch::Dtype dtype) {
  const bool causal = extra == Extra::causal;
  const int64_t n = kN, m = causal ? kN : kM;
  auto opt = torch::TensorOptions().dtype(dtype);
  Inputs in;
  in.X = torch::randn({kB, n, d.d_X}, opt);
  in.M = torch::randn({kB, m, d.d_M}, opt);
  in.G = torch::randn({kB, n, d.d_Y}, opt);
  if (extra == Extra::bias || extra == Extra::bias_and_padding)
    in.bias = torch::randn({1, d.h, n, m}, opt);
  if (extra == Extra::padding || extra == Extra::bias_and_padding) {
    // Example 0 sees 3 of 5 positions, example 1 sees all.
    torch::Tensor len = torch::tensor({int64_t{3}, m}).view({kB, 1});
    in.mask = (torch::arange(m).view({1, m}) < len).view({kB, 1, 1, m});
  }
  if (causal) in.mask = torch::ones({n, m}, torch::kBool).tril().view({1, 1, n, m});
  return in;
}

struct Result {
  torch::Tensor Y;
  std::map<std::string, torch::Tensor> grads;  // parameters by paper name, plus "X" and "M"
};

// Forward and backward of sum(Y * G) through `forward`, on fresh leaf copies of everything on
// `device`; the results come back to the CPU.
template <class F>
Result run(const paper::Params& params, const Inputs& in, F&& forward,
           const torch::Device& device = torch::Device(torch::kCPU)) {
  paper::Params p;
  for (const auto& [k, v] : params) p[k] = v.detach().to(device).clone().requires_grad_(true);
  torch::Tensor X = in.X.to(device).clone().requires_grad_(true), M = in.M.to(device).clone().requires_grad_(true);
  Result r;
  r.Y = forward(X, M, p);
  (r.Y * in.G.to(device)).sum().backward();
  r.Y = r.Y.detach().cpu();
  for (const auto& [k, v] : p) r.grads[k] = v.grad().defined() ? v.grad().cpu() : v.grad();
  r.grads["X"] = X.grad().cpu();
  r.grads["M"] = M.grad().cpu();
  return r;
}

using Param = std::tuple<AttnCase, Extra>;

class ReferenceTest : public ::testing::TestWithParam<Param> {};

void check(const AttnCase& c, Extra extra, torch::Dtype dtype, double atol, double rtol,
           const torch::Device& device = torch::Device(torch::kCPU)) {
  torch::manual_seed(7);
  const AttentionDims d = resolve(c.config, kDX, kDM, kDY);
  auto layer = make_attention(d);
  if (dtype == torch::kFloat64) layer->to(torch::kFloat64);
  const paper::Params params = params_of(*layer);
  const Inputs in = make_inputs(d, extra, dtype);
  layer->to(device);
  auto on = [&](const torch::Tensor& t) { return t.defined() ? t.to(device) : t; };

  Result prod = run(params, in, [&](auto& X, auto& M, auto& p) {
    // The layer's own parameters are the leaves here, so that their grads are checked.
    for (auto& kv : layer->named_parameters()) {
      torch::NoGradGuard g;
      kv.value().set_data(p.at(kv.key()).detach());
    }
    for (auto& kv : layer->named_parameters()) kv.value().mutable_grad() = torch::Tensor();
    torch::Tensor Y = layer->forward(X, M, on(in.bias), on(in.mask));
    return Y;
  }, device);
  // Collect the production parameter grads from the layer itself.
  for (auto& kv : layer->named_parameters())
    prod.grads[kv.key()] = kv.value().grad().defined() ? kv.value().grad().cpu() : kv.value().grad();
  Result ref = run(params, in, [&](auto& X, auto& M, auto& p) {
    return reference_forward(d, X, M, p, in.bias, in.mask);
  });

  EXPECT_TRUE(close(prod.Y, ref.Y, atol, rtol)) << c.name << ": Y";
  ASSERT_EQ(prod.grads.size(), ref.grads.size());
  for (const auto& [name, g] : ref.grads) {
    ASSERT_TRUE(prod.grads.at(name).defined()) << c.name << ": no gradient for " << name;
    EXPECT_TRUE(close(prod.grads.at(name), g, atol, rtol)) << c.name << ": grad " << name;
  }
}

TEST_P(ReferenceTest, Float32) {
  auto [c, extra] = GetParam();
  check(c, extra, torch::kFloat32, 2e-6, 2e-5);
}

TEST_P(ReferenceTest, Float64) {
  auto [c, extra] = GetParam();
  check(c, extra, torch::kFloat64, 1e-12, 1e-10);
}

TEST_P(ReferenceTest, OnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto [c, extra] = GetParam();
  check(c, extra, torch::kFloat32, 2e-6, 2e-5, torch::Device(torch::kCUDA, 0));
}

std::string extra_name(Extra e) {
  switch (e) {
    case Extra::none: return "plain";
    case Extra::bias: return "bias";
    case Extra::padding: return "padding";
    case Extra::causal: return "causal";
    default: return "bias_padding";
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllVariants, ReferenceTest,
    ::testing::Combine(::testing::ValuesIn(all_cases()),
                       ::testing::Values(Extra::none, Extra::bias, Extra::padding, Extra::causal,
                                         Extra::bias_and_padding)),
    [](const ::testing::TestParamInfo<Param>& info) {
      return std::get<0>(info.param).name + "_" + extra_name(std::get<1>(info.param));
    });

// The comparison above must be able to fail: a small change to one parameter of the reference
// side (P_l transposed, which has the same shape when h_k = h) is detected.
TEST(ReferenceControl, DetectsTransposedLogitsProjection) {
  torch::manual_seed(3);
  const AttentionDims d = resolve(make_config("talking_heads", 4, 4, 4, 3, 3), kDX, kDM, kDY);
  auto layer = make_attention(d);
  paper::Params p = params_of(*layer);
  torch::Tensor X = torch::randn({kB, kN, kDX}), M = torch::randn({kB, kM, kDM});
  torch::Tensor Y = layer->forward(X, M);
  EXPECT_TRUE(close(Y, paper::talking_heads(X, M, p), 2e-6, 2e-5));
  p["P_l"] = p["P_l"].t().contiguous();
  EXPECT_FALSE(close(Y, paper::talking_heads(X, M, p), 2e-6, 2e-5));
  // And one parameter entry off by 1e-3 is detected too.
  p = params_of(*layer);
  p["P_w"] = p["P_w"].clone();
  {
    torch::NoGradGuard g;
    p["P_w"][1][2] += 1e-3;
  }
  EXPECT_FALSE(close(Y, paper::talking_heads(X, M, p), 2e-6, 2e-5));
}

// Shapes and names are the paper's.
TEST(Parameters, PaperNamesAndShapes) {
  const AttentionDims d =
      resolve(make_config("talking_heads", 3, 5, 2, 4, 6, {"X_l", "M_l", "X_w", "M_w"}), kDX,
              kDM, kDY);
  auto layer = make_attention(d);
  std::map<std::string, std::vector<int64_t>> want = {
      {"P_q", {kDX, 4, 3}}, {"P_k", {kDM, 4, 3}},  {"P_v", {kDM, 6, 2}},
      {"P_o", {kDY, 6, 2}}, {"P_l", {3, 5}},       {"P_w", {5, 2}},
      {"P_Xl", {kDX, 3, 5}}, {"P_Ml", {kDM, 3, 5}}, {"P_Xw", {kDX, 5, 2}},
      {"P_Mw", {kDM, 5, 2}}};
  auto params = layer->named_parameters();
  EXPECT_EQ(params.size(), want.size());
  for (const auto& [name, shape] : want) {
    ASSERT_TRUE(params.contains(name)) << name;
    EXPECT_EQ(params[name].sizes().vec(), shape) << name;
  }
  const AttentionDims g = resolve(make_config("general_bilinear", 3, 3, 3, 0, 0), kDX, kDM, kDY);
  auto gb = make_attention(g)->named_parameters();
  EXPECT_EQ(gb.size(), 2u);
  EXPECT_EQ(gb["P"].sizes().vec(), (std::vector<int64_t>{kDX, kDM, 3}));
  EXPECT_EQ(gb["Q"].sizes().vec(), (std::vector<int64_t>{kDM, kDY, 3}));
}

// Initialization follows Mesh TensorFlow: sample stds within 5% of the table. The smallest
// tensor here has 4096 entries, so 5% is more than 4 standard errors of the estimate.
TEST(Parameters, MeshTensorFlowInitialization) {
  torch::manual_seed(0);
  const int64_t d = 256;
  AttentionConfig c = make_config("talking_heads", 64, 64, 64, 8, 8, {"X_l", "M_w"});
  auto layer = make_attention(resolve(c, d, d, d));
  auto p = layer->named_parameters();
  auto expect_std = [&](const char* name, double want) {
    const double got = p[name].std().item<double>();
    EXPECT_NEAR(got / want, 1.0, 0.05) << name << ": std " << got << ", want " << want;
    EXPECT_NEAR(p[name].mean().item<double>(), 0.0, 0.1 * want) << name;
  };
  expect_std("P_q", 1.0 / std::sqrt(256.0 * 8));
  expect_std("P_k", 1.0 / std::sqrt(256.0));
  expect_std("P_v", 1.0 / std::sqrt(256.0));
  expect_std("P_o", 1.0 / std::sqrt(64.0 * 8));
  expect_std("P_l", 1.0 / std::sqrt(64.0));
  expect_std("P_w", 1.0 / std::sqrt(64.0));
  expect_std("P_Xl", 0.1 / std::sqrt(256.0 * 64));
  expect_std("P_Mw", 0.1 / std::sqrt(256.0 * 64));
  auto gb = make_attention(resolve(make_config("general_bilinear", 8, 8, 8, 0, 0), d, d, d))
                ->named_parameters();
  EXPECT_NEAR(gb["P"].std().item<double>() * 256.0, 1.0, 0.05);
  EXPECT_NEAR(gb["Q"].std().item<double>() * std::sqrt(8.0 * 256), 1.0, 0.05);
}

// The folded 1/sqrt(d_k) and GBMA's init keep logits of order one on unit-variance inputs.
TEST(Parameters, LogitsOfOrderOne) {
  torch::manual_seed(1);
  const int64_t d = 256;
  torch::Tensor X = torch::randn({4, 64, d});
  for (const char* v : {"multi_head", "general_bilinear"}) {
    auto layer = make_attention(resolve(make_config(v, 8, 8, 8, 32, 32), d, d, d));
    torch::Tensor Y = layer->forward(X, X);
    const double std = Y.std().item<double>();
    EXPECT_GT(std, 0.05) << v;
    EXPECT_LT(std, 2.0) << v;
  }
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
