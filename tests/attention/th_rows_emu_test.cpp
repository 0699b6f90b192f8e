// The tiled path's row kernels (src/attention/cuda/th_rows_kernels.cuh and, for bf16 on tensor
// cores, th_rows_tc_kernels.cuh), run on the CPU by the
// emulator of common/cuda_compat.h through tiled_attention_core as a GPU runs them: O and the
// gradients of Q, K, V, P_l, P_w and the bias.
//  - fp32, against the paper's section 4 core in float64 (core_problems.h) for talking-heads (h_k,
//    h, h_v = 3, 5, 2), both hybrids and multi-head, with and without a bias, padding and causal
//    masks, n != m, each in one of three launches (blocks of rows that divide n and do not; 32 and
//    64 threads, more than the keys; one row a block and four): 2e-6 + 2e-5 x max|reference|,
//    the fp32 bound of blocked_test.cpp (fp32 sums of a few dozen O(1) products in another order);
//  - fp32, against ATen's composition of the same path (no kernels): 1e-6 + 1e-5 x max, the same
//    sums in another order; at widths in each bucket of heads the kernels are built for (16, 32,
//    48, 64), so that each instantiation's padding of its vectors past the heads is exercised;
//  - bf16 (Q, K, V, dO), against ATen's composition in bf16: 3e-2 x max, as
//    TiledTalkingHeads.Bf16EqualsTheBatchedComposition (an fp32 sum in another order can move a
//    bf16 rounding by a unit, 2^-8, before values meet again);
//  - more keys than threads (the backward's projection gradients summed over batches of keys);
//  - a row with no key gives 0 and no NaN; problems the kernels do not take (fp64, mixed dtypes,
//    65 heads) run ATen's composition, no kernel launched; a mask that is not bool is refused;
//  - bf16 on tensor cores (th_rows_tc_kernels.cuh, up to 48 heads): within the bound derived from
//    its roundings (tc_bounds.h) against float64, for every variant, mask and bucket, over chunks
//    of keys loaded key by key and 16 bytes at a time; the bound rejects a moved P_w.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <limits>
#include <set>
#include <vector>

#include "attention/fused.h"
#include "attention/heads_gemm.h"
#include "attention/tiled.h"
#include "core_problems.h"
#include "emulated_cores.h"
#include "rows_emulator.h"
#include "tc_bounds.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

using torch::Tensor;

using namespace core;  // (core_problems.h, tc_bounds.h)

using namespace rows_emu;  // the emulated launchers and their counts, run, to_cuda, on_cpu

// The paper's core in float64 on the same inputs.
std::vector<Tensor> reference(const Inputs& in) {
  Inputs wide = in;
  for (Tensor* t : {&wide.Q, &wide.K, &wide.V, &wide.P_l, &wide.P_w, &wide.bias, &wide.dO})
    if (t->defined()) *t = t->to(torch::kFloat64);
  auto leaf = [](const Tensor& t) { return t.defined() ? t.detach().clone().requires_grad_(true) : t; };
  Tensor Q = leaf(wide.Q), K = leaf(wide.K), V = leaf(wide.V), P_l = leaf(wide.P_l), P_w = leaf(wide.P_w),
         bias = leaf(wide.bias);
  const Tensor O = core::paper_core(Q, K, V, P_l, P_w, bias, wide.mask).first;
  (O * wide.dO).sum().backward();
  auto grad = [](const Tensor& t) { return t.defined() ? t.grad() : t; };
  return {O.detach(), grad(Q), grad(K), grad(V), grad(P_l), grad(P_w), grad(bias)};
}

void expect_close(const std::vector<Tensor>& got, const std::vector<Tensor>& want, double atol, double rtol) {
  const char* names[] = {"O", "dQ", "dK", "dV", "dP_l", "dP_w", "dbias"};
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i].defined(), want[i].defined()) << names[i];
    if (want[i].defined()) EXPECT_TRUE(close(got[i], want[i], atol, rtol)) << names[i];
  }
}

const std::vector<Case>& cases() { return core::variant_cases(); }

TEST(TiledRowKernels, Fp32EqualsThePapersCoreForEveryVariantMaskAndBlocking) {
  const std::tuple<int, int, int> launches[] = {{3, 32, 4096}, {0, 64, 1}, {2, 64, 4096}};
  int turn = 0;
  for (const Case& c : cases())
    for (Extra e : {Extra::none, Extra::bias, Extra::padding, Extra::causal, Extra::bias_padding}) {
      const auto [block, threads, group] = launches[turn++ % 3];  // each variant and extra in one of them
      {
        SCOPED_TRACE(c.name + " extra " + std::to_string(int(e)) + " block " + std::to_string(block) + " threads " +
                     std::to_string(threads) + " group from " + std::to_string(group));
        torch::manual_seed(11);
        const Inputs in = inputs(c, e, torch::kFloat32);
        const cuda_th::RowsLauncher kernels = emulator(threads, group);
        const int before = g_launches;
        const std::vector<Tensor> got = run(in, block, &kernels);
        EXPECT_GT(g_launches - before, 1);  // forward and backward
        expect_close(got, reference(in), 2e-6, 2e-5);
        expect_close(got, run(in, block, nullptr), 1e-6, 1e-5);
      }
    }
}

// Heads in each bucket the kernels are built for, h_k, h and h_v all different.
TEST(TiledRowKernels, Fp32EqualsAtensCompositionInEveryBucketOfHeads) {
  const cuda_th::RowsLauncher kernels = emulator(32);
  for (const Case& c : std::vector<Case>{{"16", 9, 16, 7, true, true},
                                         {"32", 20, 24, 17, true, true},
                                         {"48", 40, 48, 33, true, true},
                                         {"64", 64, 61, 64, true, true},
                                         {"48 weights only", 48, 48, 40, false, true}}) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(cuda_th::row_heads_bucket(int(std::max({c.hk, c.h, c.hv}))), std::stoi(c.name));
    torch::manual_seed(3);
    const Inputs in = inputs(c, Extra::bias_padding, torch::kFloat32);
    const int before = g_launches;
    const std::vector<Tensor> got = run(in, 4, &kernels);
    EXPECT_EQ(g_launches - before, 4);  // two blocks of rows, forward and backward
    expect_close(got, run(in, 4, nullptr), 1e-6, 1e-5);
  }
}

