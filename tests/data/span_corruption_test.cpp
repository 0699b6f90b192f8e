// Span corruption as T5 defines it (random_spans_helper, random_spans_noise_mask, sentinels).
#include <gtest/gtest.h>

#include <map>

#include "data/span_corruption.h"

namespace thx {
namespace {
namespace THX_FILE_ID {

TEST(SpanLengths, T5Values) {
  // The paper: inputs 512 -> 568 raw tokens and 114 targets.
  const SpanLengths a = span_lengths(512);
  EXPECT_EQ(a.raw, 568);
  EXPECT_EQ(a.inputs, 512);
  EXPECT_EQ(a.targets, 114);
  // 128 by hand: t = 141 gives noise round(21.15) = 21, spans 7, inputs 141-21+7+1 = 128;
  // t = 142 gives 129. Targets 21+7+1 = 29.
  const SpanLengths b = span_lengths(128);
  EXPECT_EQ(b.raw, 141);
  EXPECT_EQ(b.inputs, 128);
  EXPECT_EQ(b.targets, 29);
}

struct Runs {
  int64_t noise = 0, spans = 0;
  bool starts_clean = false;
  std::vector<int64_t> noise_runs, clean_runs;
};

Runs runs(const std::vector<uint8_t>& m) {
  Runs r;
  r.starts_clean = !m.empty() && m[0] == 0;
  for (size_t i = 0; i < m.size(); ++i) {
    r.noise += m[i];
    if (i == 0 || m[i] != m[i - 1]) (m[i] ? r.noise_runs : r.clean_runs).push_back(0);
    (m[i] ? r.noise_runs : r.clean_runs).back()++;
  }
  r.spans = int64_t(r.noise_runs.size());
  return r;
}

TEST(NoiseMask, CountsAndSpansFollowTheFormula) {
  std::mt19937_64 rng(1);
  for (int64_t L : {2, 3, 7, 10, 20, 100, 141, 568, 1000})
    for (int rep = 0; rep < 20; ++rep) {
      const auto m = random_spans_noise_mask(L, 0.15, 3.0, rng);
      ASSERT_EQ(int64_t(m.size()), L);
      // num_noise = round(L * 0.15) clamped to [1, L-1]; num_spans = max(1, round(noise/3)).
      const int64_t noise = std::min(std::max<int64_t>(std::llround(std::nearbyint(L * 0.15)), 1), L - 1);
      const int64_t spans = std::max<int64_t>(1, std::llround(std::nearbyint(noise / 3.0)));
      const Runs r = runs(m);
      EXPECT_EQ(r.noise, noise) << "L=" << L;
      EXPECT_EQ(r.spans, spans) << "L=" << L;
      EXPECT_EQ(int64_t(r.clean_runs.size()), spans) << "L=" << L;
      EXPECT_TRUE(r.starts_clean) << "L=" << L;
      EXPECT_EQ(m.back(), 1) << "the last segment is noise, L=" << L;
    }
}

TEST(NoiseMask, MeanSpanLengthIsThree) {
  std::mt19937_64 rng(2);
  int64_t noise = 0, spans = 0;
  std::map<int64_t, int64_t> lengths;  // the segmentation is random, not fixed
  for (int rep = 0; rep < 2000; ++rep) {
    const auto m = random_spans_noise_mask(568, 0.15, 3.0, rng);
    const Runs r = runs(m);
    noise += r.noise, spans += r.spans;
    for (int64_t l : r.noise_runs) lengths[l]++;
  }
  EXPECT_NEAR(double(noise) / spans, 85.0 / 28.0, 1e-9);  // exactly round(85 / 3) spans
  // Cutting 85 items at 27 of 84 gaps: a span of length 1 has probability 27/84 ~ 0.32.
  EXPECT_NEAR(double(lengths[1]) / spans, 27.0 / 84.0, 0.02);
  EXPECT_GT(lengths.rbegin()->first, 10);
}

TEST(SpanCorrupt, InputsAndTargetsReconstructTheOriginal) {
  std::mt19937_64 rng(3);
  const int64_t vocab = 1100, L = 568;
  std::vector<int32_t> tokens(L);
  for (int64_t i = 0; i < L; ++i) tokens[i] = int32_t(3 + (i * 7919) % 997);
  const auto noise = random_spans_noise_mask(L, 0.15, 3.0, rng);
  const Corrupted c = span_corrupt(tokens.data(), L, noise, vocab);
  EXPECT_EQ(int64_t(c.inputs.size()), 512);  // span_lengths(512)
  EXPECT_EQ(int64_t(c.targets.size()), 114);
  EXPECT_EQ(c.inputs.back(), 1);
  EXPECT_EQ(c.targets.back(), 1);
  EXPECT_EQ(c.targets.front(), vocab - 1) << "targets start with <extra_id_0>";
  // Rebuild: each sentinel of the inputs is replaced by what follows the same sentinel in
  // the targets, up to the next sentinel.
  std::map<int32_t, std::vector<int32_t>> spans;
  int32_t cur = -1;
  for (size_t i = 0; i + 1 < c.targets.size(); ++i) {
    const int32_t t = c.targets[i];
    if (t >= vocab - 100) cur = t, spans[cur];
    else spans[cur].push_back(t);
  }
  std::vector<int32_t> rebuilt;
  int32_t expect_sentinel = int32_t(vocab - 1);
  for (size_t i = 0; i + 1 < c.inputs.size(); ++i) {
    const int32_t t = c.inputs[i];
    if (t >= vocab - 100) {
      EXPECT_EQ(t, expect_sentinel--) << "sentinels count down from <extra_id_0>";
      rebuilt.insert(rebuilt.end(), spans[t].begin(), spans[t].end());
    } else {
      rebuilt.push_back(t);
    }
  }
  EXPECT_EQ(rebuilt, tokens);
}

TEST(SpanCorrupt, SameSeedSameExample) {
  std::mt19937_64 a(42), b(42), c(43);
  const auto ma = random_spans_noise_mask(568, 0.15, 3.0, a);
  EXPECT_EQ(ma, random_spans_noise_mask(568, 0.15, 3.0, b));
  EXPECT_NE(ma, random_spans_noise_mask(568, 0.15, 3.0, c));
}

TEST(RandomBelow, UniformAndInRange) {
  std::mt19937_64 rng(5);
  std::vector<int64_t> counts(7);
  for (int i = 0; i < 70000; ++i) counts[random_below(rng, 7)]++;
  for (int64_t c : counts) EXPECT_NEAR(c / 10000.0, 1.0, 0.05);
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx
