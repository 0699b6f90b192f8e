#include "data/span_corruption.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace thx {

uint64_t random_below(std::mt19937_64& rng, uint64_t n) {
  // Rejection sampling on the top of the range: unbiased, and the same on every platform.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = rng();
  while (x >= limit);
  return x % n;
}

SpanLengths span_lengths(int64_t inputs_length, double density, double mean_span) {
  THX_CHECK(inputs_length >= 2, "inputs length {} is too short for span corruption", inputs_length);
  auto lengths = [&](int64_t tokens) {
    const int64_t noise = std::llround(std::nearbyint(tokens * density));
    const int64_t spans = std::llround(std::nearbyint(noise / mean_span));
    return std::pair<int64_t, int64_t>{tokens - noise + spans + 1, noise + spans + 1};
  };
  int64_t tokens = inputs_length - 1;
  while (lengths(tokens + 1).first <= inputs_length) ++tokens;
  auto [in, tg] = lengths(tokens);
  return {tokens, in, tg};
}

namespace {

// Cut num_items into num_segments non-empty segments, uniformly at random: choose
// num_segments - 1 of the num_items - 1 gaps between items (a partial Fisher-Yates).
std::vector<int64_t> random_segmentation(int64_t num_items, int64_t num_segments,
                                         std::mt19937_64& rng) {
  std::vector<int64_t> gaps(num_items - 1);
  for (int64_t i = 0; i < num_items - 1; ++i) gaps[i] = i + 1;
  for (int64_t i = 0; i < num_segments - 1; ++i)
    std::swap(gaps[i], gaps[i + random_below(rng, num_items - 1 - i)]);
  std::vector<int64_t> cuts(gaps.begin(), gaps.begin() + (num_segments - 1));
  std::sort(cuts.begin(), cuts.end());
  std::vector<int64_t> lengths;
  int64_t prev = 0;
  for (int64_t c : cuts) lengths.push_back(c - prev), prev = c;
  lengths.push_back(num_items - prev);
  return lengths;
}

}  // namespace

std::vector<uint8_t> random_spans_noise_mask(int64_t orig_length, double density,
                                             double mean_span, std::mt19937_64& rng) {
  const int64_t length = std::max<int64_t>(orig_length, 2);
  // As T5: float32 arithmetic, round half to even, then clamp.
  int64_t noise = std::llround(std::nearbyint(float(length) * float(density)));
  noise = std::min(std::max<int64_t>(noise, 1), length - 1);
  const int64_t spans = std::max<int64_t>(1, std::llround(std::nearbyint(float(noise) / float(mean_span))));
  const auto noise_lengths = random_segmentation(noise, spans, rng);
  const auto keep_lengths = random_segmentation(length - noise, spans, rng);
  std::vector<uint8_t> mask;
  mask.reserve(length);
  for (int64_t s = 0; s < spans; ++s) {
    mask.insert(mask.end(), keep_lengths[s], 0);
    mask.insert(mask.end(), noise_lengths[s], 1);
  }
  mask.resize(orig_length);
  return mask;
}

Corrupted span_corrupt(const int32_t* tokens, int64_t length, const std::vector<uint8_t>& noise,
                       int64_t vocab_size) {
  Corrupted c;
  int32_t in_sentinel = int32_t(vocab_size - 1), tg_sentinel = int32_t(vocab_size - 1);
  for (int64_t i = 0; i < length; ++i) {
    const bool n = noise[i], first = i == 0 || noise[i - 1] != noise[i];
    if (n) {
      if (first) c.inputs.push_back(in_sentinel--);
      c.targets.push_back(tokens[i]);
    } else {
      if (first) c.targets.push_back(tg_sentinel--);
      c.inputs.push_back(tokens[i]);
    }
  }
  c.inputs.push_back(1);
  c.targets.push_back(1);
  return c;
}

}  // namespace thx