// A bias broadcast along other dims than T5's [1,h,n,m] (per example, without heads, one row for
// every query): the kernels read it through its strides, 0 where it broadcasts; its gradient is
// summed over those dims. Without the stride of the example dim, the first shape fails.
TEST(TiledRowKernels, EveryBroadcastOfTheBias) {
  const cuda_th::RowsLauncher kernels = emulator(32);
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{2, 1, 7, 5}, {5, 7, 5}, {1, 1, 1, 5}}) {
    SCOPED_TRACE(c10::str(c10::IntArrayRef(shape)));
    torch::manual_seed(5);
    Inputs in = inputs(cases().front(), Extra::padding, torch::kFloat32);
    in.bias = torch::randn(shape);
    expect_close(run(in, 3, &kernels), reference(in), 2e-6, 2e-5);
  }
}

// More keys than threads: the backward stages its keys a block's width at a time (32, 32, then 6
// of 70, the rest of that last batch zeros) and sums the projections' gradients over them.
TEST(TiledRowKernels, ProjectionGradientsSumEveryBatchOfKeys) {
  const cuda_th::RowsLauncher kernels = emulator(32);
  torch::manual_seed(5);
  const int64_t b = 2, n = 3, m = 70;
  Inputs in = inputs(cases().front(), Extra::none, torch::kFloat32);  // for P_l and P_w (3, 5, 2 heads)
  in.Q = torch::randn({b, n, 3, 4}), in.K = torch::randn({b, m, 3, 4});
  in.V = torch::randn({b, m, 2, 6}), in.dO = torch::randn({b, n, 2, 6});
  in.bias = torch::randn({1, 5, n, m});
  in.mask = (torch::arange(m).view({1, m}) < torch::tensor({int64_t{40}, m}).view({b, 1})).view({b, 1, 1, m});
  const int before = g_launches;
  const std::vector<Tensor> got = run(in, 0, &kernels);
  EXPECT_EQ(g_launches - before, 2);
  expect_close(got, reference(in), 2e-6, 2e-5);
}

TEST(TiledRowKernels, Bf16EqualsAtensComposition) {
  const cuda_th::RowsLauncher kernels = emulator(32);
  for (const Case& c : cases())
    for (Extra e : {Extra::bias_padding, Extra::causal}) {
      SCOPED_TRACE(c.name + " extra " + std::to_string(int(e)));
      torch::manual_seed(11);
      const Inputs in = inputs(c, e, torch::kBFloat16);
      const std::vector<Tensor> got = run(in, 3, &kernels), want = run(in, 3, nullptr);
      EXPECT_EQ(got[0].scalar_type(), torch::kBFloat16);
      EXPECT_EQ(got[1].scalar_type(), torch::kBFloat16);
      expect_close(got, want, 0, 3e-2);
    }
}

// ATen's softmax gives NaN for a row with no key and the tiled path zeroes it; the kernels' LSE is
// -inf there and their weights 0 (without that test in `weights`, exp(-inf + inf) is NaN).
TEST(TiledRowKernels, ARowWithEveryKeyMaskedIsZeroNotNaN) {
  const cuda_th::RowsLauncher kernels = emulator(32);
  torch::manual_seed(11);
  Inputs in = inputs(cases().front(), Extra::padding, torch::kFloat32);
  in.mask = in.mask.clone();
  in.mask[0].fill_(false);  // example 0 sees no key at all
  const std::vector<Tensor> got = run(in, 3, &kernels);
  EXPECT_TRUE(torch::all(got[0][0] == 0).item<bool>());
  EXPECT_TRUE(torch::all(got[1][0] == 0).item<bool>());
  for (const Tensor& t : got)
    if (t.defined()) EXPECT_TRUE(torch::all(torch::isfinite(t)).item<bool>());
  expect_close(got, run(in, 3, nullptr), 1e-6, 1e-5);
}

// What the kernels do not take goes to ATen's composition: the same result bit for bit as without
// a launcher, and no launch.
TEST(TiledRowKernels, WhatTheyDoNotTakeRunsAtensComposition) {
  const cuda_th::RowsLauncher kernels = emulator(32);
  torch::manual_seed(11);
  const Inputs base = inputs(cases().front(), Extra::bias_padding, torch::kFloat32);
  std::vector<std::pair<std::string, Inputs>> problems;
  problems.emplace_back("fp64", inputs(cases().front(), Extra::bias_padding, torch::kFloat64));
  Inputs mixed = base;
  mixed.V = mixed.V.to(torch::kBFloat16);
  problems.emplace_back("V bf16, Q fp32", mixed);
  problems.emplace_back("65 heads", inputs(Case{"65", 3, 65, 2, true, true}, Extra::causal, torch::kFloat32));
  for (const auto& [why, in] : problems) {
    SCOPED_TRACE(why);
    EXPECT_FALSE(tiled_rows_unsupported(in.Q, in.K, in.V, in.P_l, in.mask).empty());
    const int before = g_launches;
    const std::vector<Tensor> got = run(in, 3, &kernels), want = run(in, 3, nullptr);
    EXPECT_EQ(g_launches, before);
    for (size_t i = 0; i < want.size(); ++i)
      if (want[i].defined()) EXPECT_TRUE(torch::equal(got[i], want[i])) << i;
  }
  EXPECT_EQ(tiled_rows_unsupported(base.Q, base.K, base.V, base.P_l, base.mask), "");
  EXPECT_EQ(tiled_rows_unsupported(base.Q, base.K, base.V, base.P_l, base.mask.to(torch::kUInt8)),
            "the mask is not bool");
  const Tensor many = base.Q.narrow(0, 0, 1).expand({65536, -1, -1, -1});  // (a view: nothing allocated)
  EXPECT_EQ(tiled_rows_unsupported(many, many, many, base.P_l, base.mask), "");  // (examples: the grid's x)
}

