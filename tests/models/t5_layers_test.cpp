// T5's pieces against their published definitions: relative position buckets (a table of
// values worked out by hand from the formula), RMS norm, the tied and scaled output.
#include <gtest/gtest.h>

#include "models/t5.h"
#include "test_util.h"

namespace thx {
namespace {
namespace THX_FILE_ID {

TEST(RelativePosition, BucketsFromThePublishedFormula) {
  // (relative position = memory - query, bidirectional) -> bucket, 32 buckets, max 128.
  // Bidirectional: 16 per direction, 8 exact, then 8 + floor(ln(n/8)/ln(16) * 8), <= 15;
  // memory after the query adds 16. Causal: 32 buckets, 16 exact, then
  // 16 + floor(ln(n/16)/ln(8) * 16), <= 31; the future is bucket 0.
  const std::vector<std::tuple<int64_t, bool, int64_t>> table = {
      {0, true, 0},     {-1, true, 1},    {1, true, 17},    {-7, true, 7},     {7, true, 23},
      {-8, true, 8},    {8, true, 24},    {-12, true, 9},   {-16, true, 10},   {-20, true, 10},
      {-32, true, 12},  {-50, true, 13},  {-64, true, 14},  {64, true, 30},    {-100, true, 15},
      {-127, true, 15}, {-128, true, 15}, {-1000, true, 15}, {1000, true, 31},
      {0, false, 0},    {5, false, 0},    {-5, false, 5},   {-15, false, 15},  {-16, false, 16},
      {-32, false, 21}, {-64, false, 26}, {-100, false, 30}, {-128, false, 31}, {-500, false, 31}};
  for (const auto& [rel, bidir, want] : table)
    EXPECT_EQ(relative_position_bucket(rel, bidir, 32, 128), want) << "rel " << rel << " bidir " << bidir;
  const torch::Tensor b = relative_position_buckets(3, 4, true, 32, 128);
  EXPECT_EQ(b[1][0].item<int64_t>(), 1);   // memory 0, query 1: rel -1
  EXPECT_EQ(b[1][3].item<int64_t>(), 18);  // rel +2
}

TEST(RMSNorm, ScaleOnlyNoMeanSubtraction) {
  torch::manual_seed(1);
  RMSNorm norm(5);
  torch::NoGradGuard g;
  norm->scale.copy_(torch::tensor({1.0f, 2.0f, 0.5f, -1.0f, 3.0f}));
  const torch::Tensor x = torch::randn({3, 5}) + 2.0;  // a mean far from 0
  const torch::Tensor y = norm->forward(x);
  for (int64_t r = 0; r < 3; ++r) {
    double ms = 0;
    for (int64_t j = 0; j < 5; ++j) ms += std::pow(x[r][j].item<double>(), 2) / 5;
    for (int64_t j = 0; j < 5; ++j)
      EXPECT_NEAR(y[r][j].item<double>(),
                  x[r][j].item<double>() / std::sqrt(ms + 1e-6) * norm->scale[j].item<double>(), 1e-5);
  }
}

TEST(T5, TiedScaledOutputAndPaddedRowsNeverProduced) {
  ModelConfig mc;
  mc.d_model = 16, mc.d_ff = 32, mc.encoder_layers = 1, mc.decoder_layers = 1;
  AttentionConfig a;
  a.h = 4;
  torch::manual_seed(2);
  T5 model(mc, T5Attention{a, a, a}, 70);
  EXPECT_EQ(model->shared.size(0), 128);  // padded to a multiple of 128
  const torch::Tensor in = torch::randint(2, 70, {2, 6}), dec = torch::randint(2, 70, {2, 5});
  const torch::Tensor logits = model->logits(in, dec);
  EXPECT_EQ(logits.sizes().vec(), (std::vector<int64_t>{2, 5, 70}));
  {  // rows 70..127 do not exist for the output
    torch::NoGradGuard g;
    model->shared.narrow(0, 70, 58).fill_(1e6);
  }
  EXPECT_TRUE(test::close(model->logits(in, dec), logits, 0, 0));
  // The output projection is the embedding, scaled by d^-1/2: doubling the embedding rows
  // used only by the output (tokens absent from the inputs) doubles just their logits.
  {
    torch::NoGradGuard g;
    model->shared[69].mul_(2.0);
  }
  const torch::Tensor after = model->logits(in.clamp_max(68), dec.clamp_max(68));
  const torch::Tensor before_clamped = [&] {
    torch::NoGradGuard g;
    model->shared[69].div_(2.0);
    return model->logits(in.clamp_max(68), dec.clamp_max(68));
  }();
  EXPECT_TRUE(test::close(after.select(2, 69), 2 * before_clamped.select(2, 69), 1e-5, 1e-5));
  EXPECT_TRUE(test::close(after.narrow(2, 0, 69), before_clamped.narrow(2, 0, 69), 0, 0));
}

// A row's logits do not depend on how much padding its batch adds to the inputs (a fine-tuning
// mixture pads a short SST-2 input to the longest SQuAD context of its batch), for multi-head
// and talking-heads.
TEST(T5, InputPaddingChangesNoLogits) {
  ModelConfig mc;
  mc.d_model = 16, mc.d_ff = 32, mc.encoder_layers = 2, mc.decoder_layers = 2;
  mc.relative_buckets = 8, mc.relative_max_distance = 16;
  for (const char* variant : {"multi_head", "talking_heads"}) {
    AttentionConfig a;
    a.variant = variant, a.h = 4;
    torch::manual_seed(4);
    T5 model(mc, T5Attention{a, a, a}, 50);
    model->eval();
    const torch::Tensor in = torch::randint(2, 50, {1, 5}), dec = torch::randint(2, 50, {1, 3});
    const torch::Tensor padded = torch::cat({in, torch::zeros({1, 40}, torch::kInt64)}, 1);
    EXPECT_TRUE(test::close(model->logits(padded, dec), model->logits(in, dec), 1e-5, 1e-5)) << variant;
  }
}

TEST(T5, LossIsMeanCrossEntropyPlusZLossOverTargetTokens) {
  ModelConfig mc;
  mc.d_model = 16, mc.d_ff = 32, mc.encoder_layers = 1, mc.decoder_layers = 1, mc.z_loss = 0.01;
  AttentionConfig a;
  a.h = 2;
  torch::manual_seed(3);
  T5 model(mc, T5Attention{a, a, a}, 50);
  const torch::Tensor in = torch::randint(2, 50, {2, 6});
  torch::Tensor tg = torch::randint(2, 50, {2, 4});
  tg[1][3] = 0;  // one padded target
  torch::Tensor dec = torch::zeros_like(tg);
  dec.narrow(1, 1, 3).copy_(tg.narrow(1, 0, 3));
  const auto out = model->forward(in, dec, tg);
  const torch::Tensor L = out.logits.to(torch::kFloat64);
  double ce = 0, z = 0;
  int n = 0;
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 4; ++t) {
      if (tg[b][t].item<int64_t>() == 0) continue;
      const double lse = torch::logsumexp(L[b][t], 0).item<double>();
      ce += lse - L[b][t][tg[b][t].item<int64_t>()].item<double>();
      z += lse * lse;
      ++n;
    }
  EXPECT_EQ(out.tokens, 7);
  EXPECT_NEAR(out.nll.item<double>(), ce / n, 1e-5);
  EXPECT_NEAR(out.loss.item<double>(), ce / n + 0.01 * z / n, 1e-5);
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx
