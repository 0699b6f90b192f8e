// core_problems.h: small attention-core problems (Q, K, V, P_l, P_w, bias, mask, dO) and the
// paper's section 4 core written as einsums with the paper's layout, differentiated by autograd:
// the reference of the blocked algorithm (blocked_test.cpp), of the fused CUDA kernels
// (fused_th_emu_test.cpp) and of the folded products (folded_test.cpp); and the harness that
// differentiates a core and compares its O and gradients.
#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "test_util.h"

namespace thx::test::core {

struct Case {
  std::string name;
  int64_t hk, h, hv;
  bool P_l, P_w;
};

enum class Extra { none, bias, padding, causal, bias_padding };

struct Inputs {
  torch::Tensor Q, K, V, P_l, P_w, bias, mask, dO;
};

// Talking-heads with h_k, h and h_v all different, both hybrids, and multi-head.
inline const std::vector<Case>& variant_cases() {
  static const std::vector<Case> c = {{"talking_heads", 3, 5, 2, true, true},
                                      {"project_logits", 3, 5, 5, true, false},
                                      {"project_weights", 5, 5, 2, false, true},
                                      {"multi_head", 4, 4, 4, false, false}};
  return c;
}

// b 2, n 7, m 5 (7 causal), d_k 4, d_v 6 (or as given). Q, K, V and dO in `dtype` (drawn in fp32
// for bf16); P_l, P_w and the bias in fp32 for bf16, else in `dtype`. Padding: example 0 sees 3 keys.
inline Inputs inputs(const Case& c, Extra e, torch::Dtype dtype, int64_t dk = 4, int64_t dv = 6) {
  const int64_t b = 2, n = 7, m = e == Extra::causal ? 7 : 5;
  auto o = torch::TensorOptions().dtype(dtype == torch::kBFloat16 ? torch::kFloat32 : dtype);
  Inputs in;
  in.Q = torch::randn({b, n, c.hk, dk}, o).to(dtype), in.K = torch::randn({b, m, c.hk, dk}, o).to(dtype);
  in.V = torch::randn({b, m, c.hv, dv}, o).to(dtype), in.dO = torch::randn({b, n, c.hv, dv}, o).to(dtype);
  if (c.P_l) in.P_l = torch::randn({c.hk, c.h}, o) / std::sqrt(double(c.hk));
  if (c.P_w) in.P_w = torch::randn({c.h, c.hv}, o) / std::sqrt(double(c.h));
  if (e == Extra::bias || e == Extra::bias_padding) in.bias = torch::randn({1, c.h, n, m}, o);
  if (e == Extra::padding || e == Extra::bias_padding)
    in.mask = (torch::arange(m).view({1, m}) < torch::tensor({int64_t{3}, m}).view({b, 1})).view({b, 1, 1, m});
  if (e == Extra::causal) in.mask = torch::ones({n, m}, torch::kBool).tril().view({1, 1, n, m});
  return in;
}

// The first case (talking-heads) in float64 with a padding mask under which example 0 sees no key.
inline Inputs no_key_in_example_0() {
  torch::manual_seed(11);
  Inputs in = inputs(variant_cases().front(), Extra::padding, torch::kFloat64);
  in.mask = in.mask.clone();
  in.mask[0].fill_(false);
  return in;
}
// What a path that zeroes such rows must give (ATen's softmax gives NaN there): O = 0 and no
// gradient through example 0, every gradient finite, example 1 as the reference's `O_ref`.
inline void expect_rows_without_keys_zero(const torch::Tensor& O, const torch::Tensor& dQ,
                                          const std::vector<torch::Tensor>& grads, const torch::Tensor& O_ref) {
  EXPECT_TRUE(torch::all(O[0] == 0).item<bool>());
  EXPECT_TRUE(torch::all(dQ[0] == 0).item<bool>());
  for (const torch::Tensor& t : grads) EXPECT_TRUE(torch::all(torch::isfinite(t)).item<bool>());
  EXPECT_LE((O[1] - O_ref[1]).abs().max().item<double>(), 1e-12 + 1e-10 * O_ref[1].abs().max().item<double>());
}

// The inputs on `device` (a GPU test's copies of a problem drawn on the CPU).
inline Inputs to_device(const Inputs& in, const torch::Device& device) {
  auto dev = [&](const torch::Tensor& t) { return t.defined() ? t.to(device) : t; };
  return {dev(in.Q), dev(in.K), dev(in.V), dev(in.P_l), dev(in.P_w), dev(in.bias), dev(in.mask), dev(in.dO)};
}

// Section 4's core with the paper's layout (heads last), each line one einsum; autograd
// differentiates it. Returns O [b,n,h_v,d_v] and the logits L [b,n,m,h].
inline std::pair<torch::Tensor, torch::Tensor> paper_core(const torch::Tensor& Q, const torch::Tensor& K,
                                                          const torch::Tensor& V, const torch::Tensor& P_l,
                                                          const torch::Tensor& P_w, const torch::Tensor& bias,
                                                          const torch::Tensor& mask) {
  const torch::Tensor J = torch::einsum("bnkd,bmkd->bnmk", {Q, K});                   // J[n,m,h_k] = Q·K
  torch::Tensor L = P_l.defined() ? torch::einsum("bnmk,ks->bnms", {J, P_l}) : J;     // L = J·P_l
  if (bias.defined()) {
    torch::Tensor B = bias;  // broadcastable to [b,h,n,m]: as 4 dims
    while (B.dim() < 4) B = B.unsqueeze(0);
    L = L + B.permute({0, 2, 3, 1});  // [.,n,m,h]
  }
  if (mask.defined()) L = L.masked_fill(mask.permute({0, 2, 3, 1}).logical_not(), -INFINITY);
  const torch::Tensor W = torch::softmax(L, 2);                                        // over m
  const torch::Tensor U = P_w.defined() ? torch::einsum("bnms,st->bnmt", {W, P_w}) : W;  // U = W·P_w
  return {torch::einsum("bnmt,bmte->bnte", {U, V}), L};                                 // O = U·V
}

// O and the gradients of sum(O dO) in Q, K, V, P_l, P_w and the bias (undefined where that
// input is), each with its name.
struct Result {
  torch::Tensor O, dQ, dK, dV, dP_l, dP_w, dbias;
  std::vector<std::tuple<torch::Tensor, const char*>> all() const {
    return {{O, "O"}, {dQ, "dQ"}, {dK, "dK"}, {dV, "dV"}, {dP_l, "dP_l"}, {dP_w, "dP_w"}, {dbias, "dbias"}};
  }
};

// `core` (a differentiable attention core taking Q, K, V, P_l, P_w, bias, mask) under autograd,
// with the inputs as they are; sum(O dO) is formed in float64 (dO as drawn).
template <typename Core>
Result gradients(const Inputs& in, const Core& core) {
  auto leaf = [](const torch::Tensor& t) { return t.defined() ? t.detach().clone().requires_grad_(true) : t; };
  torch::Tensor Q = leaf(in.Q), K = leaf(in.K), V = leaf(in.V), P_l = leaf(in.P_l), P_w = leaf(in.P_w);
  torch::Tensor bias = leaf(in.bias);
  const torch::Tensor O = core(Q, K, V, P_l, P_w, bias, in.mask);
  (O.to(torch::kFloat64) * in.dO.to(torch::kFloat64)).sum().backward();
  auto grad = [](const torch::Tensor& t) { return t.defined() ? t.grad() : t; };
  return {O.detach(), grad(Q), grad(K), grad(V), grad(P_l), grad(P_w), grad(bias)};
}

// The inputs with Q, K, V in `dtype` and P_l, P_w and the bias in it too, or in fp32 for bf16
// (what a bf16 model hands its attention); dO and the mask as they are.
inline Inputs in_dtype(const Inputs& in, torch::Dtype dtype) {
  const torch::Dtype wide = dtype == torch::kBFloat16 ? torch::kFloat32 : dtype;
  auto to = [](const torch::Tensor& t, torch::Dtype d) { return t.defined() ? t.to(d) : t; };
  return {to(in.Q, dtype), to(in.K, dtype), to(in.V, dtype), to(in.P_l, wide), to(in.P_w, wide), to(in.bias, wide),
          in.mask, in.dO};
}

// The paper's core as a core: O alone.
inline torch::Tensor paper_output(const torch::Tensor& Q, const torch::Tensor& K, const torch::Tensor& V,
                                  const torch::Tensor& P_l, const torch::Tensor& P_w, const torch::Tensor& bias,
                                  const torch::Tensor& mask) {
  return paper_core(Q, K, V, P_l, P_w, bias, mask).first;
}

// Each of O and the gradients within atol + rtol x max|reference| (compared in float64), and
// defined exactly where the reference's is.
inline void expect_same(const Result& got, const Result& r, double atol, double rtol) {
  const auto g = got.all(), w = r.all();
  for (size_t i = 0; i < g.size(); ++i) {
    const auto& [a, name] = g[i];
    const torch::Tensor& b = std::get<0>(w[i]);
    ASSERT_EQ(a.defined(), b.defined()) << name;
    if (b.defined()) {
      EXPECT_TRUE(close(a.to(torch::kFloat64), b, atol, rtol)) << name;
    }
  }
}

}  // namespace thx::test::core
