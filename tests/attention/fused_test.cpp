// The fused attention core (fused.h) and its kernels (kernels.h).
//
// - Each SIMD kernel (the AVX2 and AVX-512 builds the CPU can run) equals the portable loops
//   (odd sizes, strided and transposed operands, masked tails): max error <= 1e-5 *
//   max|reference| + 1e-6, fp32 summation-order noise.
// - attention_core and heads_softmax equal their ATen compositions, forward and every
//   gradient, on shapes that span several row blocks with a ragged last one, for every bias
//   layout whose gradient is accumulated differently: tolerance 2e-6 + 2e-5 * max|ref|, as in
//   reference_test.cpp.
// - `thx --th-path` sends talking-heads off the CPU to the path it names (on a GPU).
#include <gtest/gtest.h>

#include <random>

#include "attention/cuda/th_fused.h"
#include "attention/cuda/th_rows_args.h"
#include "attention/fused.h"
#include "attention/kernels.h"
#include "attention/tiled.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

torch::Tensor as_tensor(const std::vector<float>& v) {
  return torch::from_blob(const_cast<float*>(v.data()), {int64_t(v.size())}).clone();
}

// Each SIMD build this CPU can run (AVX2, AVX-512) against the portable loops.
TEST(Kernels, SimdBuildsEqualPortableLoops) {
  const auto builds = kernels::available_ops();
  if (builds.size() < 2) GTEST_SKIP() << "this CPU has no AVX2+FMA; only the portable kernels run";
  const kernels::Ops& ref = kernels::generic_ops();
  for (size_t b = 1; b < builds.size(); ++b) {
  const kernels::Ops* fast = builds[b];
  SCOPED_TRACE(fast->name);
  for (int64_t O : {1, 5, 6, 7, 13})
    for (int64_t I : {1, 3, 24})
      for (int64_t len : {1, 7, 8, 16, 37, 64})
        for (int transposed = 0; transposed < 2; ++transposed)
          for (int acc = 0; acc < 2; ++acc) {
            const int64_t is = len + 3, os = len + 5;
            auto in = random_vec(I * is, 1), C = random_vec(O * I, 2);
            auto out0 = random_vec(O * os, 3), out1 = out0;
            const int64_t co = transposed ? 1 : I, ci = transposed ? O : 1;
            ref.mix(out0.data(), os, in.data(), is, C.data(), co, ci, O, I, len, acc);
            fast->mix(out1.data(), os, in.data(), is, C.data(), co, ci, O, I, len, acc);
            EXPECT_TRUE(close(as_tensor(out1), as_tensor(out0), 1e-6, 1e-5))
                << "mix O=" << O << " I=" << I << " len=" << len << " t=" << transposed
                << " acc=" << acc;
          }
  for (int64_t NA : {1, 2, 3, 7})
    for (int64_t NB : {1, 4, 5, 9})
      for (int64_t len : {3, 8, 29, 512}) {
        auto A = random_vec(NA * len, 4), B = random_vec(NB * len, 5);
        auto G0 = random_vec(NA * NB, 6), G1 = G0;
        ref.gram(G0.data(), A.data(), len, NA, B.data(), len, NB, len);
        fast->gram(G1.data(), A.data(), len, NA, B.data(), len, NB, len);
        EXPECT_TRUE(close(as_tensor(G1), as_tensor(G0), 1e-6, 1e-5))
            << "gram " << NA << "x" << NB << " len " << len;
      }
  for (int64_t len : {1, 5, 8, 13, 64, 515}) {
    auto x0 = random_vec(len, 7), bias = random_vec(len, 8), g = random_vec(len, 9);
    for (auto& v : x0) v *= 10;  // logits spread over exp's range
    std::vector<uint8_t> mask(len);
    for (int64_t j = 0; j < len; ++j) mask[j] = (j % 3) != 1;
    for (int variant = 0; variant < 3; ++variant) {
      const float* b = variant >= 1 ? bias.data() : nullptr;
      const uint8_t* mk = variant == 2 ? mask.data() : nullptr;
      auto a = x0, c = x0;
      ref.softmax(a.data(), b, mk, len);
      fast->softmax(c.data(), b, mk, len);
      EXPECT_TRUE(close(as_tensor(c), as_tensor(a), 1e-7, 1e-5)) << "softmax len " << len;
      std::vector<float> d0(len), d1(len);
      ref.softmax_backward(d0.data(), a.data(), g.data(), mk, len);
      fast->softmax_backward(d1.data(), a.data(), g.data(), mk, len);
      EXPECT_TRUE(close(as_tensor(d1), as_tensor(d0), 1e-7, 1e-5)) << "softmax_bwd len " << len;
      if (mk) {
        for (int64_t j = 0; j < len; ++j) {
          if (!mask[j]) {
            EXPECT_EQ(c[j], 0.0f) << "masked weight must be exactly 0";
          }
        }
      }
      EXPECT_NEAR(fast->logsumexp(x0.data(), len), ref.logsumexp(x0.data(), len), 1e-5 * (1 + std::abs(ref.logsumexp(x0.data(), len))))
          << "logsumexp len " << len;
    }
  }
  }
}

