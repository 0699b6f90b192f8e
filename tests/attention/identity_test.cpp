// Mathematical identities of the attention family, each checked on the production layers:
//   - talking_heads (and each hybrid) with identity projections equals multi_head;
//   - multi_head and talking_heads equal general_bilinear with P and Q composed (section 6);
//   - dynamic projections with zero generators equal static talking_heads;
//   - incremental decoding equals full causal attention;
//   - padding never changes the outputs at unmasked positions.
//
// Tolerances: identities that are exact in IEEE arithmetic (multiplying by 1 and adding
// exact zeros) are checked at 1e-6 absolute, effectively bit-equality for O(1) outputs.
// Identities that re-associate sums (GBMA's composed parameters, a cache that concatenates
// keys) are checked at the fp32 tolerance of reference_test.cpp, 2e-6 + 2e-5 * max|Y|, and
// in fp64 at 1e-12 + 1e-10 * max|Y|.
#include <gtest/gtest.h>

#include "attention/attention_test_util.h"
#include "attention/general_bilinear.h"
#include "attention/projected.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

void set_param(torch::nn::Module& m, const std::string& name, const torch::Tensor& value) {
  torch::NoGradGuard g;
  m.named_parameters()[name].set_data(value.to(m.named_parameters()[name].dtype()).clone());
}

void copy_params(torch::nn::Module& from, torch::nn::Module& to) {
  for (auto& kv : to.named_parameters())
    if (from.named_parameters().contains(kv.key()))
      set_param(to, kv.key(), from.named_parameters()[kv.key()]);
}

// "X_l" -> "P_Xl"
std::string generator_name(const std::string& dynamic) {
  return "P_" + dynamic.substr(0, 1) + dynamic.substr(2, 1);
}

struct Shared {
  torch::Tensor X, M, bias, mask;
};

Shared inputs(int64_t h, torch::Dtype dtype = torch::kFloat32) {
  auto o = torch::TensorOptions().dtype(dtype);
  Shared s;
  s.X = torch::randn({kB, kN, kDX}, o);
  s.M = torch::randn({kB, kM, kDM}, o);
  s.bias = torch::randn({1, h, kN, kM}, o);
  s.mask = (torch::arange(kM).view({1, kM}) < torch::tensor({int64_t{2}, kM}).view({kB, 1}))
               .view({kB, 1, 1, kM});
  return s;
}

TEST(Identity, TalkingHeadsWithIdentityProjectionsIsMultiHead) {
  torch::manual_seed(11);
  const int64_t h = 4;
  auto mh = make_attention(resolve(make_config("multi_head", h, h, h, 3, 5), kDX, kDM, kDY));
  const Shared in = inputs(h);
  const torch::Tensor want = mh->forward(in.X, in.M, in.bias, in.mask);
  for (const char* v : {"talking_heads", "project_logits", "project_weights"}) {
    auto th = make_attention(resolve(make_config(v, h, h, h, 3, 5), kDX, kDM, kDY));
    copy_params(*mh, *th);
    if (th->named_parameters().contains("P_l")) set_param(*th, "P_l", torch::eye(h));
    if (th->named_parameters().contains("P_w")) set_param(*th, "P_w", torch::eye(h));
    EXPECT_TRUE(close(th->forward(in.X, in.M, in.bias, in.mask), want, 1e-6, 0)) << v;
    // Control: with a non-identity projection the outputs differ.
    if (th->named_parameters().contains("P_l")) {
      set_param(*th, "P_l", torch::eye(h) + 0.1 * torch::randn({h, h}));
      EXPECT_FALSE(close(th->forward(in.X, in.M, in.bias, in.mask), want, 1e-3, 0)) << v;
    }
  }
}

