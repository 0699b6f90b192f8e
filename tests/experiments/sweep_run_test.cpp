// thx sweep end to end on three tiny runs: results, skipping finished runs, and a sweep
// killed (SIGKILL) mid-way and restarted giving exactly the results of one never stopped.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/fs.h"
#include "experiments/sweep.h"
#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

std::string tiny_sweep(const TempDir& dir) {
  const std::string prepared = prepared_corpus(dir);
  dir.write("base.yaml",
            "model: {d_model: 32, d_ff: 64, encoder_layers: 1, decoder_layers: 1}\n"
            "attention: {variant: talking_heads, h: 4}\n"
            "data: {prepared: " + prepared + ", inputs_length: 32, targets_length: 8}\n"
            "train: {steps: 40, batch_size: 8, log_every: 5}\n"
            "checkpoint: {every: 10, keep: 2}\n"
            "eval: {every: 20, examples: 8, batch_size: 8}\n");
  return dir.write("sweep.yaml", "sweep: tiny\ntable: table1\nbase: base.yaml\n"
                                 "grid: {attention.h: [2, 4, 8]}\n");
}

std::map<std::string, double> ln_ppl(const std::string& out) {
  std::map<std::string, double> m;
  for (const auto& r : read_results(out)) m[r["name"]] = r["ln_ppl"];
  return m;
}

TEST(SweepRun, KilledMidwayAndRestartedEqualsUninterrupted) {
  TempDir dir;
  const std::string sweep = tiny_sweep(dir);
  const std::string straight = dir.file("straight"), killed = dir.file("killed");
  RunResult r = run_thx("--threads 1 sweep --config " + sweep + " --out " + straight);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto want = ln_ppl(straight);
  ASSERT_EQ(want.size(), 3u);
  for (const auto& run : read_results(straight)) {
    EXPECT_EQ(run["steps"], 40);
    EXPECT_EQ(run["sweep"], "tiny");
    for (const char* k : {"best_ln_ppl", "step_time_s", "tokens_per_s", "params_per_att_layer",
                          "multiplies_per_att_layer", "wall_s", "config_hash", "attention"})
      EXPECT_TRUE(run.contains(k)) << k;
  }
  // A second invocation finds everything finished and runs nothing.
  r = run_thx("--threads 1 sweep --config " + sweep + " --out " + straight);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("3 finished, 0 to run"), std::string::npos) << r.out;

  // The same sweep, killed with SIGKILL once its second run has checkpointed.
  setenv("OMP_WAIT_POLICY", "PASSIVE", 0), setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    dup2(null, 1), dup2(null, 2);
    execl(THX_BINARY, THX_BINARY, "--threads", "1", "sweep", "--config", sweep.c_str(), "--out",
          killed.c_str(), nullptr);
    _exit(127);
  }
  const fs::path second = fs::path(killed) / "h4" / "checkpoints";
  bool saw = false;
  for (int i = 0; i < 1200 && !saw; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    saw = fs::exists(second) && !fs::is_empty(second);
  }
  ASSERT_TRUE(saw) << "the second run never checkpointed";
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_LT(read_results(killed).size(), 3u);  // it was stopped before the end
  r = run_thx("--threads 1 sweep --config " + sweep + " --out " + killed);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(ln_ppl(killed), want);  // bit for bit
}

TEST(SweepRun, AFailedRunIsReportedAndTheOthersFinish) {
  TempDir dir;
  tiny_sweep(dir);
  // h = 3 does not divide d_model 32: that run fails when its config is read, which the
  // sweep does before it starts anything, naming the sweep file and the run.
  const std::string bad = dir.write("bad.yaml", "sweep: bad\nbase: base.yaml\ngrid: {attention.h: [2, 3]}\n");
  RunResult r = run_thx("--threads 1 sweep --config " + bad + " --out " + dir.file("bad"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("thx: error: " + bad + ": run 'h3': "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("32 / 3 is not a whole number"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir.file("bad")));
  // A run that fails while training (its data deleted under it) does not stop the others.
  const std::string prepared2 = dir.file("prep2");
  fs::copy(dir.file("prep"), prepared2);
  const std::string mixed = dir.write(
      "mixed.yaml", "sweep: mixed\nbase: base.yaml\nvariants:\n"
                    "  - {name: broken, set: {data.prepared: " + prepared2 + "}}\n"
                    "  - {name: fine, set: {}}\n");
  const Sweep s = load_sweep(mixed);
  ASSERT_EQ(s.runs.size(), 2u);
  fs::remove(fs::path(prepared2) / "train-00000.h5");
  r = run_thx("--threads 1 sweep --config " + mixed + " --out " + dir.file("mixed"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("broken failed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 of 2 runs finished"), std::string::npos) << r.out;
  EXPECT_EQ(read_results(dir.file("mixed")).size(), 1u);
}

}  // namespace
}  // namespace thx::test