// Forward and all gradients of fused vs ATen, with the same leaves.
struct CoreCase {
  int64_t b, n, m, hk, h, hv, dk, dv;
  bool P_l, P_w;
  std::vector<int64_t> bias_shape;  // empty: none
  bool padding_mask;
};

void check_core(const CoreCase& c) {
  torch::manual_seed(21);
  auto leaf = [](std::vector<int64_t> s) { return torch::randn(s).requires_grad_(true); };
  torch::Tensor Q = leaf({c.b, c.n, c.hk, c.dk}), K = leaf({c.b, c.m, c.hk, c.dk});
  torch::Tensor V = leaf({c.b, c.m, c.hv, c.dv});
  torch::Tensor Pl = c.P_l ? leaf({c.hk, c.h}) : torch::Tensor();
  torch::Tensor Pw = c.P_w ? leaf({c.h, c.hv}) : torch::Tensor();
  torch::Tensor bias = c.bias_shape.empty() ? torch::Tensor() : leaf(c.bias_shape);
  torch::Tensor mask;
  if (c.padding_mask)
    mask = (torch::arange(c.m).view({1, c.m}) <
            torch::randint(1, c.m + 1, {c.b, 1}))
               .view({c.b, 1, 1, c.m});
  torch::Tensor G = torch::randn({c.b, c.n, c.hv, c.dv});
  std::vector<torch::Tensor> leaves = {Q, K, V};
  for (const auto& t : {Pl, Pw, bias})
    if (t.defined()) leaves.push_back(t);
  auto run = [&](bool fused) {
    set_fused_attention(fused);
    for (auto& t : leaves) t.mutable_grad() = torch::Tensor();
    torch::Tensor O = attention_core(Q, K, V, Pl, Pw, bias, mask);
    // The comparison is only worth something if the fused code really ran.
    const std::string node = O.grad_fn()->name();
    EXPECT_EQ(node.find("AttentionCoreFn") != std::string::npos, fused) << node;
    (O * G).sum().backward();
    std::vector<torch::Tensor> out = {O.detach().clone()};
    for (auto& t : leaves) out.push_back(t.grad().clone());
    return out;
  };
  const auto want = run(false), got = run(true);
  set_fused_attention(true);
  const char* names[] = {"O", "dQ", "dK", "dV", "4", "5", "6"};
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(close(got[i], want[i], 2e-6, 2e-5))
        << names[i] << " b=" << c.b << " n=" << c.n << " m=" << c.m << " h=" << c.hk << "/" << c.h
        << "/" << c.hv << " bias " << c.bias_shape.size();
}

TEST(FusedCore, EqualsAtenCompositionAcrossBlocksAndBiasLayouts) {
  // n = 53 spans three 24-row blocks, the last ragged; m = 37 is no multiple of 8 or 16.
  const int64_t b = 3, n = 53, m = 37;
  for (bool pl : {false, true})
    for (bool pw : {false, true}) {
      const int64_t hk = 4, h = (pl ? 5 : 4), hv = (pw ? 3 : h);
      check_core({b, n, m, hk, h, hv, 6, 7, pl, pw, {}, false});
      check_core({b, n, m, hk, h, hv, 6, 7, pl, pw, {1, h, n, m}, true});   // T5: shared over b
      check_core({b, n, m, hk, h, hv, 6, 7, pl, pw, {b, h, n, m}, false});  // one per example
      check_core({b, n, m, hk, h, hv, 6, 7, pl, pw, {1, h, 1, m}, true});   // shared over rows
      check_core({b, n, m, hk, h, hv, 6, 7, pl, pw, {h, n, m}, false});     // rank 3
    }
}

