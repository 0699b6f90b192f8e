// train.deterministic as a user sets it (common/determinism.h), on the CPU, where thx's steps
// repeat to the bit anyway: turning it on changes no number of a run (T5 with talking-heads and
// ALBERT, dropout on, with held-out evaluations), and the run's saved config and log say it. A value
// that is not a boolean is one line naming the key. On a GPU, tests/cli/cuda_test.cpp checks what
// it is for: runs that repeat and resume bit for bit.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "common/fs.h"
#include "eval/eval_fixtures.h"
#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

TEST(Deterministic, ChangesNoNumberOnTheCpu) {
  for (const bool albert : {false, true}) {
    SCOPED_TRACE(albert ? "albert" : "t5");
    TempDir dir;
    PretrainConfig c = albert ? tiny_albert_pretrain(prepared_corpus(dir, 120, TokenizerConvention::albert), 6)
                              : tiny_pretrain(prepared_corpus(dir), 6);
    c.model.dropout = 0.1;
    c.checkpoint.every = 6, c.eval.every = 3;
    finish(c);
    const std::string cfg = dir.write("run.yaml", c.yaml);
    auto args = [&](const std::string& run, bool on) {
      return "--threads 1 --device cpu pretrain --config " + cfg + " --run-dir " + dir.file(run) +
             (on ? " --set train.deterministic=true" : "");
    };
    const std::string said = ", deterministic algorithms (train.deterministic)";  // in the run's first line
    RunResult r = run_thx(args("plain", false));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(r.out.find(said), std::string::npos);
    r = run_thx(args("deterministic", true));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find(said), std::string::npos) << r.out;
    EXPECT_NE(read_file(dir.file("deterministic/config.yaml")).find("deterministic: true"), std::string::npos);
    const Checkpoint a = load_checkpoint(checkpoint_path(dir.file("plain/checkpoints"), 6));
    const Checkpoint b = load_checkpoint(checkpoint_path(dir.file("deterministic/checkpoints"), 6));
    ASSERT_EQ(a.params.size(), b.params.size());
    for (const auto& [k, v] : a.params) EXPECT_TRUE(torch::equal(v, b.params.at(k))) << k;
    for (const auto& [k, v] : a.optimizer) EXPECT_TRUE(torch::equal(v, b.optimizer.at(k))) << k;
    const auto ea = eval_records(dir.file("plain/metrics.jsonl"));
    EXPECT_EQ(ea.size(), 2u);
    EXPECT_EQ(ea, eval_records(dir.file("deterministic/metrics.jsonl")));
  }
}

// finetune.deterministic the same, for ALBERT's heads (a fine-tuning of T5 takes its loop alike):
// the fine-tuned parameters, the best-of-run record and the predictions are equal.
TEST(Deterministic, FineTuningChangesNoNumberOnTheCpu) {
  FinetuneFixture s;
  make_finetune_fixture(s, true);
  const std::string said = "deterministic algorithms (finetune.deterministic): each step repeats to the bit on cpu";
  for (const std::string out : {"plain", "deterministic"}) {
    const RunResult r = run_thx("--threads 1 --device cpu finetune --config " + s.config + " --out " +
                                s.dir.file(out) + " --set finetune.steps=8 --set finetune.eval_every=4" +
                                (out == "plain" ? "" : " --set finetune.deterministic=true"));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(r.out.find(said) != std::string::npos, out == "deterministic") << r.out;
  }
  EXPECT_TRUE(same_params(s.dir.file("plain/" + s.final_params), s.dir.file("deterministic/" + s.final_params), 0));
  for (const std::string f : {"sst2.json", "SST-2.tsv"})
    EXPECT_EQ(read_file(s.dir.file("plain/" + f)), read_file(s.dir.file("deterministic/" + f))) << f;
}

TEST(Deterministic, NotABooleanIsOneLineNamingTheKey) {
  TempDir dir;
  PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 2);
  finish(c);
  const std::string cfg = dir.write("run.yaml", c.yaml);
  const RunResult r = run_thx("--device cpu pretrain --config " + cfg + " --run-dir " + dir.file("run") +
                              " --set train.deterministic=maybe");
  EXPECT_TRUE(refused(r, "", "train.deterministic"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("run")));
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