// Section 6: MultiHeadAttentionInefficient / TalkingHeadsAttentionInefficient.
void check_gbma(const AttentionConfig& c, torch::Dtype dtype, double atol, double rtol) {
  torch::manual_seed(12);
  const AttentionDims d = resolve(c, kDX, kDM, kDY);
  auto layer = make_attention(d);
  layer->to(dtype);
  const paper::Params p = params_of(*layer);
  auto [P, Q] = d.name() == "multi_head" ? paper::compose_multi_head(p)
                                                 : paper::compose_talking_heads(p);
  AttentionConfig gc;
  gc.variant = "general_bilinear";
  gc.h = d.h;
  auto gb = make_attention(resolve(gc, kDX, kDM, kDY));
  gb->to(dtype);
  set_param(*gb, "P", P.detach());
  set_param(*gb, "Q", Q.detach());
  const Shared in = inputs(d.h, dtype);
  const torch::Tensor want = layer->forward(in.X, in.M, in.bias, in.mask);
  EXPECT_TRUE(close(gb->forward(in.X, in.M, in.bias, in.mask), want, atol, rtol)) << d.summary();
}

TEST(Identity, MultiHeadIsGeneralBilinearWithComposedParameters) {
  check_gbma(make_config("multi_head", 4, 4, 4, 3, 5), torch::kFloat32, 2e-6, 2e-5);
  check_gbma(make_config("multi_head", 4, 4, 4, 3, 5), torch::kFloat64, 1e-12, 1e-10);
}

TEST(Identity, TalkingHeadsIsGeneralBilinearWithComposedParameters) {
  check_gbma(make_config("talking_heads", 3, 5, 2, 4, 6), torch::kFloat32, 2e-6, 2e-5);
  check_gbma(make_config("talking_heads", 3, 5, 2, 4, 6), torch::kFloat64, 1e-12, 1e-10);
}

TEST(Identity, ZeroDynamicGeneratorsAreStaticTalkingHeads) {
  torch::manual_seed(13);
  auto stat = make_attention(resolve(make_config("talking_heads", 3, 5, 2, 4, 6), kDX, kDM, kDY));
  const Shared in = inputs(5);
  const torch::Tensor want = stat->forward(in.X, in.M, in.bias, in.mask);
  for (std::vector<std::string> dyn :
       {std::vector<std::string>{"X_l"}, {"M_l"}, {"X_w"}, {"M_w"}, {"X_l", "M_l", "X_w", "M_w"}}) {
    auto layer =
        make_attention(resolve(make_config("talking_heads", 3, 5, 2, 4, 6, dyn), kDX, kDM, kDY));
    copy_params(*stat, *layer);
    for (const auto& g : dyn) {
      const std::string name = generator_name(g);
      set_param(*layer, name, torch::zeros(layer->named_parameters()[name].sizes()));
    }
    EXPECT_TRUE(close(layer->forward(in.X, in.M, in.bias, in.mask), want, 1e-6, 0)) << dyn[0];
    // Control: the initialized (non-zero) generators change the output.
    auto fresh =
        make_attention(resolve(make_config("talking_heads", 3, 5, 2, 4, 6, dyn), kDX, kDM, kDY));
    for (auto& kv : stat->named_parameters()) set_param(*fresh, kv.key(), kv.value());
    for (const auto& g : dyn) {
      const std::string name = generator_name(g);
      set_param(*fresh, name, 0.5 * torch::randn(fresh->named_parameters()[name].sizes()));
    }
    EXPECT_FALSE(close(fresh->forward(in.X, in.M, in.bias, in.mask), want, 1e-4, 0)) << dyn[0];
  }
}

// Decoder self-attention one position at a time, with the cache, equals full causal attention
// with the same bias, for every variant. The bias of step t is row t of the full bias.
TEST(Identity, IncrementalDecodingEqualsFullCausalAttention) {
  const int64_t T = 6, d = 8;
  for (const auto& c : all_cases()) {
    torch::manual_seed(14);
    const AttentionDims dims = resolve(c.config, d, d, d);
    auto layer = make_attention(dims);
    torch::Tensor X = torch::randn({kB, T, d});
    torch::Tensor bias = torch::randn({1, dims.h, T, T});
    torch::Tensor causal = torch::ones({T, T}, torch::kBool).tril().view({1, 1, T, T});
    const torch::Tensor full = layer->forward(X, X, bias, causal);
    AttentionCache cache;
    for (int64_t t = 0; t < T; ++t) {
      torch::Tensor x = X.narrow(1, t, 1);
      torch::Tensor y = layer->forward_cached(x, x, cache, bias.narrow(2, t, 1).narrow(3, 0, t + 1));
      EXPECT_EQ(cache.length(), t + 1) << c.name;
      EXPECT_TRUE(close(y, full.narrow(1, t, 1), 2e-6, 2e-5)) << c.name << " step " << t;
    }
  }
}

