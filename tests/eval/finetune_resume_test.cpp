// Fine-tuning on the training loop, as a user meets it: `thx finetune` killed with SIGKILL after
// its first checkpoint and continued with --resume ends bit-identical to an uninterrupted run
// (T5 text to text, and an ALBERT head); a truncated fine-tuning checkpoint is one line and
// exit 2; a finished directory is never overwritten without --resume.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "common/fs.h"
#include "common/h5.h"
#include "eval/eval_fixtures.h"
#include "training/checkpoint.h"
#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace fs = std::filesystem;

// A pretrained tiny model (5 steps), a tiny SST-2, and a fine-tuning config that evaluates and
// checkpoints every 10 of 40 steps: the first checkpoint already holds an evaluation, so a
// resumed run must carry the restored record of it into sst2.json.
struct Fixture {
  TempDir dir;
  std::string config, final_params, first_checkpoint;
};

void make(Fixture& s, bool albert) {
  const auto convention = albert ? TokenizerConvention::albert : TokenizerConvention::t5;
  const std::string prep = prepared_corpus(s.dir, 120, convention);
  PretrainConfig pc = albert ? tiny_albert_pretrain(prep, 5) : tiny_pretrain(prep, 5);
  pc.yaml = to_yaml(pc);
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

std::string finetune(const Fixture& s, const std::string& out) {
  return fmt::format("--threads 1 --log-level warn finetune --config {} --out {}", s.config, s.dir.file(out));
}

// Start `thx finetune` and SIGKILL it as soon as its first checkpoint exists.
void run_and_kill(const Fixture& s, const std::string& out) {
  const std::string cmd = std::string("exec ") + THX_BINARY + " " + finetune(s, out) + " >/dev/null 2>&1";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const std::string first = s.dir.file(out + "/" + s.first_checkpoint);
  for (int i = 0; i < 12000 && !fs::exists(first); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(fs::exists(first)) << "no first checkpoint within a minute";
  ASSERT_TRUE(WIFSIGNALED(status)) << "the run ended before it was killed; make it longer";
  ASSERT_FALSE(fs::exists(s.dir.file(out + "/" + s.final_params)));
}

void expect_identical(const Fixture& s, const std::string& a, const std::string& b) {
  const Checkpoint x = load_checkpoint(s.dir.file(a + "/" + s.final_params));
  const Checkpoint y = load_checkpoint(s.dir.file(b + "/" + s.final_params));
  ASSERT_EQ(x.params.size(), y.params.size());
  for (const auto& [k, v] : x.params) EXPECT_TRUE(torch::equal(v, y.params.at(k))) << k;
  // The best-of-run record (every evaluation, the best) and the predictions are the same too.
  EXPECT_EQ(read_file(s.dir.file(a + "/sst2.json")), read_file(s.dir.file(b + "/sst2.json")));
  EXPECT_EQ(read_file(s.dir.file(a + "/SST-2.tsv")), read_file(s.dir.file(b + "/SST-2.tsv")));
}

void kill_and_resume(bool albert) {
  Fixture s;
  make(s, albert);
  const auto straight = run_thx(finetune(s, "straight"));
  ASSERT_EQ(straight.code, 0) << straight.out;
  run_and_kill(s, "killed");
  // Without --resume the killed run's directory is refused, and nothing in it changes.
  const auto again = run_thx(finetune(s, "killed"));
  EXPECT_EQ(again.code, 2) << again.out;
  EXPECT_NE(again.out.find("pass --resume"), std::string::npos) << again.out;
  // --resume with a changed config: one line naming the key, exit 2, finetune.yaml untouched.
  const std::string stored = read_file(s.dir.file("killed/finetune.yaml"));
  const auto changed = run_thx(finetune(s, "killed") + " --resume --set finetune.steps=60");
  EXPECT_EQ(changed.code, 2) << changed.out;
  EXPECT_EQ(lines(changed.out), 1) << changed.out;
  EXPECT_NE(changed.out.find("finetune.steps (40 -> 60)"), std::string::npos) << changed.out;
  EXPECT_EQ(read_file(s.dir.file("killed/finetune.yaml")), stored);
  const auto resumed = run_thx(finetune(s, "killed") + " --resume");
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  expect_identical(s, "straight", "killed");
  // A resumed run whose work is done does nothing more, and says so by exiting 0.
  EXPECT_EQ(run_thx(finetune(s, "killed") + " --resume").code, 0);
}

TEST(FinetuneResume, T5KilledAfterItsFirstCheckpointEndsBitIdentical) { kill_and_resume(false); }

TEST(FinetuneResume, AlbertKilledAfterItsFirstCheckpointEndsBitIdentical) { kill_and_resume(true); }

TEST(FinetuneResume, ATruncatedCheckpointIsOneLineAndExit2) {
  Fixture s;
  make(s, false);
  run_and_kill(s, "run");
  const std::string newest = list_checkpoints(s.dir.file("run/checkpoints")).back();
  fs::resize_file(newest, fs::file_size(newest) / 2);
  const auto r = run_thx(finetune(s, "run") + " --resume");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find(newest), std::string::npos) << r.out;
}

}  // namespace
}  // namespace thx::test