// ---- bf16 with the mixings and the projections' gradients on tensor cores --------------------
// Every result within the error bound derived step by step from its roundings (tc_bounds.h, with
// J and dU stored in bf16 as the tiled path's matmuls give them), against float64: every variant,
// with and without a bias, padding or a causal mask, each in one of two launches: one warp, one
// row a block (chunks of 16 keys) and two warps, four rows (32).
TEST(TiledRowKernelsTc, Bf16WithinTheDerivedBoundForEveryVariantMaskAndLaunch) {
  const std::pair<int, int64_t> launches[] = {{32, 4096}, {64, 1}};
  int turn = 0;
  for (const Case& c : cases())
    for (Extra e : {Extra::none, Extra::bias_padding, Extra::causal, Extra::padding}) {
      const auto [threads, group] = launches[(turn / 4 + turn) % 2];  // each in one, the next variant the other
      ++turn;
      SCOPED_TRACE(c.name + " extra " + std::to_string(int(e)) + " threads " + std::to_string(threads));
      torch::manual_seed(11);
      const Inputs in = inputs(c, e, torch::kBFloat16);
      const cuda_th::RowsLauncher kernels = emulator_tc(threads, group);
      const int before = g_tc_launches;
      const std::vector<Tensor> got = run(in, 0, &kernels);
      EXPECT_EQ(g_tc_launches - before, 2);
      EXPECT_EQ(got[0].scalar_type(), torch::kBFloat16);
      EXPECT_TRUE(within_tc_bounds(got, tensor_core_bounds(in, true)));
    }
}

// Blocks of rows (3 of n = 7: three launches each way, LSE kept from row 3 and 6 on): every
// result as with one block, within a bf16 unit's rounding of the products summed over blocks
// (dK, dV, dP_l, dP_w, dbias add a block's share at a time), and O and dQ, each a row's own,
// to the same few units.
TEST(TiledRowKernelsTc, BlocksOfRowsAgreeWithOneBlock) {
  const cuda_th::RowsLauncher kernels = emulator_tc(32, 1);
  for (const Case& c : {cases()[0], cases()[2]}) {
    SCOPED_TRACE(c.name);
    torch::manual_seed(13);
    const Inputs in = inputs(c, Extra::bias_padding, torch::kBFloat16);
    const int before = g_tc_launches;
    const std::vector<Tensor> blocks = run(in, 3, &kernels);
    EXPECT_EQ(g_tc_launches - before, 6);
    expect_close(blocks, run(in, 0, &kernels), 0, 2e-2);
  }
}

// Each bucket of heads the tensor cores take (16, 32, 48; h_k, h and h_v all different) and the
// next, 64, which takes the FMAs; 70 keys (two whole chunks of 32 and a last one with 6, the rest
// zeros in the staged keys, loaded key by key) or 72 (copied a chunk ahead, 16 bytes a lane, and
// warp 1's keys of the last chunk all past m), or 8 (warp 1's only chunk past m: its staged keys
// must be zeros, not the NaN bytes shared memory starts with); a bias and a padding mask.
TEST(TiledRowKernelsTc, EveryBucketOfHeadsOverChunksOfKeys) {
  const cuda_th::RowsLauncher kernels = emulator_tc(64);
  const std::tuple<int64_t, int64_t, int64_t, int64_t> widths[] = {
      {12, 16, 10, 72}, {20, 32, 24, 70}, {40, 48, 33, 72}, {64, 60, 50, 70}, {12, 16, 10, 8}};
  for (auto [hk, h, hv, m] : widths) {
    SCOPED_TRACE(h);
    torch::manual_seed(5);
    const int64_t b = 2, n = 2;
    Inputs in;
    auto bf = [](const Tensor& t) { return t.to(torch::kBFloat16); };
    in.Q = bf(torch::randn({b, n, hk, 4}) / 2), in.K = bf(torch::randn({b, m, hk, 4}));
    in.V = bf(torch::randn({b, m, hv, 6})), in.dO = bf(torch::randn({b, n, hv, 6}));
    in.P_l = torch::randn({hk, h}) / std::sqrt(double(hk)), in.P_w = torch::randn({h, hv}) / std::sqrt(double(h));
    in.bias = torch::randn({1, h, n, m});
    in.mask = (torch::arange(m).view({1, m}) < torch::tensor({int64_t{40}, m}).view({b, 1})).view({b, 1, 1, m});
    const int64_t tc = g_tc_launches, copies = emu::vector_copies, stores = emu::matrix_stores;
    const int64_t ahead = emu::async_copies;
    EXPECT_TRUE(within_tc_bounds(run(in, 0, &kernels), tensor_core_bounds(in, true)));
    EXPECT_EQ(g_tc_launches - tc, h <= cuda_th::kRowTcHeadsMax ? 2 : 0);
    EXPECT_EQ(emu::vector_copies > copies, m % 8 == 0 && h <= cuda_th::kRowTcHeadsMax);
    EXPECT_EQ(emu::async_copies > ahead, m % 8 == 0 && h <= cuda_th::kRowTcHeadsMax);  // J, dU a chunk ahead
    EXPECT_EQ(emu::matrix_stores > stores, h <= cuda_th::kRowTcHeadsMax);  // U, dJ, W, dL by stmatrix
  }
}

// The softmax's running statistics (rows::add_logit), as the row kernels take them (without
// branches) and as the flash forward at 48 heads does (with them): the same bits of max and sum
// after every logit of sequences that hold -inf (masked), +inf, NaN, -0, equal values, a subnormal
// and the largest exp arguments, from an empty start and in both orders; and against float64
// (an independent sum: log of the sum of exp), the LSE of 200 random logits within 1e-5 absolute
// (200 additions of fp32 terms at most 1 each: some 200 x 2^-24 relative to the sum, ~1e-5).
TEST(TiledRowKernelsTc, SoftmaxStatisticsWithAndWithoutBranchesAgree) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> edge = {-inf, 0.f, -0.f, 1.f, 1.f, -1.f, 1e-40f, 3.5f, -80.f, 88.f, -inf, 88.f, 1.0000001f};
  auto bits = [](float x) { return thx_float_to_bits(x); };
  auto run = [&](const std::vector<float>& logits) {
    float m0 = -inf, s0 = 0.f, m1 = -inf, s1 = 0.f;
    int differ = 0;
    for (const float l : logits) {
      cuda_th::rows::add_logit<false, false>(m0, s0, l);
      cuda_th::rows::add_logit<false, true>(m1, s1, l);
      differ += bits(m0) != bits(m1) || bits(s0) != bits(s1);
    }
    return differ;
  };
  for (const auto& seq : {edge, std::vector<float>(edge.rbegin(), edge.rend()), std::vector<float>{inf, 1.f, inf},
                          std::vector<float>{1.f, nan, 2.f}, std::vector<float>{-inf, -inf, 0.f}})
    EXPECT_EQ(run(seq), 0);
  torch::manual_seed(3);
  const Tensor l = torch::randn({200}, torch::kFloat64) * 4;
  float m = -inf, t = 0.f;
  for (int i = 0; i < 200; ++i) cuda_th::rows::add_logit<false, false>(m, t, float(l[i].item<double>()));
  const double want = torch::logsumexp(l.to(torch::kFloat32).to(torch::kFloat64), 0).item<double>();
  EXPECT_NEAR(double(m) + std::log(double(t)), want, 1e-5);
}

