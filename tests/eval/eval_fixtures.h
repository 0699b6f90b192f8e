// eval_fixtures.h: small task data for the fine-tuning tests.
#pragma once
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "test_util.h"
#include "training/training_fixtures.h"

namespace thx::test {

// A task that needs the words: label 1 sentences carry "attention", label 0 ones "softmax".
inline void write_tiny_sst2(const TempDir& t) {
  const char* filler[] = {"the", "model", "heads", "talk", "to", "each", "other", "and", "learn"};
  uint64_t x = 12345;
  auto sentence = [&](int label) {
    std::string s;
    const int n = 4 + int(x % 4);
    const int at = int(x % n);
    for (int i = 0; i < n; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      s += (i ? " " : "") + std::string(i == at ? (label ? "attention" : "softmax") : filler[x % 9]);
    }
    return s;
  };
  std::filesystem::create_directories(t.file("data/glue/SST-2"));
  for (auto [split, n] : std::vector<std::pair<std::string, int>>{{"train", 400}, {"dev", 100}}) {
    std::string tsv = "sentence\tlabel\n";
    for (int i = 0; i < n; ++i) tsv += sentence(i % 2) + "\t" + std::to_string(i % 2) + "\n";
    std::ofstream(t.file("data/glue/SST-2/" + split + ".tsv")) << tsv;
  }
}

// A pretrained tiny model (5 steps), a tiny SST-2, and a fine-tuning config that evaluates and
// checkpoints every 10 of 40 steps: the first checkpoint already holds an evaluation, so a
// resumed run must carry the restored record of it into sst2.json.
struct FinetuneFixture {
  TempDir dir;
  std::string config, final_params, first_checkpoint;
};

inline void make_finetune_fixture(FinetuneFixture& s, bool albert) {
  const auto convention = albert ? TokenizerConvention::albert : TokenizerConvention::t5;
  const std::string prep = prepared_corpus(s.dir, 120, convention);
  PretrainConfig pc = albert ? tiny_albert_pretrain(prep, 5) : tiny_pretrain(prep, 5);
  finish(pc);
  run_pretrain(pc, s.dir.file("pretrained"), false);
  write_tiny_sst2(s.dir);
  s.config = s.dir.write("finetune.yaml", fmt::format(R"(finetune:
  pretrained: {}
  tokenizer: {}
  data: {}
  tasks: [sst2]
  steps: 40
  batch_size: 8
  inputs_length: 32
  targets_length: 8
  eval_every: 10
  log_every: 10
  max_query_length: 8
  max_train_examples: 64
  eval_examples: 32
  freeze_embedding: false
optimizer:
  name: {}
  schedule: constant
  learning_rate: {}
checkpoint:
  every: 10
  keep: 2
)", s.dir.file("pretrained"), s.dir.file("tiny.model"), s.dir.file("data"), albert ? "adamw" : "adafactor",
                                                     albert ? "0.003" : "0.001"));
  s.final_params = albert ? "sst2.h5" : "model.h5";
  s.first_checkpoint = albert ? "checkpoints/sst2/step-00000010.h5" : "checkpoints/step-00000010.h5";
}

}  // namespace thx::test
