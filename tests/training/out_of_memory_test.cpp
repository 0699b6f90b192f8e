// A device out of memory (c10::OutOfMemoryError, what LibTorch's CUDA allocator throws) in a
// training step or an evaluation: one line (InputError, exit 2) naming the step and the
// micro-batch, and what to change; the checkpoints already written stay as they were and the
// newest one resumes. A stand-in trainee throws the error where a GPU would. The same for an op
// without a deterministic implementation under train.deterministic (common/determinism.h).
#include <gtest/gtest.h>

#include <filesystem>

#include <torch/version.h>

#include "common/determinism.h"
#include "test_util.h"
#include "training/checkpoint.h"
#include "training/linear_trainee.h"
#include "training/loop.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

// An optimizer that runs put_ (no deterministic implementation in ATen) at its `at`th step.
class PutOptimizer : public Optimizer {
 public:
  explicit PutOptimizer(int64_t at) : at_(at) {}
  void step(double) override {
    if (++step_ == at_)
      torch::zeros({3}).put_(torch::tensor({int64_t{1}, int64_t{1}}), torch::tensor({1.0f, 2.0f}), false);
  }
  std::map<std::string, torch::Tensor> state() const override { return {}; }
  void load_state(const std::map<std::string, torch::Tensor>&, int64_t step) override { step_ = step; }

 private:
  int64_t at_;
};

class OutOfMemoryTrainee : public LinearTrainee {
 public:
  // put: at fail_at_forward, run put_ (no deterministic implementation in ATen) instead; blas: throw
  // ATen's refusal of a product over cuBLAS's 32-bit sizes instead (its words on the fifth GPU
  // session's H200).
  explicit OutOfMemoryTrainee(int64_t fail_at_forward, int64_t fail_at_eval, bool put = false, bool blas = false)
      : fail_forward_(fail_at_forward), fail_eval_(fail_at_eval), put_(put), blas_(blas) {}
  Optimizer& optimizer() override { return update_ ? *update_ : *opt_; }
  std::unique_ptr<Optimizer> update_;  // in place of Adafactor, where a test sets it
  MicroLoss forward(const Batch& b) override {
    if (++forwards_ == fail_forward_ && put_) {
      torch::zeros({3}).put_(torch::tensor({int64_t{1}, int64_t{1}}), torch::tensor({1.0f, 2.0f}), false);
    } else if (forwards_ == fail_forward_ && blas_) {
      TORCH_CHECK(false, "at::cuda::blas::gemm<float> argument n must be non-negative and less than 2147483647 but "
                  "got 2939944960");
    } else if (forwards_ == fail_forward_) {
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate 20.00 GiB");
    }
    return LinearTrainee::forward(b);
  }
  nlohmann::json evaluate(int64_t step) override {
    if (++evals_ == fail_eval_) TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate 9 GiB");
    return LinearTrainee::evaluate(step);
  }

 private:
  int64_t fail_forward_, fail_eval_, forwards_ = 0, evals_ = 0;
  bool put_ = false, blas_ = false;
};

LoopOptions options(const TempDir& dir) {
  LoopOptions o;
  o.steps = 4, o.grad_accum = 2, o.batch_size = 8, o.log_every = 1, o.eval_every = 2, o.checkpoint_every = 2;
  o.checkpoint_dir = dir.file("checkpoints"), o.metrics_file = dir.file("metrics.jsonl");
  o.schedule.schedule = "constant", o.schedule.learning_rate = 0.01;
  return o;
}

TEST(OutOfMemory, ATrainingStepIsOneLineAndKeepsTheLastCheckpoint) {
  TempDir dir;
  const LoopOptions o = options(dir);
  OutOfMemoryTrainee t(/*fail_at_forward=*/5, /*fail_at_eval=*/-1);  // step 3's first micro-batch
  const std::string e = error_of([&] { train(t, o); });
  EXPECT_EQ(e, "step 3: out of memory in training with micro-batches of 4 examples (batch 8 / grad_accum 2) "
               "(CUDA out of memory. Tried to allocate 20.00 GiB); raise train.grad_accum (smaller micro-batches, "
               "the same batch) or lower train.batch_size; the checkpoints in " + o.checkpoint_dir +
               " are as they were");
  EXPECT_EQ(list_checkpoints(o.checkpoint_dir), std::vector<std::string>{checkpoint_path(o.checkpoint_dir, 2)});
  const Checkpoint ck = load_checkpoint(checkpoint_path(o.checkpoint_dir, 2));
  EXPECT_EQ(ck.step, 2);
  // And the run resumes from it (here without the error): steps 3 and 4.
  OutOfMemoryTrainee again(-1, -1);
  LoopOptions r = o;
  r.resume = true;
  EXPECT_EQ(train(again, r).step, 4);
}