// fast_exp_error (tc_bounds.h: what a GPU's fast exp adds to the weights) against the kernels'
// own arithmetic with every exp off by the CUDA guide's worst case, (2 + floor(|1.173 x|)) units
// of 2^-23 less the half unit of rounding the skewed value to fp32: the statistics by
// rows::add_logit<true>, the LSE m + log(s) and each weight exp(l - LSE), as the row kernels take
// them, the sums' exps skewed down and the weights' up (their errors add). Every weight is within
// fast_exp_error plus fp32's own (tc_bounds.h's gamma32(m + 16)) of float64's softmax. Rows:
// rising logits (a rescaling at every key: the bound's 2m), a wide range (2.346 R), and random
// ones. The rising row's error is more than the bound would be without its 2m, so it is needed.
double worst_fast_exp(float x, double sign) {
  if (!std::isfinite(x)) return 0;  // (exp(-inf) is 0 on a GPU too)
  return sign * (1.5 + std::floor(std::fabs(1.173 * double(x)))) * std::ldexp(1.0, -23);
}
thread_local double t_sign = 1;
struct SkewFastExp {
  SkewFastExp() { emu::fast_exp_skew = [](float x) { return worst_fast_exp(x, t_sign); }; }
  ~SkewFastExp() { emu::fast_exp_skew = nullptr; }
};

TEST(TiledRowKernelsTc, FastExpErrorBoundsTheWeightsOfTheWorstFastExp) {
  SkewFastExp skew;
  const float inf = std::numeric_limits<float>::infinity();
  auto weights = [&](const Tensor& logits) {  // [m] float64 of fp32 values -> the kernels' W
    float m = -inf, s = 0.f;
    t_sign = -1;
    for (int64_t i = 0; i < logits.size(0); ++i) cuda_th::rows::add_logit<true>(m, s, float(logits[i].item<double>()));
    const float lse = m + thx_log(s);
    t_sign = 1;
    Tensor W = torch::empty_like(logits);
    for (int64_t i = 0; i < logits.size(0); ++i) W[i] = thx_exp_fast(float(logits[i].item<double>()) - lse);
    return W;
  };
  torch::manual_seed(5);
  const int64_t m = 1024;
  struct Row {
    const char* name;
    Tensor logits;
  } rows[] = {{"rising", torch::arange(m, torch::kFloat64) * 1e-3},
              {"wide", torch::cat({torch::full({m - 1}, -6.0, torch::kFloat64), torch::zeros({1}, torch::kFloat64)})},
              {"random", torch::randn({m}, torch::kFloat64) * 4}};
  for (const Row& r : rows) {
    SCOPED_TRACE(r.name);
    const Tensor L = r.logits.to(torch::kFloat32).to(torch::kFloat64);
    const Tensor want = torch::softmax(L, 0), got = weights(L), keep = torch::ones_like(L, torch::kBool);
    const Tensor err = (got - want).abs(), own = gamma32(double(m) + 16) * want;
    const Tensor bound = core::fast_exp_error(L.unsqueeze(0), want.unsqueeze(0), keep.unsqueeze(0), m).squeeze(0);
    EXPECT_TRUE((err <= bound + own).all().item<bool>()) << "worst: " << (err / (bound + own)).max().item<double>();
    if (std::string(r.name) != "rising") continue;
    const Tensor without_2m = bound - std::ldexp(1.0, -23) * want * 2 * double(m);
    EXPECT_FALSE((err <= without_2m + own).all().item<bool>());
  }
}

// The staged rows [H][16 warps + 8] take every bank once in each phase of the warp's accesses:
// the 16-byte copies to and from global memory (a phase: 8 lanes) and the ldmatrix and stmatrix
// rows (a phase: one 8x8 matrix). Every (head, 8 keys) of the warp's columns is one lane's copy.
// The copies' first lane order (head l / 2, keys 8 (l % 2)) took two ways, which the check finds.
TEST(TiledRowKernelsTc, StagedRowsTakeEveryBankOnce) {
  constexpr int H = 48;
  auto group = [](int element) { return element * 2 / 16 % 8; };  // 16-byte group of 128 bytes
  auto distinct = [&](const std::function<int(int)>& at) {     // of 8 lanes
    std::set<int> g;
    for (int i = 0; i < 8; ++i) g.insert(group(at(i)));
    return g.size() == 8;
  };
  for (int warps : {1, 2, 4}) {
    const int ld = 16 * warps + 8;
    for (int w = 0; w < warps; ++w) {
      std::set<int> copies;
      for (int p = 0; p < H / 16; ++p) {
        for (int q = 0; q < 4; ++q) {
          EXPECT_TRUE(distinct([&](int i) { return cuda_th::rows_tc::staged_vector_at(8 * q + i, w, p, ld); }))
              << warps << " warps, warp " << w << ", block " << p << ", quarter " << q;
          EXPECT_FALSE(distinct([&](int i) { return (16 * p + (8 * q + i) / 2) * ld + 16 * w + 8 * (i % 2); }));
          EXPECT_TRUE(distinct([&](int i) { return cuda_th::rows_tc::staged_matrix_row_at(8 * q + i, w, p, ld); }))
              << warps << " warps, warp " << w << ", block " << p << ", matrix " << q;
        }
        for (int l = 0; l < 32; ++l) copies.insert(cuda_th::rows_tc::staged_vector_at(l, w, p, ld));
      }
      EXPECT_EQ(copies.size(), size_t(2 * H));
      for (int at : copies) EXPECT_TRUE(at % ld == 16 * w || at % ld == 16 * w + 8) << at;
    }
  }
}

