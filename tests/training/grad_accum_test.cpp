// An identity of the loop's weighting: one process with grad_accum 2 equals grad_accum 1 on
// the same global batch (only float sums are reordered), within 1e-5 of every parameter after
// 3 steps. For BERT/ALBERT it holds only because the MLM mean (per masked token) and the
// sentence-task mean (per example) are weighted by their own units (MicroLoss::second):
// weighting the sum by masked tokens alone gives a different step.
#include <gtest/gtest.h>

#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

void same_step(bool albert) {
  TempDir dir;
  const std::string prep = albert ? prepared_corpus(dir, 120, TokenizerConvention::albert) : prepared_corpus(dir);
  for (int64_t accum : {1, 2}) {
    PretrainConfig c = albert ? tiny_albert_pretrain(prep, 3) : tiny_pretrain(prep, 3);
    c.train.grad_accum = accum;
    finish(c);
    run_pretrain(c, dir.file("accum" + std::to_string(accum)), false);
  }
  EXPECT_TRUE(same_params(checkpoint_path(dir.file("accum2/checkpoints"), 3),
                          checkpoint_path(dir.file("accum1/checkpoints"), 3), 1e-5));
}

TEST(GradAccum, T5TwoMicroBatchesEqualOne) { same_step(false); }
TEST(GradAccum, AlbertTwoMicroBatchesEqualOne) { same_step(true); }

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
