#include "data/stream.h"

#include "common/error.h"

namespace thx {

uint64_t mix_seed(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

namespace {
uint64_t splitmix64(uint64_t x) { return mix_seed(x); }
}  // namespace

SpanCorruptionStream::SpanCorruptionStream(const TokenCorpus& corpus, int64_t inputs_length,
                                           int64_t targets_length, double density,
                                           double mean_span, uint64_t seed, bool shuffle)
    : corpus_(corpus), inputs_length_(inputs_length), targets_length_(targets_length),
      density_(density), mean_span_(mean_span), seed_(seed), shuffle_(shuffle) {
  lengths_ = span_lengths(inputs_length, density, mean_span);
  THX_CHECK(lengths_.targets <= targets_length,
            "data.targets_length {} is too short: inputs of {} need {} target tokens (T5's "
            "random_spans_helper)", targets_length, inputs_length, lengths_.targets);
  THX_CHECK(corpus.documents() > 0, "span corruption: the corpus has no documents");
  start_epoch();
}

void SpanCorruptionStream::start_epoch() {
  const int64_t n = corpus_.documents();
  order_.resize(n);
  for (int64_t i = 0; i < n; ++i) order_[i] = i;
  if (shuffle_) {
    std::mt19937_64 rng(splitmix64(seed_ ^ splitmix64(uint64_t(state_.epoch) + 1)));
    for (int64_t i = n - 1; i > 0; --i) std::swap(order_[i], order_[random_below(rng, i + 1)]);
  }
}

void SpanCorruptionStream::set_state(const StreamState& s) {
  THX_CHECK(s.doc >= 0 && s.doc < corpus_.documents() && s.offset >= 0 && s.epoch >= 0 &&
                s.example >= 0,
            "data stream state (epoch {}, doc {}, offset {}) does not fit this corpus ({} docs)",
            s.epoch, s.doc, s.offset, corpus_.documents());
  state_ = s;
  start_epoch();
}

Corrupted SpanCorruptionStream::next_example() {
  // The next raw chunk of the packed stream: documents in epoch order, EOS after each.
  std::vector<int32_t> raw;
  raw.reserve(lengths_.raw);
  while (int64_t(raw.size()) < lengths_.raw) {
    const int64_t d = order_[state_.doc];
    const int64_t begin = corpus_.offsets[d], len = corpus_.offsets[d + 1] - begin;
    if (state_.offset < len) {
      const int64_t take = std::min(len - state_.offset, lengths_.raw - int64_t(raw.size()));
      raw.insert(raw.end(), corpus_.tokens.begin() + begin + state_.offset,
                 corpus_.tokens.begin() + begin + state_.offset + take);
      state_.offset += take;
    } else {
      raw.push_back(1);  // EOS between documents
      state_.offset = 0;
      if (++state_.doc == corpus_.documents()) {
        state_.doc = 0;
        ++state_.epoch;
        start_epoch();
      }
    }
  }
  std::mt19937_64 rng(splitmix64(seed_ ^ splitmix64(~uint64_t(state_.example))));
  ++state_.example;
  const auto noise = random_spans_noise_mask(int64_t(raw.size()), density_, mean_span_, rng);
  return span_corrupt(raw.data(), int64_t(raw.size()), noise, corpus_.vocab_size);
}

Batch to_device(const Batch& b, const torch::Device& device) {
  auto move = [&](const torch::Tensor& t) { return t.defined() ? t.to(device) : t; };
  Batch d;
  d.inputs = move(b.inputs), d.decoder_inputs = move(b.decoder_inputs), d.targets = move(b.targets);
  d.token_types = move(b.token_types), d.positions = move(b.positions), d.labels = move(b.labels);
  d.scores = move(b.scores);
  return d;
}

Batch SpanCorruptionStream::next(int64_t batch_size) {
  Batch b;
  b.inputs = torch::zeros({batch_size, inputs_length_}, torch::kInt64);
  b.targets = torch::zeros({batch_size, targets_length_}, torch::kInt64);
  auto in = b.inputs.accessor<int64_t, 2>();
  auto tg = b.targets.accessor<int64_t, 2>();
  for (int64_t i = 0; i < batch_size; ++i) {
    const Corrupted c = next_example();
    for (size_t j = 0; j < c.inputs.size() && int64_t(j) < inputs_length_; ++j) in[i][j] = c.inputs[j];
    for (size_t j = 0; j < c.targets.size() && int64_t(j) < targets_length_; ++j) tg[i][j] = c.targets[j];
  }
  b.decoder_inputs = torch::zeros_like(b.targets);
  b.decoder_inputs.narrow(1, 1, targets_length_ - 1).copy_(b.targets.narrow(1, 0, targets_length_ - 1));
  return b;
}

}  // namespace thx