// The controls: the bound rejects P_w moved by 0.01 (its entries are about 0.45); the tensor cores
// ran (their roundings differ from the FMAs'); a row with no key gives 0, not NaN; where their
// 32-bit offsets would not hold, and for fp32, the FMAs run (equal bit for bit to a launcher
// without tensor cores).
TEST(TiledRowKernelsTc, Controls) {
  const cuda_th::RowsLauncher tc = emulator_tc(32), fma = emulator(32);
  torch::manual_seed(11);
  Inputs in = inputs(cases().front(), Extra::bias_padding, torch::kBFloat16), moved = in;
  moved.P_w = in.P_w + 0.01;
  const core::TcBounds B = tensor_core_bounds(in, true);
  const std::vector<Tensor> got = run(in, 0, &tc);
  EXPECT_TRUE(within_tc_bounds(got, B));
  EXPECT_FALSE(within_tc_bounds(run(moved, 0, &tc), B));
  EXPECT_FALSE(torch::equal(got[0], run(in, 0, &fma)[0]));
  in.mask = in.mask.clone();
  in.mask[0].fill_(false);  // example 0 sees no key at all
  const std::vector<Tensor> none = run(in, 0, &tc);
  EXPECT_TRUE(torch::all(none[0][0] == 0).item<bool>());
  for (const Tensor& t : none)
    if (t.defined()) EXPECT_TRUE(torch::all(torch::isfinite(t)).item<bool>());
  // Their offsets within an example are 32-bit: where they would not hold, the FMAs (64-bit) run.
  const int64_t none4[4] = {0, 0, 0, 0}, t5_bias[4] = {0, 2048 * 2048, 2048, 1};
  EXPECT_TRUE(cuda_th::rows_tc_offsets_fit(48, 2048, 2048, 48, t5_bias, none4));
  EXPECT_FALSE(cuda_th::rows_tc_offsets_fit(48, 8192, 8192, 48, none4, none4));
  const int64_t big_bias[4] = {0, 8192 * 8192, 8192, 1};
  EXPECT_FALSE(cuda_th::rows_tc_offsets_fit(48, 512, 8192, 48, big_bias, none4));
  const Inputs f32 = inputs(cases().front(), Extra::bias_padding, torch::kFloat32);
  const int before = g_tc_launches;
  const std::vector<Tensor> a = run(f32, 0, &tc), b = run(f32, 0, &fma);
  EXPECT_EQ(g_tc_launches, before);
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].defined()) EXPECT_TRUE(torch::equal(a[i], b[i])) << i;
}

// ---- The heads-major path's softmax: a warp a row (th_softmax_kernels.cuh) ------------------------
// rows_softmax (tiled.h) gives W = softmax(L + bias, masked) of a [b,h,n,m] L, against the float64
// softmax of the same values (L as given, the bias fp32, both widened):
//  - fp32: within 1e-6 (W <= 1; fp32's exp and a sum of up to 2,101 terms in another order, some
//    units of 2^-24 each);
//  - bf16 (L bf16, W rounded once to bf16): within 2^-8 |W64| + 2^-24: the rounding's 2^-9 of W,
//    and the fp32 work before it (on a GPU the bf16 kernels' fast exp, about 2e-6 relative where
//    a weight exceeds 2^-24) that may carry a value across a rounding boundary;
//  - a masked key's weight exactly 0, a row without keys all 0;
// for each kernel: rows whose keys stay in registers (up to 512, and 2,048 in pairs or 1,024 one at
// a time) and longer ones (L read twice), keys in pairs (m even, L aligned) and one at a time (m
// odd, or L one element off its pair's alignment), heads from 3 to 65 (no bucket of heads: a warp
// takes one head's row); one launch each. The control: the bias scaled by 1.01 (W moves by
// about 1% of itself) fails both bounds.
// Then heads_gemm_attention_core with a launcher takes it for its forward where there is a bias or
// a mask (one launch, and none for the backward, which is ATen's from the kept W; without either,
// ATen's softmax alone, one pass each way), equal to ATen's softmax (no launcher) within
// fp32's sums in another order; where the kernels do not take L, ATen's, bit for bit. (The whole
// path against float64 in fp32 and bf16: Cores/AtenPath.*/gemm, folded_test.cpp, through
// heads_gemm_on_emulated_rows below.)

Tensor softmax64(const Tensor& L, const Tensor& bias, const Tensor& mask) {
  const Tensor x = (L.to(torch::kFloat64) + bias.to(torch::kFloat64))
                       .masked_fill(mask.logical_not(), -std::numeric_limits<double>::infinity());
  return torch::softmax(x, -1).nan_to_num(0);  // (a row without keys: NaN, 0 as the kernels give)
}
bool within(const Tensor& W, const Tensor& W64, double rel, double abs) {
  return ((W.to(torch::kFloat64) - W64).abs() <= W64.abs() * rel + abs).all().item<bool>();
}
// t as a contiguous tensor whose data starts one element past an allocation's start.
Tensor one_element_off(const Tensor& t) {
  const Tensor flat = torch::empty({t.numel() + 1}, t.options());
  Tensor off = flat.narrow(0, 1, t.numel()).view(t.sizes());
  off.copy_(t);
  return off;
}

