// Slow checks (ctest label "slow"; not in the default CI run): bit-exact resume and
// overfitting a tiny corpus.
#include <gtest/gtest.h>

#include "common/h5.h"
#include "training/checkpoint.h"
#include "training/training_fixtures.h"

namespace thx::test {

// 2k steps straight equal k steps, a restart from the checkpoint, and k more: every
// parameter and every optimizer slot, bit for bit.
TEST(Resume, BitExactAgainstAnUninterruptedRun) {
  TempDir dir;
  const std::string prep = prepared_corpus(dir);
  PretrainConfig c = tiny_pretrain(prep, 40);
  c.checkpoint.every = 20;
  run_pretrain(c, dir.file("straight"), false);
  PretrainConfig half = c;
  half.train.steps = 40;
  // Stop after 20 steps by running a 40-step job whose step-40 checkpoint we then delete.
  run_pretrain(c, dir.file("resumed"), false);
  std::filesystem::remove(checkpoint_path(dir.file("resumed/checkpoints"), 40));
  run_pretrain(c, dir.file("resumed"), true);
  const Checkpoint a = load_checkpoint(checkpoint_path(dir.file("straight/checkpoints"), 40));
  const Checkpoint b = load_checkpoint(checkpoint_path(dir.file("resumed/checkpoints"), 40));
  ASSERT_EQ(a.params.size(), b.params.size());
  for (const auto& [k, v] : a.params) EXPECT_TRUE(torch::equal(v, b.params.at(k))) << k;
  for (const auto& [k, v] : a.optimizer) EXPECT_TRUE(torch::equal(v, b.optimizer.at(k))) << k;
  EXPECT_EQ(a.stream.example, b.stream.example);
}

// A tiny model memorizes a tiny corpus (held-out = train here). The synthetic text draws
// words uniformly from 27, so a model that has not memorized the documents pays ln(27) = 3.3
// nats for each masked word: about 2 nats per target token once the predictable sentinels
// and EOS are averaged in. Below 1.5 it has memorized the text.
TEST(Overfit, TinyModelMemorizesTinyCorpus) {
  TempDir dir;
  PrepareOptions o;
  o.inputs = {dir.write("corpus.txt", synthetic_corpus(4, 3))};
  o.format = CorpusFormat::text;
  o.tokenizer = tiny_tokenizer(dir);
  o.out_dir = dir.file("prep");
  o.heldout_files = {o.inputs[0]};  // the same text held out: memorization is measurable
  o.inputs = {dir.write("copy.txt", synthetic_corpus(4, 3))};
  run_prepare(o);
  PretrainConfig c = tiny_pretrain(o.out_dir, 1500);
  c.model.d_model = 64, c.model.d_ff = 128;
  c.optimizer.schedule = "constant";
  c.optimizer.learning_rate = 0.01;
  c.eval.every = 1500;
  c.checkpoint.every = 1500;
  c.eval.seed = 0;
  c.train.seed = 0;
  finish(c);  // the model changed after tiny_pretrain resolved it
  const PretrainResult r = run_pretrain(c, dir.file("run"), false);
  EXPECT_LT(r.ln_ppl, 1.5) << "a 64-wide T5 should memorize 4 short documents in 1500 steps";
}

}  // namespace thx::test
