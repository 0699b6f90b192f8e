// The blocked talking-heads algorithm (src/reference/blocked_talking_heads.h: two passes over
// the keys forward, two backward, only LSE kept) against the paper's section 4 core written as
// einsums with the paper's layout (heads last) and differentiated by autograd: O, LSE and the
// gradients of Q, K, V, P_l, P_w and the bias, for talking-heads (h_k != h != h_v), both
// hybrids and multi-head, with and without a bias, padding and causal masks, n != m, and block
// sizes that divide n and m, do not, and are 1.
//
// Tolerances: float64, 1e-12 + 1e-10 x max|reference| (the same sums in other orders: only a
// different formula moves the result by more); float32, 2e-6 + 2e-5 x max|reference| (as the
// attention reference tests: fp32 rounding of sums of a few dozen O(1) products). A wrong LSE
// handed to the backward (off by 0.01) must fail the float64 bound: the control.
#include <gtest/gtest.h>

#include <functional>
#include <tuple>

#include "attention/fused.h"
#include "attention/tiled.h"
#include "core_problems.h"
#include "reference/blocked_talking_heads.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

using torch::Tensor;

using namespace core;  // (core_problems.h)

const std::vector<Case>& cases() { return core::variant_cases(); }

struct Reference {
  Tensor O, lse, dQ, dK, dV, dP_l, dP_w, dbias;
};

// O and the gradients of `core` (a differentiable attention core) under autograd; lse from
// `logits` when given (the paper's core returns its L).
using Core = std::function<std::pair<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                     const Tensor&, const Tensor&, const Tensor&)>;
Reference differentiate(const Inputs& in, const Core& core) {
  auto leaf = [](const Tensor& t) { return t.defined() ? t.detach().clone().requires_grad_(true) : t; };
  Tensor Q = leaf(in.Q), K = leaf(in.K), V = leaf(in.V), P_l = leaf(in.P_l), P_w = leaf(in.P_w), bias = leaf(in.bias);
  auto [O, L] = core(Q, K, V, P_l, P_w, bias, in.mask);
  (O * in.dO).sum().backward();
  auto grad = [](const Tensor& t) { return t.defined() ? t.grad() : t; };
  return {O.detach(), L.defined() ? torch::logsumexp(L, 2).permute({0, 2, 1}).detach() : L,  // [b,h,n]
          grad(Q), grad(K), grad(V), grad(P_l), grad(P_w), grad(bias)};
}
Reference reference(const Inputs& in) { return differentiate(in, paper_core); }
Reference tiled(const Inputs& in, int64_t block_rows) {
  return differentiate(in, [&](auto&... a) { return std::pair{tiled_attention_core(a..., block_rows), Tensor()}; });
}

void check(const Case& c, Extra e, torch::Dtype dtype, int64_t bn, int64_t bm, double atol, double rtol) {
  torch::manual_seed(11);
  const Inputs in = inputs(c, e, dtype);
  const Reference r = reference(in);
  const blocked::Forward f = blocked::forward(in.Q, in.K, in.V, in.P_l, in.P_w, in.bias, in.mask, bn, bm);
  const blocked::Grads g = blocked::backward(in.Q, in.K, in.V, in.P_l, in.P_w, in.bias, in.mask, f.lse, in.dO, bn, bm);
  EXPECT_TRUE(close(f.O, r.O, atol, rtol)) << "O";
  EXPECT_TRUE(close(f.lse, r.lse, atol, rtol)) << "LSE";
  EXPECT_TRUE(close(g.dQ, r.dQ, atol, rtol)) << "dQ";
  EXPECT_TRUE(close(g.dK, r.dK, atol, rtol)) << "dK";
  EXPECT_TRUE(close(g.dV, r.dV, atol, rtol)) << "dV";
  EXPECT_EQ(g.dP_l.defined(), c.P_l);
  EXPECT_EQ(g.dP_w.defined(), c.P_w);
  if (c.P_l) EXPECT_TRUE(close(g.dP_l, r.dP_l, atol, rtol)) << "dP_l";
  if (c.P_w) EXPECT_TRUE(close(g.dP_w, r.dP_w, atol, rtol)) << "dP_w";
  EXPECT_EQ(g.dbias.defined(), in.bias.defined());
  if (in.bias.defined()) EXPECT_TRUE(close(g.dbias, r.dbias, atol, rtol)) << "dbias";
}

const std::vector<std::pair<int64_t, int64_t>> kBlocks = {{7, 7}, {3, 2}, {4, 3}, {1, 1}};

TEST(BlockedTalkingHeads, Float64EqualsThePapersCoreForEveryVariantMaskAndBlocking) {
  for (const Case& c : cases())
    for (Extra e : {Extra::none, Extra::bias, Extra::padding, Extra::causal, Extra::bias_padding})
      for (auto [bn, bm] : kBlocks) {
        SCOPED_TRACE(c.name + " extra " + std::to_string(int(e)) + " blocks " + std::to_string(bn) + "x" +
                     std::to_string(bm));
        check(c, e, torch::kFloat64, bn, bm, 1e-12, 1e-10);
      }
}