TEST(RowsSoftmax, WithinOneRoundingOfTheFloat64SoftmaxForEveryKernel) {
  const cuda_th::RowsLauncher kernels = emulator(32);
  struct Shape {
    int64_t h, n, m;
    bool off;  // L one element past its allocation's start
    int cache, pairs;  // the kernel it must take
  };
  for (const Shape& x : std::vector<Shape>{{3, 7, 70, false, 16, 1}, {65, 3, 70, false, 16, 1},
                                           {16, 5, 71, false, 16, 0}, {4, 3, 70, true, 16, 0},
                                           {5, 3, 600, false, 64, 1}, {5, 3, 601, false, 32, 0},
                                           {2, 2, 2100, false, 0, 1}, {2, 2, 2101, false, 0, 0}}) {
    SCOPED_TRACE("heads " + std::to_string(x.h) + ", keys " + std::to_string(x.m) + (x.off ? ", off" : ""));
    torch::manual_seed(int(x.h * x.m));
    const Tensor L = torch::randn({2, x.h, x.n, x.m}) * 3, bias = torch::randn({1, x.h, x.n, x.m});
    Tensor mask = torch::rand({2, 1, x.n, x.m}) > 0.3;
    mask[1][0][x.n - 1].fill_(false);  // example 1's last row sees no key
    const Tensor Lb = L.to(torch::kBFloat16), want = softmax64(L, bias, mask), want_b = softmax64(Lb, bias, mask);
    const double rel = std::ldexp(1.0, -8), abs = std::ldexp(1.0, -24);
    for (const bool bf16 : {false, true}) {
      SCOPED_TRACE(bf16 ? "bf16" : "fp32");
      const Tensor in = x.off ? one_element_off(bf16 ? Lb : L) : bf16 ? Lb : L;
      const int before = g_softmax_launches;
      const Tensor W = rows_softmax(in, bias, mask, &kernels);
      EXPECT_EQ(g_softmax_launches - before, 1);
      EXPECT_EQ(g_softmax_cache, x.cache);
      EXPECT_EQ(g_softmax_pairs, x.pairs);
      ASSERT_TRUE(W.defined());
      EXPECT_EQ(W.scalar_type(), in.scalar_type());
      EXPECT_TRUE(bf16 ? within(W, want_b, rel, abs) : within(W, want, 0, 1e-6));
      const Tensor moved = rows_softmax(in, bias * 1.01, mask, &kernels);
      EXPECT_FALSE(bf16 ? within(moved, want_b, rel, abs) : within(moved, want, 0, 1e-6));
      EXPECT_TRUE(torch::all(W.masked_select(mask.logical_not().expand_as(W)) == 0).item<bool>());
      EXPECT_TRUE(torch::all(W[1].select(1, x.n - 1) == 0).item<bool>());
    }
  }
}

// Every broadcast of the bias and the mask the models and the tiled path's blocks hand it, read
// through their strides: the bias one a key ([1,1,1,m]), one a row ([1,h,n,1]), one an example
// ([b,1,n,m]), 3-d ([h,n,m]), T5's transposed storage ([1,h,n,m] seen from [m,n,h]) and a block's
// rows of a bias (rows 2-4 of 7, as tiled-gemm's blocks narrow it); the mask padding ([b,1,1,m]) or causal
// ([1,1,n,m]). fp32 and bf16, within the bounds above. (The whole paths' float64 tests take these
// shapes too, but float64 is ATen's: this is the kernels'.)
TEST(RowsSoftmax, EveryBroadcastOfTheBiasAndTheMask) {
  const cuda_th::RowsLauncher kernels = emulator(32);
  const int64_t b = 2, h = 5, n = 3, m = 40;
  torch::manual_seed(7);
  const Tensor L = torch::randn({b, h, n, m}) * 3;
  const Tensor tall = torch::randn({1, h, 7, m});
  const std::vector<std::pair<const char*, Tensor>> biases = {
      {"one a key", torch::randn({1, 1, 1, m})},
      {"one a row", torch::randn({1, h, n, 1})},  // (the same for every key: stride 0 along the keys)
      {"one an example", torch::randn({b, 1, n, m})},
      {"3-d", torch::randn({h, n, m})},
      {"transposed storage", torch::randn({m, n, h}).permute({2, 1, 0}).unsqueeze(0)},
      {"a block's rows", tall.narrow(2, 2, n)}};
  const Tensor padding =
      (torch::arange(m).view({1, m}) < torch::tensor({int64_t{25}, m}).view({b, 1})).view({b, 1, 1, m});
  const Tensor causal = torch::ones({n, m}, torch::kBool).tril(m - n).view({1, 1, n, m});
  for (const auto& [name, bias] : biases)
    for (const Tensor& mask : {padding, causal}) {
      SCOPED_TRACE(std::string(name) + (mask.size(0) == b ? ", padding" : ", causal"));
      EXPECT_TRUE(within(rows_softmax(L, bias, mask, &kernels), softmax64(L, bias, mask), 0, 1e-6));
      const Tensor Lb = L.to(torch::kBFloat16);
      EXPECT_TRUE(within(rows_softmax(Lb, bias, mask, &kernels), softmax64(Lb, bias, mask), std::ldexp(1.0, -8),
                         std::ldexp(1.0, -24)));
    }
  // The control: the transposed bias shifted by one key fails the bound.
  const Tensor t = biases[4].second;
  EXPECT_FALSE(within(rows_softmax(L, torch::roll(t, 1, 3), padding, &kernels), softmax64(L, t, padding), 0, 1e-6));
}

// What the kernels do not take: no launch, undefined (the caller's ATen composition runs); what
// nothing takes (a bias or mask that does not broadcast), one line.
TEST(RowsSoftmax, WhatTheyDoNotTakeIsLeftToAten) {
  const cuda_th::RowsLauncher kernels = emulator(32);
  cuda_th::RowsLauncher without = kernels;
  without.softmax_f32 = nullptr, without.softmax_bf16 = nullptr;
  const Tensor L = torch::randn({2, 3, 4, 5}), bias = torch::randn({1, 3, 4, 5});
  const Tensor mask = torch::rand({2, 1, 1, 5}) > 0.5;
  const int before = g_launches;
  EXPECT_TRUE(rows_softmax(L, bias, mask, &kernels).defined());
  EXPECT_EQ(g_launches - before, 1);
  EXPECT_FALSE(rows_softmax(L, bias, mask, nullptr).defined());
  EXPECT_FALSE(rows_softmax(L, bias, mask, &without).defined());
  EXPECT_FALSE(rows_softmax(L.to(torch::kFloat64), bias, mask, &kernels).defined());
  EXPECT_FALSE(rows_softmax(L.transpose(2, 3), bias, mask.transpose(2, 3), &kernels).defined());
  EXPECT_FALSE(rows_softmax(torch::randn({2, 3, 0, 5}), Tensor(), Tensor(), &kernels).defined());
  EXPECT_FALSE(rows_softmax(L, bias, mask.to(torch::kUInt8), &kernels).defined());
  EXPECT_EQ(g_launches - before, 1);
  // A bias or mask that does not broadcast to L is refused in one line (the kernel would read past it).
  EXPECT_THROW(rows_softmax(L, torch::randn({1, 3, 4, 6}), mask, &kernels), c10::Error);
  EXPECT_THROW(rows_softmax(L, bias, torch::rand({2, 1, 2, 5}) > 0.5, &kernels), c10::Error);
  EXPECT_EQ(g_launches - before, 1);
}