// Encoder-decoder attention with a fixed cache: the memory is projected once and reused.
TEST(Identity, FixedCacheEqualsFullAttention) {
  for (const auto& c : all_cases()) {
    torch::manual_seed(15);
    auto layer = make_attention(resolve(c.config, kDX, kDM, kDY));
    const Shared in = inputs(layer->dims().h);
    const torch::Tensor full = layer->forward(in.X, in.M, {}, in.mask);
    AttentionCache cache;
    cache.fixed = true;
    for (int64_t t = 0; t < kN; ++t) {
      torch::Tensor y = layer->forward_cached(in.X.narrow(1, t, 1), in.M, cache, {}, in.mask);
      EXPECT_EQ(cache.length(), kM) << c.name;
      EXPECT_TRUE(close(y, full.narrow(1, t, 1), 2e-6, 2e-5)) << c.name << " step " << t;
    }
  }
}

// Padding: masked memory positions change nothing, whatever they hold. Each example's outputs
// equal those of attending to its unpadded memory alone, without a mask.
TEST(Identity, PaddingNeverChangesUnmaskedOutputs) {
  const std::vector<int64_t> lengths = {2, 5};
  for (const auto& c : all_cases()) {
    torch::manual_seed(16);
    auto layer = make_attention(resolve(c.config, kDX, kDM, kDY));
    const int64_t h = layer->dims().h;
    torch::Tensor X = torch::randn({kB, kN, kDX}), M = torch::randn({kB, kM, kDM});
    torch::Tensor bias = torch::randn({kB, h, kN, kM});
    torch::Tensor len = torch::tensor(lengths).view({kB, 1});
    torch::Tensor mask = (torch::arange(kM).view({1, kM}) < len).view({kB, 1, 1, kM});
    const torch::Tensor Y = layer->forward(X, M, bias, mask);
    // Garbage in the padded positions changes nothing.
    torch::Tensor M2 = M.clone();
    M2.index_put_({0, torch::indexing::Slice(2, torch::indexing::None)}, 1e3);
    EXPECT_TRUE(close(layer->forward(X, M2, bias, mask), Y, 1e-6, 0)) << c.name;
    for (int64_t i = 0; i < kB; ++i) {
      const int64_t l = lengths[i];
      torch::Tensor yi = layer->forward(X.narrow(0, i, 1), M.narrow(0, i, 1).narrow(1, 0, l),
                                        bias.narrow(0, i, 1).narrow(3, 0, l));
      EXPECT_TRUE(close(Y.narrow(0, i, 1), yi, 2e-6, 2e-5)) << c.name << " example " << i;
    }
  }
}

// Attention dropout acts only in training, on the weights that multiply the values (after
// P_w), so it is unbiased: the mean over many training passes is the eval output. 4000
// passes: the standard error of the mean is ~1.5% of one pass's spread; tolerance 5e-2 * max.
TEST(Dropout, OnlyInTrainingAndUnbiased) {
  for (const char* v : {"talking_heads", "multi_head", "general_bilinear"}) {
    torch::manual_seed(17);
    AttentionConfig c = make_config(v, 3, 3, 3, 4, 4);
    c.dropout = 0.3;
    auto layer = make_attention(resolve(c, kDX, kDM, kDY));
    torch::NoGradGuard g;
    const Shared in = inputs(3);
    layer->eval();
    const torch::Tensor eval = layer->forward(in.X, in.M, in.bias, in.mask);
    EXPECT_TRUE(torch::equal(eval, layer->forward(in.X, in.M, in.bias, in.mask))) << v;
    layer->train();
    torch::Tensor sum = torch::zeros_like(eval);
    const int passes = 4000;
    for (int i = 0; i < passes; ++i) sum += layer->forward(in.X, in.M, in.bias, in.mask);
    EXPECT_FALSE(close(layer->forward(in.X, in.M, in.bias, in.mask), eval, 1e-3, 0)) << v;
    EXPECT_TRUE(close(sum / passes, eval, 0, 5e-2)) << v;
  }
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