TEST(FusedCore, HeadsSoftmaxEqualsAtenComposition) {
  torch::manual_seed(22);
  const int64_t b = 2, n = 30, m = 19, hk = 3, h = 4, hv = 2;
  torch::Tensor J = torch::randn({b, n, hk, m}).requires_grad_(true);
  torch::Tensor Pl = torch::randn({hk, h}).requires_grad_(true);
  torch::Tensor Pw = torch::randn({h, hv}).requires_grad_(true);
  torch::Tensor bias = torch::randn({1, h, n, m}).requires_grad_(true);
  torch::Tensor mask = torch::ones({n, m}, torch::kBool).tril(5).view({1, 1, n, m});
  torch::Tensor G = torch::randn({b, n, hv, m});
  auto run = [&](bool fused) {
    set_fused_attention(fused);
    for (auto t : {J, Pl, Pw, bias}) t.mutable_grad() = torch::Tensor();
    torch::Tensor U = heads_softmax(J, Pl, Pw, bias, mask);
    (U * G).sum().backward();
    return std::vector<torch::Tensor>{U.detach().clone(), J.grad().clone(), Pl.grad().clone(),
                                      Pw.grad().clone(), bias.grad().clone()};
  };
  const auto want = run(false), got = run(true);
  set_fused_attention(true);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(close(got[i], want[i], 2e-6, 2e-5)) << "tensor " << i;
}

// Results do not depend on the thread count beyond summation order.
TEST(FusedCore, ThreadCountChangesOnlyRounding) {
  torch::manual_seed(23);
  torch::Tensor Q = torch::randn({2, 50, 4, 8}), K = torch::randn({2, 40, 4, 8});
  torch::Tensor V = torch::randn({2, 40, 4, 8}), Pl = torch::randn({4, 4}), Pw = torch::randn({4, 4});
  const int threads = torch::get_num_threads();
  torch::set_num_threads(1);
  torch::Tensor one = attention_core(Q, K, V, Pl, Pw, {}, {});
  torch::set_num_threads(std::max(2, threads));
  torch::Tensor many = attention_core(Q, K, V, Pl, Pw, {}, {});
  torch::set_num_threads(threads);
  EXPECT_TRUE(close(many, one, 1e-6, 1e-6));
}

// `thx --th-path`: the talking-heads family's path off the CPU. Only named paths are taken; on a
// GPU each sends attention_core where it says: O equal bit for bit to that path's own (the fused
// kernels', the tiled path's, the batched composition's; their sums run in different orders).
// The CPU takes its own cores whatever the path.
TEST(FusedCore, ThPathChoosesTheTalkingHeadsPath) {
  EXPECT_EQ(th_path(), "tiled");  // the default, not chosen
  EXPECT_FALSE(th_path_chosen());
  EXPECT_THROW(set_th_path("flashy"), c10::Error);
  torch::manual_seed(29);
  torch::Tensor Q = torch::randn({2, 40, 4, 8}), K = torch::randn({2, 30, 4, 8});
  torch::Tensor V = torch::randn({2, 30, 4, 8}), Pl = torch::randn({4, 4}), Pw = torch::randn({4, 4});
  const torch::Tensor cpu = attention_core(Q, K, V, Pl, Pw, {}, {});
  set_th_path("batched");
  EXPECT_TRUE(torch::equal(attention_core(Q, K, V, Pl, Pw, {}, {}), cpu));
  if (torch::cuda::is_available()) {
    for (torch::Tensor* t : {&Q, &K, &V, &Pl, &Pw}) *t = t->cuda();
    const cuda_th::Launcher* l = cuda_th_launcher();
    const torch::Tensor fused = l ? fused_th_attention_core(Q, K, V, Pl, Pw, {}, {}, *l) : torch::Tensor();
    const torch::Tensor batched = attention_core_reference(Q, K, V, Pl, Pw, {}, {});
    EXPECT_TRUE(torch::equal(attention_core(Q, K, V, Pl, Pw, {}, {}), batched));
    set_th_path("tiled");  // blocks of rows with thx's row kernels between cuBLAS's products (on tensor cores where
                           // the GPU has them), not ATen's composition, which rounds otherwise
    const torch::Tensor rows =
        tiled_attention_core(Q, K, V, Pl, Pw, {}, {}, 0, cuda_th_rows_launcher(th_tensor_cores()));
    EXPECT_TRUE(torch::equal(attention_core(Q, K, V, Pl, Pw, {}, {}), rows));
    set_th_path("fused");
    if (l) EXPECT_TRUE(torch::equal(attention_core(Q, K, V, Pl, Pw, {}, {}), fused));
  }
  EXPECT_TRUE(th_path_chosen());
  set_th_path("tiled", false);  // the default again, for the tests after
  EXPECT_EQ(th_path(), "tiled");
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