TEST(HeadsGemmRowSoftmax, OneForwardLaunchEqualsAtensSoftmax) {
  const cuda_th::RowsLauncher kernels = emulator(32);
  std::vector<Case> all = cases();
  all.push_back(Case{"65", 3, 65, 2, true, true});  // (past the row kernels' 64 heads: the softmax's)
  for (const Case& c : all)
    for (Extra e : {Extra::none, Extra::bias_padding, Extra::causal, Extra::padding}) {
      SCOPED_TRACE(c.name + " extra " + std::to_string(int(e)));
      torch::manual_seed(11);
      const Inputs in = inputs(c, e, torch::kFloat32);
      auto gemm = [](const cuda_th::RowsLauncher* k) {
        return [k](const auto&... a) { return heads_gemm_attention_core(a..., k); };
      };
      const int before = g_launches, softmax = g_softmax_launches;
      const std::vector<Tensor> got = run_core(in, gemm(&kernels));
      EXPECT_EQ(g_launches - before, e == Extra::none ? 0 : 1);  // (without bias or mask: ATen's softmax)
      EXPECT_EQ(g_softmax_launches - softmax, g_launches - before);
      expect_close(got, run_core(in, gemm(nullptr)), 1e-6, 1e-5);
    }
  torch::manual_seed(11);  // fp64: ATen's
  const Inputs in = inputs(cases().front(), Extra::bias_padding, torch::kFloat64);
  const int before = g_launches;
  const std::vector<Tensor> got =
      run_core(in, [&](const auto&... a) { return heads_gemm_attention_core(a..., &kernels); });
  EXPECT_EQ(g_launches, before);
  const std::vector<Tensor> want = run_core(in, [](const auto&... a) { return heads_gemm_attention_core(a...); });
  for (size_t i = 0; i < want.size(); ++i)
    if (want[i].defined()) EXPECT_TRUE(torch::equal(got[i], want[i])) << i;
}

// Nothing reads memory that nothing wrote (test_util.h's PoisonedCpuMemory: every new CPU tensor
// NaN, as LibTorch 2.x fills new tensors under deterministic algorithms, train.deterministic on a
// GPU): every variant and extra through the row kernels in fp32 on FMAs, in blocks of rows, and in
// bf16 on tensor cores, one block and in blocks; and through the heads-major path with its
// softmax kernel. Each result is equal bit for bit to the same run's in memory as the heap gives it.
TEST(TiledRowKernels, ReadNoMemoryNothingWrote) {
  const cuda_th::RowsLauncher fma = emulator(32), tc = emulator_tc(32), tc_rows = emulator_tc(64, 1);
  auto gemm = [&](const auto&... a) { return heads_gemm_attention_core(a..., &fma); };
  for (const Case& c : cases())
    for (Extra e : {Extra::none, Extra::bias_padding, Extra::causal, Extra::padding}) {
      SCOPED_TRACE(c.name + " extra " + std::to_string(int(e)));
      torch::manual_seed(11);
      const Inputs f32 = inputs(c, e, torch::kFloat32), bf16 = inputs(c, e, torch::kBFloat16);
      const int before = g_launches;
      EXPECT_TRUE(same_in_poisoned_memory([&] { return run(f32, 3, &fma); }));
      EXPECT_TRUE(same_in_poisoned_memory([&] { return run(bf16, 0, &tc); }));
      EXPECT_TRUE(same_in_poisoned_memory([&] { return run(bf16, 3, &tc_rows); }));
      EXPECT_TRUE(same_in_poisoned_memory([&] { return run_core(f32, gemm); }));
      EXPECT_GE(g_launches - before, 2 * (6 + 2 + 6 + (e == Extra::none ? 0 : 1)));
    }
}

// On a GPU (where thx was built with its CUDA kernels): the same kernels through CUDA's launcher.
// fp32 against the paper's core in float64 on the CPU (the bound above); bf16 on FMAs against
// ATen's composition on the same GPU (3e-2 x max, as above), on tensor cores within the derived
// bound (one block of rows: tc_bounds.h counts one rounding of each product); at T5-base's
// width (d_model 768, 12 and 48 heads) over 300 keys, which no block of threads divides, fp32 against ATen's composition there
// (1e-6 + 1e-5 x max). attention_core (fused.cpp) takes them for talking-heads on CUDA: its output
// equals theirs bit for bit. compute-sanitizer runs these (scripts/gpu_session.sh).

TEST(TiledRowKernelsOnCuda, EqualsThePapersCoreForEveryVariantMaskAndDtype) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const cuda_th::RowsLauncher *kernels = cuda_th_rows_launcher(), *fma = cuda_th_rows_launcher(false);
  if (!kernels) GTEST_SKIP() << "thx built without its CUDA kernels (THX_CUDA_KERNELS)";
  for (const Case& c : cases())
    for (Extra e : {Extra::none, Extra::bias_padding, Extra::causal})
      for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
        SCOPED_TRACE(c.name + " extra " + std::to_string(int(e)) + (dtype == torch::kFloat32 ? " fp32" : " bf16"));
        torch::manual_seed(11);
        const Inputs in = inputs(c, e, dtype);
        if (dtype == torch::kFloat32) expect_close(on_cpu(run(to_cuda(in), 3, kernels)), reference(in), 2e-6, 2e-5);
        else expect_close(on_cpu(run(to_cuda(in), 3, fma)), on_cpu(run(to_cuda(in), 3, nullptr)), 0, 3e-2);
      }
}

