// Data parallel under torchrun (label "dist"): 2 ranks of 1 thread over Gloo on loopback
// equal one process on the same global batch, within 1e-5 relative on every parameter after
// 15 steps (only the order of the sums differs).
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "common/fs.h"
#include "distributed/dist_fixtures.h"
#include "eval/eval_fixtures.h"
#include "training/training_fixtures.h"

namespace thx::test {
namespace {

struct Runs {
  TempDir dir;
  std::string config;
  std::string run(const std::string& name) const { return dir.file(name); }
  std::string ckpt(const std::string& name, int64_t step) const {
    return checkpoint_path(dir.file(name + "/checkpoints"), step);
  }
  std::string args(const std::string& name, const std::string& extra = "") const {
    return fmt::format("pretrain --config {} --run-dir {} {}", config, run(name), extra);
  }
};

Runs setup(const std::string& variant, bool albert, int64_t grad_accum) {
  Runs r;
  const std::string prep = albert ? prepared_corpus(r.dir, 120, TokenizerConvention::albert) : prepared_corpus(r.dir);
  PretrainConfig c = albert ? tiny_albert_pretrain(prep, 15) : tiny_pretrain(prep, 15);
  if (!variant.empty()) {
    AttentionConfig a = c.attention.encoder_self;
    a.variant = variant;
    c.attention = {a, a, a};
  }
  c.train.grad_accum = grad_accum;
  c.yaml = to_yaml(c);
  r.config = r.dir.write("run.yaml", c.yaml);
  return r;
}

void equivalent(const std::string& variant, bool albert, int64_t grad_accum) {
  const Runs r = setup(variant, albert, grad_accum);
  const auto one = run_thx("--threads 1 " + r.args("one"));
  ASSERT_EQ(one.code, 0) << one.out;
  const auto two = run_torchrun(two_ranks(), r.args("two"));
  ASSERT_EQ(two.code, 0) << two.out;
  EXPECT_TRUE(same_params(r.ckpt("two", 15), r.ckpt("one", 15), 1e-5));
  // The sharded held-out evaluation, reduced over the ranks, equals one process's.
  const auto last_eval = [&](const std::string& run) {
    nlohmann::json e;
    std::ifstream in(r.run(run) + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);)
      if (line.find("ln_ppl") != std::string::npos) e = nlohmann::json::parse(line);
    return e;
  };
  const auto e1 = last_eval("one"), e2 = last_eval("two");
  ASSERT_TRUE(e1.contains("ln_ppl") && e2.contains("ln_ppl")) << e1 << e2;
  EXPECT_NEAR(double(e2["ln_ppl"]), double(e1["ln_ppl"]), 1e-5 * std::abs(double(e1["ln_ppl"])));
  const Checkpoint ck = load_checkpoint(r.ckpt("two", 15));
  EXPECT_EQ(ck.world_size, 2);
  ASSERT_TRUE(ck.rng_ranks.defined());
  EXPECT_EQ(ck.rng_ranks.size(0), 2);
}

TEST(DataParallel, T5MultiHeadTwoRanksEqualOneProcess) { equivalent("multi_head", false, 1); }
TEST(DataParallel, T5TalkingHeadsTwoRanksEqualOneProcess) { equivalent("talking_heads", false, 1); }
TEST(DataParallel, T5GradAccumTwoRanksEqualOneProcess) { equivalent("talking_heads", false, 2); }
TEST(DataParallel, AlbertTwoRanksEqualOneProcess) { equivalent("", true, 1); }

// Fine-tuning (T5's text-to-text mixture, an ALBERT head), 15 steps: the same parameters, and
// the sharded dev evaluation gives the same record as one process's (accuracy over 32
// examples: exact).
void finetune_equivalent(bool albert) {
  FinetuneFixture s;
  make_finetune_fixture(s, albert);
  const std::string args = fmt::format("finetune --config {} --set finetune.steps=15 --set finetune.dropout=0 "
                                       "--set finetune.classifier_dropout=0 --out ", s.config);
  const auto one = run_thx("--threads 1 " + args + s.dir.file("one"));
  ASSERT_EQ(one.code, 0) << one.out;
  const auto two = run_torchrun(two_ranks(), args + s.dir.file("two"));
  ASSERT_EQ(two.code, 0) << two.out;
  EXPECT_TRUE(same_params(s.dir.file("two/" + s.final_params), s.dir.file("one/" + s.final_params), 1e-5));
  EXPECT_EQ(read_file(s.dir.file("two/sst2.json")), read_file(s.dir.file("one/sst2.json")));
}

TEST(DataParallel, T5FinetuningTwoRanksEqualOneProcess) { finetune_equivalent(false); }
TEST(DataParallel, AlbertFinetuningTwoRanksEqualOneProcess) { finetune_equivalent(true); }

}  // namespace
}  // namespace thx::test