// A product over cuBLAS's 32-bit sizes (a micro-batch a large GPU's memory would still hold): the
// same one line as running out of memory, with ATen's words. (Another c10::Error passes through:
// the next test's run without the key.)
TEST(OutOfMemory, AProductOverCublasSizesIsOneLineAndKeepsTheLastCheckpoint) {
  TempDir dir;
  const LoopOptions o = options(dir);
  OutOfMemoryTrainee t(/*fail_at_forward=*/5, -1, false, /*blas=*/true);  // step 3's first micro-batch
  EXPECT_EQ(error_of([&] { train(t, o); }),
            "step 3: a product too large for cuBLAS's 32-bit sizes in training with micro-batches of 4 examples "
            "(batch 8 / grad_accum 2) (at::cuda::blas::gemm<float> argument n must be non-negative and less than "
            "2147483647 but got 2939944960); raise train.grad_accum (smaller micro-batches, the same batch) or lower "
            "train.batch_size; the checkpoints in " + o.checkpoint_dir + " are as they were");
  EXPECT_EQ(list_checkpoints(o.checkpoint_dir), std::vector<std::string>{checkpoint_path(o.checkpoint_dir, 2)});
}

TEST(OutOfMemory, AnEvaluationNamesItsOwnBatchKey) {
  TempDir dir;
  LoopOptions o = options(dir);
  o.eval_memory_hint = "lower finetune.eval_batch_size";
  OutOfMemoryTrainee t(-1, /*fail_at_eval=*/1);  // the evaluation after step 2
  EXPECT_EQ(error_of([&] { train(t, o); }),
            "step 2: out of memory in evaluation (CUDA out of memory. Tried to allocate 9 GiB); lower "
            "finetune.eval_batch_size; the checkpoints in " + o.checkpoint_dir + " are as they were");
  EXPECT_TRUE(list_checkpoints(o.checkpoint_dir).empty());  // the step-2 checkpoint comes after its evaluation
}

// Under train.deterministic, an op ATen refuses is one line naming it and the key, the checkpoints
// kept; without the key (deterministic algorithms on, but not by a run's config) ATen's own error
// passes through.
TEST(OutOfMemory, AnOpWithoutADeterministicImplementationIsOneLine) {
  TempDir dir;
  LoopOptions o = options(dir);
  o.deterministic_key = "train.deterministic";
  const DeterminismScope on(true, torch::Device(torch::kCPU), o.deterministic_key);
  OutOfMemoryTrainee t(/*fail_at_forward=*/5, /*fail_at_eval=*/-1, /*put=*/true);  // step 3
  EXPECT_EQ(error_of([&] { train(t, o); }),
            std::string("step 3: in training: train.deterministic: true, but put_ has no deterministic implementation "
                        "in this LibTorch (") + TORCH_VERSION + "); set train.deterministic: false to train with it; "
                        "the checkpoints in " + o.checkpoint_dir + " are as they were");
  EXPECT_EQ(list_checkpoints(o.checkpoint_dir), std::vector<std::string>{checkpoint_path(o.checkpoint_dir, 2)});
  TempDir other;
  LoopOptions plain = options(other);
  OutOfMemoryTrainee u(5, -1, true);
  EXPECT_THROW(train(u, plain), c10::Error);
  // The same in the optimizer's update, after the step's gradients (step 3's, the third update).
  TempDir third;
  o.checkpoint_dir = third.file("checkpoints"), o.metrics_file = third.file("metrics.jsonl");
  OutOfMemoryTrainee w(-1, -1);
  w.update_ = std::make_unique<PutOptimizer>(3);
  EXPECT_EQ(error_of([&] { train(w, o); }),
            std::string("step 3: in the update: train.deterministic: true, but put_ has no deterministic "
                        "implementation in this LibTorch (") + TORCH_VERSION + "); set train.deterministic: false to "
                        "train with it; the checkpoints in " + o.checkpoint_dir + " are as they were");
  EXPECT_EQ(list_checkpoints(o.checkpoint_dir), std::vector<std::string>{checkpoint_path(o.checkpoint_dir, 2)});
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