// The tensor-core kernels (a test of their own, so that gpu_session.sh can tell them from the
// FMAs): within the derived bound; attention_core takes them by default and the FMAs under
// `--th-path tiled-fma`, equal bit for bit to each launcher's own result.
TEST(TiledRowKernelsTcOnCuda, Bf16WithinTheDerivedBound) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const cuda_th::RowsLauncher *tc = cuda_th_rows_launcher(true), *fma = cuda_th_rows_launcher(false);
  if (!tc) GTEST_SKIP() << "thx built without its CUDA kernels (THX_CUDA_KERNELS)";
  for (const Case& c : cases())
    for (Extra e : {Extra::none, Extra::bias_padding, Extra::causal}) {
      SCOPED_TRACE(c.name + " extra " + std::to_string(int(e)));
      torch::manual_seed(11);
      const Inputs in = inputs(c, e, torch::kBFloat16);
      EXPECT_TRUE(within_tc_bounds(on_cpu(run(to_cuda(in), 0, tc)), tensor_core_bounds(in, true)));
    }
  torch::manual_seed(11);
  const Inputs in = to_cuda(inputs(cases().front(), Extra::bias_padding, torch::kBFloat16));
  auto core = [&](const cuda_th::RowsLauncher* l) {
    return l ? tiled_attention_core(in.Q, in.K, in.V, in.P_l, in.P_w, in.bias, in.mask, 0, l)
             : attention_core(in.Q, in.K, in.V, in.P_l, in.P_w, in.bias, in.mask);
  };
  EXPECT_TRUE(torch::equal(core(nullptr), core(tc)));
  set_th_path("tiled-fma", false);
  const Tensor with_fma = core(nullptr);
  set_th_path("tiled", false);
  EXPECT_TRUE(torch::equal(with_fma, core(fma)));
  EXPECT_FALSE(torch::equal(with_fma, core(tc)));
}

// At T5-base's widths on a GPU, through CUDA's launcher: h = 12 and 48 heads, b = 2 examples of
// n = 300 rows and keys (which no block of threads divides), T5's [1,h,n,n] bias and a padding mask
// (example 0 sees 200 keys); body(width) after a seed. The calling test is skipped, saying why,
// where there is no GPU or thx was built without its CUDA kernels.
struct T5Width {
  const cuda_th::RowsLauncher* kernels;
  int64_t h, b, n;
  torch::TensorOptions o;
  Tensor bias, mask;
};
void at_t5_base_width(const std::function<void(const T5Width&)>& body) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const cuda_th::RowsLauncher* kernels = cuda_th_rows_launcher();
  if (!kernels) GTEST_SKIP() << "thx built without its CUDA kernels (THX_CUDA_KERNELS)";
  for (int64_t h : {12, 48}) {
    SCOPED_TRACE(h);
    torch::manual_seed(3);
    const int64_t b = 2, n = 300;
    const auto o = torch::TensorOptions().device(torch::kCUDA);
    const Tensor bias = torch::randn({1, h, n, n}, o);
    const Tensor mask =
        (torch::arange(n, o).view({1, n}) < torch::tensor({int64_t{200}, n}, o).view({b, 1})).view({b, 1, 1, n});
    body({kernels, h, b, n, o, bias, mask});
  }
}

TEST(TiledRowKernelsOnCuda, EqualAtensCompositionAtT5BaseWidth) {
  at_t5_base_width([](const T5Width& w) {
    const int64_t h = w.h, b = w.b, n = w.n, d = 768 / h;
    Inputs in;
    in.Q = torch::randn({b, n, h, d}, w.o) / std::sqrt(double(d)), in.K = torch::randn({b, n, h, d}, w.o);
    in.V = torch::randn({b, n, h, d}, w.o), in.dO = torch::randn({b, n, h, d}, w.o);
    in.P_l = torch::randn({h, h}, w.o) / std::sqrt(double(h));
    in.P_w = torch::randn({h, h}, w.o) / std::sqrt(double(h));
    in.bias = w.bias, in.mask = w.mask;
    expect_close(on_cpu(run(in, 0, w.kernels)), on_cpu(run(in, 0, nullptr)), 1e-6, 1e-5);
    const Tensor O = tiled_attention_core(in.Q, in.K, in.V, in.P_l, in.P_w, in.bias, in.mask, 0, w.kernels);
    EXPECT_TRUE(torch::equal(attention_core(in.Q, in.K, in.V, in.P_l, in.P_w, in.bias, in.mask), O));
  });
}

// rows_softmax through CUDA's launcher at T5-base's widths (12 and 48 heads, 300 rows and keys,
// which no block of four warps divides; T5's [1,h,n,m] bias and a padding mask), within the bounds
// above against the float64 softmax, fp32 and bf16; then rows of 601 keys (kept in registers, one
// at a time) and 2,100 (L read twice, in pairs), with a bias and a padding mask of their own.
TEST(RowsSoftmaxOnCuda, WithinOneRoundingAtT5BaseWidth) {
  const double rel = std::ldexp(1.0, -8), abs = std::ldexp(1.0, -24);
  auto check = [&](const cuda_th::RowsLauncher* kernels, const Tensor& L, const Tensor& bias, const Tensor& mask) {
    const Tensor Lb = L.to(torch::kBFloat16);
    const Tensor W = rows_softmax(L, bias, mask, kernels), Wb = rows_softmax(Lb, bias, mask, kernels);
    ASSERT_TRUE(W.defined() && Wb.defined());
    EXPECT_TRUE(within(W.cpu(), softmax64(L.cpu(), bias.cpu(), mask.cpu()), 0, 1e-6));
    EXPECT_TRUE(within(Wb.cpu(), softmax64(Lb.cpu(), bias.cpu(), mask.cpu()), rel, abs));
  };
  at_t5_base_width([&](const T5Width& w) {
    check(w.kernels, torch::randn({w.b, w.h, w.n, w.n}, w.o) * 3, w.bias, w.mask);
    for (int64_t m : {601, 2100}) {
      SCOPED_TRACE("keys " + std::to_string(m));
      const Tensor keep = (torch::arange(m, w.o.dtype(torch::kLong)) < m - 100).view({1, 1, 1, m});
      check(w.kernels, torch::randn({w.b, w.h, 3, m}, w.o) * 3, torch::randn({1, w.h, 3, m}, w.o),
            keep.expand({w.b, 1, 1, m}));
    }
  });
}

}  // namespace THX_FILE_ID
}  // namespace

const cuda_th::RowsLauncher* emulated_rows_launcher() {
  static const cuda_th::RowsLauncher kernels = rows_emu::emulator_tc(32);
  return &kernels;
}
int emulated_row_launches() { return rows_emu::g_launches; }

torch::Tensor heads_gemm_on_emulated_rows(const torch::Tensor& Q, const torch::Tensor& K, const torch::Tensor& V,
                                          const torch::Tensor& P_l, const torch::Tensor& P_w,
                                          const torch::Tensor& bias, const torch::Tensor& mask) {
  return heads_gemm_attention_core(Q, K, V, P_l, P_w, bias, mask, emulated_rows_launcher());
}

}  // namespace thx::test
