// training_fixtures.h: a prepared synthetic corpus and a tiny pretraining config.
#pragma once
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <vector>

#include "data/data_fixtures.h"
#include "data/prepare.h"
#include "test_util.h"
#include "training/checkpoint.h"
#include "training/pretrain.h"

namespace thx::test {

// Tokenizer + prepared shards of synthetic_corpus(docs) in dir/prep; returns the directory.
inline std::string prepared_corpus(const TempDir& dir, int docs = 120,
                                   TokenizerConvention convention = TokenizerConvention::t5) {
  PrepareOptions o;
  o.inputs = {dir.write("corpus.txt", synthetic_corpus(docs))};
  o.format = CorpusFormat::text;
  o.tokenizer = tiny_tokenizer(dir, 64, convention);
  o.out_dir = dir.file("prep");
  o.heldout_fraction = 0.1;
  run_prepare(o);
  return o.out_dir;
}

inline PretrainConfig tiny_pretrain(const std::string& prepared, int64_t steps) {
  PretrainConfig c;
  c.model.d_model = 32, c.model.d_ff = 64, c.model.encoder_layers = 1, c.model.decoder_layers = 1;
  AttentionConfig mh;
  mh.h = 4;
  AttentionConfig th = mh;
  th.variant = "talking_heads";
  c.attention = {th, mh, mh};
  c.data.prepared = prepared;
  c.data.inputs_length = 32, c.data.targets_length = 8;
  c.train.steps = steps, c.train.batch_size = 8, c.train.log_every = 5;
  c.checkpoint.every = 5, c.checkpoint.keep = 2;
  c.eval.every = 5, c.eval.examples = 8, c.eval.batch_size = 8;
  finish(c);
  return c;
}

// `c` for runs whose results a test compares bit for bit: under train.deterministic where
// LibTorch sees a GPU (test_util.h, deterministic_here), as it was on the CPU; finished again.
inline PretrainConfig& bitwise_runs(PretrainConfig& c) {
  c.train.deterministic = deterministic_here();
  return finish(c);
}

// A tiny ALBERT (model.type albert, 2 layers in 1 group, talking-heads) on prepared shards of
// an ALBERT-convention tokenizer: MLM + SOP, LAMB.
inline PretrainConfig tiny_albert_pretrain(const std::string& prepared, int64_t steps) {
  PretrainConfig c;
  c.model.type = "albert";
  c.model.d_model = 32, c.model.d_ff = 64, c.model.encoder_layers = 2, c.model.embedding_size = 16;
  c.model.max_positions = 32;
  AttentionConfig th;
  th.variant = "talking_heads", th.h = 4;
  c.attention = {th, th, th};
  c.data.prepared = prepared;
  c.data.inputs_length = 32, c.data.max_predictions_per_seq = 5;
  c.train.steps = steps, c.train.batch_size = 8, c.train.log_every = 5;
  c.optimizer.name = "lamb", c.optimizer.schedule = "polynomial", c.optimizer.learning_rate = 0.01;
  c.optimizer.warmup_steps = 2, c.optimizer.weight_decay = 0.01, c.optimizer.adam_epsilon = 1e-6;
  c.checkpoint.every = 5, c.checkpoint.keep = 2;
  c.eval.every = 5, c.eval.examples = 8, c.eval.batch_size = 8;
  finish(c);
  return c;
}

// Every parameter of two checkpoints within atol + rtol * max |b| (or equal bitwise, rtol 0).
// The absolute floor is for parameters that stay at float noise. The key bias of attention
// (bias_k) is one: its gradient is exactly zero in exact arithmetic (softmax ignores a shift of
// all logits of a query), so what it holds is rounding residue, different for every summation
// order, and Adam's normalized update turns that residue into steps of its own. For bias_k the
// check is therefore that both runs kept it at noise level (|x| < 1e-5), not that they agree.
inline ::testing::AssertionResult same_params(const std::string& a, const std::string& b, double rtol,
                                              double atol = 1e-8) {
  const Checkpoint ca = load_checkpoint(a), cb = load_checkpoint(b);
  if (ca.params.size() != cb.params.size()) return ::testing::AssertionFailure() << "parameter sets differ";
  for (const auto& [k, v] : cb.params) {
    auto it = ca.params.find(k);
    if (it == ca.params.end()) return ::testing::AssertionFailure() << a << " has no " << k;
    const bool noise = k.size() >= 7 && k.compare(k.size() - 7, 7, "/bias_k") == 0;
    if (noise && rtol > 0) {
      const double big = std::max(it->second.abs().max().item<double>(), v.abs().max().item<double>());
      if (big >= 1e-5) return ::testing::AssertionFailure() << k << " is no longer at noise level: " << big;
    } else if (rtol == 0) {
      if (!torch::equal(it->second, v)) return ::testing::AssertionFailure() << k << " differs bitwise";
    } else if (auto r = close(it->second, v, atol, rtol); !r) {
      return ::testing::AssertionFailure() << k << ": " << r.message();
    }
  }
  return ::testing::AssertionSuccess();
}

// A run's metrics.jsonl: its held-out records without their times and memory (which no run repeats).
inline std::vector<nlohmann::json> eval_records(const std::string& metrics) {
  std::vector<nlohmann::json> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("ln_ppl")) continue;  // a training window's record
    for (const char* k : {"time", "peak_rss_mb"}) j.erase(k);
    out.push_back(j);
  }
  return out;
}

}  // namespace thx::test
