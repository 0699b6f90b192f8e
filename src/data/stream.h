// stream.h: span-corruption examples from a tokenized corpus, packed as T5 packs them.
//
// Documents are concatenated, each followed by EOS, in an order shuffled per epoch from the
// seed (or in corpus order), and cut into raw chunks of span_lengths().raw tokens; each
// chunk is span-corrupted with a random generator seeded from (seed, example index). Example
// k is therefore a function of the seed and k alone, whatever the batch size or thread count,
// and the stream resumes exactly from its state().
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <random>

#include "data/prepare.h"
#include "data/recall.h"
#include "data/span_corruption.h"

namespace thx {

struct StreamState {
  int64_t epoch = 0, doc = 0, offset = 0, example = 0;
};

// One batch. T5: inputs, decoder_inputs, targets. BERT/ALBERT (data/mlm.h): inputs,
// token_types, positions (of the masked tokens), targets (their original ids), labels.
struct Batch {
  torch::Tensor inputs;          // [b, inputs_length] int64, 0 = padding
  torch::Tensor decoder_inputs;  // [b, targets_length]: targets shifted right, 0 first
  torch::Tensor targets;         // [b, targets_length], 0 = padding  (MLM: [b, P])
  torch::Tensor token_types;     // [b, inputs_length] segment ids      (MLM)
  torch::Tensor positions;       // [b, P] masked positions, 0 padded    (MLM)
  torch::Tensor labels;          // [b] sentence label, -1 = none        (MLM)
                                 //     fine-tuning heads: class / option label
  torch::Tensor scores;          // [b] float regression target (fine-tuning heads; targets
                                 //     [b,2] then holds span start and end)
};

// b with every defined tensor on `device` (b itself when they are there already): streams
// build batches on the CPU; models take them on their own device.
Batch to_device(const Batch& b, const torch::Device& device);

// A resumable source of training or held-out batches.
class ExampleStream {
 public:
  virtual ~ExampleStream() = default;
  virtual Batch next(int64_t batch_size) = 0;
  virtual const StreamState& state() const = 0;
  virtual void set_state(const StreamState& s) = 0;
};

// splitmix64, the seed mixer of every stream.
uint64_t mix_seed(uint64_t x);

class SpanCorruptionStream : public ExampleStream {
 public:
  SpanCorruptionStream(const TokenCorpus& corpus, int64_t inputs_length, int64_t targets_length,
                       double density, double mean_span, uint64_t seed, bool shuffle);

  Batch next(int64_t batch_size) override;
  Corrupted next_example();

  const StreamState& state() const override { return state_; }
  void set_state(const StreamState& s) override;
  const SpanLengths& lengths() const { return lengths_; }

 private:
  void start_epoch();
  const TokenCorpus& corpus_;
  SpanLengths lengths_;
  int64_t inputs_length_, targets_length_;
  double density_, mean_span_;
  uint64_t seed_;
  bool shuffle_;
  StreamState state_;
  std::vector<int64_t> order_;
};

// Multi-query associative recall examples (data/recall.h), generated, as MLM batches.
class RecallStream : public ExampleStream {
 public:
  // held_out: the held-out class of examples, else the training class. Throws InputError if
  // recall_options_problem(o) names a key.
  RecallStream(RecallOptions o, uint64_t seed, bool held_out);

  RecallExample next_example();
  // inputs [b, n], token_types 0 [b, n], positions [b, Q], targets [b, Q], labels -1 [b].
  Batch next(int64_t batch_size) override;
  const StreamState& state() const override { return state_; }
  void set_state(const StreamState& s) override { state_ = s; }

 private:
  RecallOptions o_;
  uint64_t seed_;
  bool held_out_;
  StreamState state_;
};

}  // namespace thx