TEST(BlockedTalkingHeads, Float32WithinFloat32Rounding) {
  for (const Case& c : cases())
    for (Extra e : {Extra::bias_padding, Extra::causal}) {
      SCOPED_TRACE(c.name + " extra " + std::to_string(int(e)));
      check(c, e, torch::kFloat32, 3, 2, 2e-6, 2e-5);
    }
}

// The bias of T5 and BERT is shared by the batch ([1,h,n,m]); one shared by the heads too, or a
// per-example one, gets its gradient summed over exactly its broadcast dims.
TEST(BlockedTalkingHeads, BiasGradientSumsOverItsBroadcastDims) {
  const Case& c = cases().front();
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{2, 1, 7, 5}, {5, 7, 5}, {1, 1, 1, 5}}) {
    SCOPED_TRACE(c10::str(c10::IntArrayRef(shape)));
    torch::manual_seed(5);
    Inputs in = inputs(c, Extra::none, torch::kFloat64);
    in.bias = torch::randn(shape, torch::kFloat64);
    const Reference r = reference(in);
    const blocked::Forward f = blocked::forward(in.Q, in.K, in.V, in.P_l, in.P_w, in.bias, in.mask, 3, 2);
    const blocked::Grads g = blocked::backward(in.Q, in.K, in.V, in.P_l, in.P_w, in.bias, in.mask, f.lse, in.dO, 3, 2);
    EXPECT_TRUE(close(f.O, r.O, 1e-12, 1e-10));
    ASSERT_EQ(g.dbias.sizes(), in.bias.sizes());
    EXPECT_TRUE(close(g.dbias, r.dbias, 1e-12, 1e-10));
  }
}

// The control: the backward trusts the forward's LSE; one off by 0.01 scales every weight by
// e^-0.01 and must be caught by the float64 bound.
TEST(BlockedTalkingHeads, AWrongLogSumExpIsCaught) {
  torch::manual_seed(11);
  const Case& c = cases().front();
  const Inputs in = inputs(c, Extra::bias, torch::kFloat64);
  const Reference r = reference(in);
  const blocked::Forward f = blocked::forward(in.Q, in.K, in.V, in.P_l, in.P_w, in.bias, in.mask, 3, 2);
  const blocked::Grads g =
      blocked::backward(in.Q, in.K, in.V, in.P_l, in.P_w, in.bias, in.mask, f.lse + 0.01, in.dO, 3, 2);
  EXPECT_FALSE(close(g.dQ, r.dQ, 1e-12, 1e-10));
}

// A row whose every key is masked: the einsum reference's softmax gives NaN there; the
// blocked algorithm gives O = 0 and no gradient through that row, and the other rows as usual.
TEST(BlockedTalkingHeads, ARowWithEveryKeyMaskedIsZeroNotNaN) {
  torch::manual_seed(11);
  const Case& c = cases().front();
  Inputs in = inputs(c, Extra::padding, torch::kFloat64);
  in.mask = in.mask.clone();
  in.mask[0].fill_(false);  // example 0 sees no key at all
  const blocked::Forward f = blocked::forward(in.Q, in.K, in.V, in.P_l, in.P_w, in.bias, in.mask, 3, 2);
  const blocked::Grads g = blocked::backward(in.Q, in.K, in.V, in.P_l, in.P_w, in.bias, in.mask, f.lse, in.dO, 3, 2);
  EXPECT_TRUE(torch::all(f.O[0] == 0).item<bool>());
  EXPECT_TRUE(torch::all(torch::isinf(f.lse[0])).item<bool>());
  EXPECT_TRUE(torch::all(g.dQ[0] == 0).item<bool>());
  for (const Tensor& t : {g.dQ, g.dK, g.dV, g.dP_l, g.dP_w}) EXPECT_TRUE(torch::all(torch::isfinite(t)).item<bool>());
  const Reference r = reference(in);
  EXPECT_TRUE(close(f.O[1], r.O[1], 1e-12, 1e-10));  // example 1 is untouched
}

// The same algorithm as production code off the CPU (attention/tiled.h: blocks of query rows,
// every key at once, under autograd): against the paper's core in float64 for every variant,
// bias and mask, with blocks that divide n (7), do not (3), are one row, and the automatic size;
// a bias shared along other dims gets its gradient summed over them.
void expect_same(const Reference& got, const Reference& r, double atol, double rtol) {
  EXPECT_TRUE(close(got.O, r.O, atol, rtol)) << "O";
  EXPECT_TRUE(close(got.dQ, r.dQ, atol, rtol)) << "dQ";
  EXPECT_TRUE(close(got.dK, r.dK, atol, rtol)) << "dK";
  EXPECT_TRUE(close(got.dV, r.dV, atol, rtol)) << "dV";
  for (auto [g, w, name] : {std::tuple{got.dP_l, r.dP_l, "dP_l"}, {got.dP_w, r.dP_w, "dP_w"}, {got.dbias, r.dbias, "dbias"}}) {
    ASSERT_EQ(g.defined(), w.defined()) << name;
    if (w.defined()) EXPECT_TRUE(close(g, w, atol, rtol)) << name;
  }
}

