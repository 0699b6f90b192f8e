// span_corruption.h: T5's span-corruption objective (Raffel et al., 2019), as its
// preprocessors random_spans_helper, random_spans_noise_mask and the sentinel maps define it.
//
// For a raw chunk of L tokens: num_noise = round(L·density) clamped to [1, L-1],
// num_spans = max(1, round(num_noise / mean_span)) (round half to even, as TF and Python).
// The noise and the non-noise tokens are each cut at random into num_spans non-empty
// segments, interleaved starting with non-noise. Each noise span becomes one sentinel in the
// inputs (<extra_id_0>, <extra_id_1>, ...), each non-noise span one sentinel in the targets;
// EOS ends both. The random bits differ from TensorFlow's; the distribution does not.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace thx {

// A portable bounded random integer in [0, n): std::uniform_int_distribution differs
// between standard libraries, and examples must not.
uint64_t random_below(std::mt19937_64& rng, uint64_t n);

struct SpanLengths {
  int64_t raw = 0;      // tokens per raw chunk
  int64_t inputs = 0;   // corrupted inputs, EOS included (<= the requested inputs length)
  int64_t targets = 0;  // targets, EOS included
};

// T5's random_spans_helper: the longest raw chunk whose inputs fit `inputs_length`. For 512,
// 0.15 and 3: 568 raw tokens, 512 inputs, 114 targets.
SpanLengths span_lengths(int64_t inputs_length, double density = 0.15, double mean_span = 3.0);

// T5's random_spans_noise_mask: one flag per token, 1 = noise.
std::vector<uint8_t> random_spans_noise_mask(int64_t length, double density, double mean_span,
                                             std::mt19937_64& rng);

struct Corrupted {
  std::vector<int32_t> inputs, targets;
};

// Sentinel k is vocab_size - 1 - k; EOS is id 1.
Corrupted span_corrupt(const int32_t* tokens, int64_t length, const std::vector<uint8_t>& noise,
                       int64_t vocab_size);

}  // namespace thx
