// A schedule that is not what the config seems to say gets one warning line at the start: a
// warmup longer than the run (here polynomial, 80 warmup steps, 5 steps: the rate peaks at 5/80
// of optimizer.learning_rate and never decays), and a resumed run whose steps changed (the rate
// at the next step is not the one the old schedule had reached). A run without either says
// nothing of its schedule.
#include <gtest/gtest.h>

#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

TEST(ScheduleWarning, AWarmupLongerThanTheRunAndAChangedLengthAreSaid) {
  TempDir dir;
  PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 5);
  c.optimizer.schedule = "polynomial", c.optimizer.learning_rate = 0.005, c.optimizer.warmup_steps = 80;
  c.eval.every = 5;
  finish(c);
  const std::string cfg = dir.write("run.yaml", c.yaml);
  const std::string run = "--threads 1 pretrain --config " + cfg + " --run-dir " + dir.file("run");
  const RunResult short_run = run_thx(run);
  ASSERT_EQ(short_run.code, 0) << short_run.out;
  // 0.005 * 5 / 80 = 0.0003125
  EXPECT_NE(short_run.out.find("optimizer.warmup_steps 80 is more than train.steps 5: the learning rate rises for the "
                               "whole run and peaks at 0.000313 at its last step (not optimizer.learning_rate 0.005), "
                               "and never decays"), std::string::npos) << short_run.out;

  // Extended to 100 steps: the warmup (80) now fits, and the rate at step 6 is 0.005 * 6 / 80
  // where the old schedule had reached 0.005 * 5 / 80 at step 5.
  const std::string longer_run = run + " --resume --set train.steps=100 --allow-config-change train.steps";
  const RunResult longer = run_thx(longer_run);
  ASSERT_EQ(longer.code, 0) << longer.out;
  EXPECT_NE(longer.out.find("train.steps changed from 5 to 100 at step 5: the learning rate goes from 0.000313 (step "
                            "5, as scheduled over 5) to 0.000375 (step 6, over 100)"), std::string::npos) << longer.out;
  EXPECT_EQ(longer.out.find("is more than train.steps"), std::string::npos) << longer.out;
  const RunResult again = run_thx(longer_run);
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_EQ(again.out.find("changed from"), std::string::npos) << "a finished run, resumed: " << again.out;
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