TEST(TiledTalkingHeads, Float64EqualsThePapersCoreForEveryVariantMaskAndBlocking) {
  for (const Case& c : cases())
    for (Extra e : {Extra::none, Extra::bias, Extra::padding, Extra::causal, Extra::bias_padding})
      for (int64_t block : {7, 3, 1, 0}) {
        SCOPED_TRACE(c.name + " extra " + std::to_string(int(e)) + " block " + std::to_string(block));
        torch::manual_seed(11);
        const Inputs in = inputs(c, e, torch::kFloat64);
        expect_same(tiled(in, block), reference(in), 1e-12, 1e-10);
      }
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{2, 1, 7, 5}, {5, 7, 5}, {1, 1, 1, 5}}) {
    SCOPED_TRACE(c10::str(c10::IntArrayRef(shape)));
    torch::manual_seed(5);
    Inputs in = inputs(cases().front(), Extra::none, torch::kFloat64);
    in.bias = torch::randn(shape, torch::kFloat64);
    expect_same(tiled(in, 3), reference(in), 1e-12, 1e-10);
  }
}

// The tiled path's weights come from ATen's softmax, which gives NaN for a row with no key: it
// must give O = 0 there and no gradient through it, as the blocked algorithm does (without its
// zeroing of such rows this fails: every output and gradient is NaN).
TEST(TiledTalkingHeads, ARowWithEveryKeyMaskedIsZeroNotNaN) {
  const Inputs in = core::no_key_in_example_0();
  const Reference got = tiled(in, 3);
  core::expect_rows_without_keys_zero(got.O, got.dQ, {got.dK, got.dV, got.dP_l, got.dP_w}, reference(in).O);
}

// Heads that do not fit (V's heads without P_w, Q's against P_l, K's against Q's) are refused
// before anything runs: the row and flash kernels would index past the planes (the CPU emulator
// corrupted its heap on such a problem). Each case's valid twin runs.
TEST(TiledTalkingHeads, RefusesHeadsThatDoNotFit) {
  torch::manual_seed(11);
  const Inputs th = inputs(cases().front(), Extra::none, torch::kFloat64);  // h_k 3, h 5, h_v 2
  auto refused = [](Inputs in) {
    try {
      tiled_attention_core(in.Q, in.K, in.V, in.P_l, in.P_w, in.bias, in.mask);
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace()).find("do not fit") != std::string::npos;
    }
    return false;
  };
  EXPECT_FALSE(refused(th));
  Inputs no_pw = th;
  no_pw.P_w = Tensor();  // V's 2 heads are not h = 5
  EXPECT_TRUE(refused(no_pw));
  Inputs no_pl = th;
  no_pl.P_l = Tensor();  // h = Q's 3 heads, P_w's rows are 5
  EXPECT_TRUE(refused(no_pl));
  Inputs k_heads = th;
  k_heads.K = torch::cat({th.K, th.K}, 2);
  EXPECT_TRUE(refused(k_heads));
}

// In bf16 (Q, K, V, dO bf16; P_l, P_w and the bias fp32), against the batched composition a GPU
// ran before (attention_core_reference: the same products in bf16, the rest in fp32). They
// differ in the order of fp32 sums, which can move a product's bf16 rounding by one unit
// (2^-8 relative) before the values meet again: 3e-2 of the largest value bounds a few such
// units, and a dropped softmax row term (dL = W * dW) misses it by far (checked by hand).
TEST(TiledTalkingHeads, Bf16EqualsTheBatchedComposition) {
  for (const Case& c : cases())
    for (Extra e : {Extra::bias_padding, Extra::causal}) {
      SCOPED_TRACE(c.name + " extra " + std::to_string(int(e)));
      torch::manual_seed(11);
      Inputs in = inputs(c, e, torch::kFloat32);
      for (Tensor* t : {&in.Q, &in.K, &in.V, &in.dO}) *t = t->to(torch::kBFloat16);
      const Reference batched = differentiate(in, [](auto&... a) {
        return std::pair{attention_core_reference(a...), Tensor()};
      });
      const Reference got = tiled(in, 3);
      EXPECT_EQ(got.O.scalar_type(), torch::kBFloat16);
      EXPECT_EQ(got.dQ.scalar_type(), torch::kBFloat16);
      expect_same(got, batched, 0, 3e-2);
    }
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
