// Checkpoints, the run directory, step-probe files and failure handling of pretraining.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <csignal>
#include <regex>
#include <thread>

#include "common/error.h"
#include "common/h5.h"
#include "training/checkpoint.h"
#include "training/training_fixtures.h"

namespace thx::test {
namespace fs = std::filesystem;

TEST(Checkpoint, RoundTripPruneAndCorruption) {
  TempDir dir;
  Checkpoint c;
  c.params["encoder/layers/0/self_attention/P_q"] = torch::randn({4, 2, 3});
  c.optimizer["encoder/layers/0/self_attention/P_q/v"] = torch::rand({4, 2, 3});
  c.step = 7, c.optimizer_step = 7, c.stream = {1, 2, 3, 4};
  c.rng = at::detail::getDefaultCPUGenerator().get_state();
  c.config = "a: 1\n";
  for (int64_t s : {5, 10, 15}) save_checkpoint(checkpoint_path(dir.path.string(), s), c);
  EXPECT_EQ(list_checkpoints(dir.path.string()).size(), 3u);
  prune_checkpoints(dir.path.string(), 2);
  const auto left = list_checkpoints(dir.path.string());
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(fs::path(left[0]).filename(), "step-00000010.h5");
  const Checkpoint r = load_checkpoint(left[1]);
  EXPECT_TRUE(torch::equal(r.params.at("encoder/layers/0/self_attention/P_q"),
                           c.params.at("encoder/layers/0/self_attention/P_q")));
  EXPECT_EQ(r.stream.example, 4);
  EXPECT_EQ(r.config, "a: 1\n");
  EXPECT_TRUE(torch::equal(r.rng, c.rng));
  fs::resize_file(left[1], fs::file_size(left[1]) / 3);
  try {
    load_checkpoint(left[1]);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(left[1] + ": ", 0), 0u) << e.what();
  }
}

TEST(Pretrain, RunDirectoryStepProbeAndProtection) {
  TempDir dir;
  const PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 10);
  const std::string run = dir.file("run");
  const PretrainResult r = run_pretrain(c, run, false);
  EXPECT_EQ(r.step, 10);
  EXPECT_GT(r.ln_ppl, 0);
  EXPECT_TRUE(fs::exists(run + "/config.yaml"));
  EXPECT_TRUE(fs::exists(run + "/train.log"));
  EXPECT_EQ(list_checkpoints(run + "/checkpoints").size(), 2u);  // keep: 2
  std::ifstream m(run + "/metrics.jsonl");
  int lines = 0, evals = 0;
  for (std::string l; std::getline(m, l); ++lines) evals += l.find("ln_ppl") != std::string::npos;
  EXPECT_EQ(lines, 4);  // steps 5 and 10, each logged and evaluated
  EXPECT_EQ(evals, 2);
  // Without --resume, an existing run is never overwritten.
  EXPECT_THROW(run_pretrain(c, run, false), InputError);
  // step-probe: the documented layout, and params_after = the optimizer applied to grads.
  const std::string probe = dir.file("probe.h5");
  run_step_probe(c, probe);
  H5Reader h(probe);
  EXPECT_EQ(h.read("/batch/inputs").scalar_type(), torch::kInt32);
  EXPECT_EQ(h.read("/batch/inputs").sizes().vec(), (std::vector<int64_t>{8, 32}));
  const std::string q = "encoder/layers/0/self_attention/P_q";
  EXPECT_EQ(h.read("/params_before/" + q).sizes().vec(), (std::vector<int64_t>{32, 8, 4}));
  EXPECT_TRUE(h.has("/grads/" + q));
  EXPECT_FALSE(torch::equal(h.read("/params_before/" + q), h.read("/params_after/" + q)));
  EXPECT_TRUE(h.has("/optimizer/shared/v"));  // [128, 32]: 32 < 128, not factored
  EXPECT_TRUE(h.has("/optimizer/encoder/layers/0/self_attention/P_l/v"));
  EXPECT_GT(h.read_scalar("/loss"), h.read_scalar("/nll"));  // the z-loss is positive
}

TEST(Pretrain, NonFiniteLossStopsAndKeepsTheGoodCheckpoint) {
  TempDir dir;
  PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 10);
  const std::string run = dir.file("run");
  c.train.steps = 5;
  run_pretrain(c, run, false);  // a good checkpoint at step 5
  const std::string good = list_checkpoints(run + "/checkpoints").back();
  const auto before = fs::file_size(good);
  c.train.steps = 10;
  c.optimizer.learning_rate = 1e30;  // diverges at once
  c.optimizer.schedule = "constant";
  try {
    run_pretrain(c, run, true);
    FAIL() << "no error";
  } catch (const RunError& e) {
    EXPECT_TRUE(std::regex_search(std::string(e.what()),
                                  std::regex("^step [0-9]+: the loss is (NaN|\\+inf|-inf); training stopped")))
        << e.what();
  }
  EXPECT_EQ(list_checkpoints(run + "/checkpoints").back(), good);
  EXPECT_EQ(fs::file_size(good), before);
}

TEST(Pretrain, SigtermSavesACheckpointAndResumeContinues) {
  TempDir dir;
  PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 100000);
  c.checkpoint.every = 100000, c.eval.every = 100000;  // only the signal makes a checkpoint
  const std::string run = dir.file("run");
  // A watcher sends SIGTERM once the first progress line is in metrics.jsonl.
  std::thread watcher([&] {
    for (int i = 0; i < 6000; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::error_code ec;
      if (fs::file_size(run + "/metrics.jsonl", ec) > 0 && !ec) break;
    }
    std::raise(SIGTERM);
  });
  const PretrainResult r = run_pretrain(c, run, false);
  watcher.join();
  EXPECT_TRUE(r.interrupted);
  ASSERT_GE(r.step, 5);
  ASSERT_LT(r.step, c.train.steps);
  const auto saved = list_checkpoints(run + "/checkpoints");
  ASSERT_EQ(saved.size(), 1u);
  EXPECT_EQ(saved.back(), checkpoint_path(run + "/checkpoints", r.step));
  EXPECT_EQ(load_checkpoint(saved.back()).step, r.step);
  // --resume picks it up and runs to the (now shorter) end.
  c.train.steps = r.step + 3;
  const PretrainResult r2 = run_pretrain(c, run, true);
  EXPECT_FALSE(r2.interrupted);
  EXPECT_EQ(r2.step, r.step + 3);
}

}  // namespace thx::test
