// thx sweep --ranks-per-run 2: every run is launched under torchrun with two ranks, and ends
// where the same sweep of one process per run ends (ln(PPL) to 1e-4), also with two such runs
// at once (--jobs 2: each has its own rendezvous, where two --standalone launches would share
// port 29400 and collide); a batch the ranks cannot
// share is one line naming the sweep file and the run, exit 2, before anything starts. The ranks'
// logs are in each run's torchrun/ folder, and nothing is left in TMPDIR.
#include <gtest/gtest.h>

#include "distributed/dist_fixtures.h"
#include "experiments/sweep_results.h"
#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

// The ranks' folders of torchrun's logs under `dir` (<run id>_*/attempt_*/<rank>/).
int rank_logs(const std::string& dir) {
  int n = 0;
  if (std::filesystem::is_directory(dir))
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
      if (e.is_directory() && e.path().parent_path().filename().string().rfind("attempt_", 0) == 0) ++n;
  return n;
}

TEST(SweepRanks, EachRunUnderTorchrunEqualsOneProcessPerRun) {
  TempDir dir;
  dir.write("base.yaml", "model: {d_model: 32, d_ff: 64, encoder_layers: 1, decoder_layers: 1}\n"
                         "attention: {variant: talking_heads, h: 4}\n"
                         "data: {prepared: " + prepared_corpus(dir) + ", inputs_length: 32, targets_length: 8}\n"
                         "train: {steps: 15, batch_size: 8, log_every: 5}\n"
                         "checkpoint: {every: 15, keep: 1}\n"
                         "eval: {every: 15, examples: 8, batch_size: 4}\n");
  const std::string sweep = dir.write("sweep.yaml", "sweep: ranks\nbase: base.yaml\ngrid: {attention.h: [2, 4, 8, 16]}\n");
  setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
  const RunResult one = run_thx("--threads 2 --device cpu sweep --config " + sweep + " --out " + dir.file("one"));
  ASSERT_EQ(one.code, 0) << one.out;
  const TempDir tmp;  // the sweep's TMPDIR: torchrun's logs go to each run's torchrun/, not there
  const RunResult two = run_command("TMPDIR=" + tmp.path.string() + " " + THX_BINARY +
                                    " --threads 2 --device cpu sweep --jobs 2 --ranks-per-run 2 --config " + sweep +
                                    " --out " + dir.file("two") + " 2>&1");
  ASSERT_EQ(two.code, 0) << two.out;
  EXPECT_TRUE(std::filesystem::is_empty(tmp.path)) << "torchrun left a folder in TMPDIR";
  EXPECT_NE(two.out.find("2 at a time, 2 ranks of 1 thread each"), std::string::npos) << two.out;
  const auto a = read_results(dir.file("one")), b = read_results(dir.file("two"));
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["name"], b[i]["name"]);
    EXPECT_NEAR(double(a[i]["ln_ppl"]), double(b[i]["ln_ppl"]), 1e-4) << a[i]["name"];
    const std::string run = dir.file("two/" + std::string(b[i]["name"]));
    EXPECT_EQ(load_checkpoint(checkpoint_path(run + "/checkpoints", 15)).world_size, 2);
    EXPECT_EQ(rank_logs(run + "/torchrun"), 2) << run;
  }
  const RunResult three = run_thx("sweep --ranks-per-run 3 --config " + sweep + " --out " + dir.file("three"));
  EXPECT_EQ(three.code, 2) << three.out;
  EXPECT_NE(three.out.find("thx: error: " + sweep + ": run 'h2': --ranks-per-run 3: train.batch_size 8 does not "
                           "divide"), std::string::npos) << three.out;
  EXPECT_FALSE(std::filesystem::exists(dir.file("three")));
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
