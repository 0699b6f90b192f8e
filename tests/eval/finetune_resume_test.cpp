// Fine-tuning on the training loop, as a user meets it: `thx finetune` killed with SIGKILL after
// its first checkpoint and continued with --resume ends bit-identical to an uninterrupted run
// (T5 text to text, and an ALBERT head), with TensorBoard files that show each step once; a
// truncated fine-tuning checkpoint is one line and exit 2; a finished directory is never
// overwritten without --resume.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "common/fs.h"
#include "common/h5.h"
#include "eval/eval_fixtures.h"
#include "eval/scoring.h"
#include "training/checkpoint.h"
#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {
namespace fs = std::filesystem;

// (under finetune.deterministic on a GPU, whose runs the test compares bit for bit: test_util.h)
std::string finetune(const FinetuneFixture& s, const std::string& out) {
  return fmt::format("--threads 1 --log-level warn finetune --config {} --out {}{}", s.config, s.dir.file(out),
                     deterministic_here() ? " --set finetune.deterministic=true" : "");
}

// Start `thx finetune` and SIGKILL it as soon as its first checkpoint exists.
void run_and_kill(const FinetuneFixture& s, const std::string& out) {
  ASSERT_TRUE(kill_thx_when_exists(finetune(s, out), s.dir.file(out + "/" + s.first_checkpoint)));
  ASSERT_FALSE(fs::exists(s.dir.file(out + "/" + s.final_params)));
}

void expect_identical(const FinetuneFixture& s, const std::string& a, const std::string& b) {
  const Checkpoint x = load_checkpoint(s.dir.file(a + "/" + s.final_params));
  const Checkpoint y = load_checkpoint(s.dir.file(b + "/" + s.final_params));
  ASSERT_EQ(x.params.size(), y.params.size());
  for (const auto& [k, v] : x.params) EXPECT_TRUE(torch::equal(v, y.params.at(k))) << k;
  // The best-of-run record (every evaluation, the best) and the predictions are the same too.
  EXPECT_EQ(read_file(s.dir.file(a + "/sst2.json")), read_file(s.dir.file(b + "/sst2.json")));
  EXPECT_EQ(read_file(s.dir.file(a + "/SST-2.tsv")), read_file(s.dir.file(b + "/SST-2.tsv")));
}

// Each run's tb/, read as TensorBoard reads a folder (tests/scripts/tb_check.py), shows each step
// once with metrics.jsonl's values. So does the straight run resumed from its step-30 checkpoint
// once its step-40 one and its parameters are gone: it records step 40 again, and its SessionLog START and the
// history hide the first run's step 40 (training/tensorboard.h). The result is the same.
void expect_events_as_metrics(const FinetuneFixture& s) {
  if (std::system("/usr/bin/python3 -c 'import google.protobuf, crc32c, numpy' 2>/dev/null") != 0)
    GTEST_SKIP() << "/usr/bin/python3 lacks protobuf or crc32c (scripts/setup.sh installs them)";
  const auto check = [&](const std::string& run) {
    return run_command(fmt::format("/usr/bin/python3 {}/tests/scripts/tb_check.py {} 2>&1", THX_SOURCE_DIR,
                                   s.dir.file(run)));
  };
  for (const char* run : {"straight", "killed"}) {
    const RunResult r = check(run);
    EXPECT_EQ(r.code, 0) << run << ": " << r.out;
  }
  std::string last = s.first_checkpoint;
  last.replace(last.find("00000010"), 8, "00000040");
  ASSERT_TRUE(fs::remove(s.dir.file("straight/" + last))) << last;  // as if killed after step 40's records
  ASSERT_TRUE(fs::remove(s.dir.file("straight/" + s.final_params)));
  const auto resumed = run_thx(finetune(s, "straight") + " --resume");
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  const RunResult r = check("straight");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("1 restart(s)"), std::string::npos) << r.out;
  expect_identical(s, "straight", "killed");
}

void kill_and_resume(bool albert) {
  FinetuneFixture s;
  make_finetune_fixture(s, albert);
  const auto straight = run_thx(finetune(s, "straight"));
  ASSERT_EQ(straight.code, 0) << straight.out;
  const nlohmann::json done = nlohmann::json::parse(read_file(s.dir.file("straight/sst2.json")));
  EXPECT_EQ(done.value("steps", -1), 40);
  EXPECT_EQ(done.value("finished", false), true);
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
  expect_events_as_metrics(s);
}

// <task>.json says "finished" only once the run's last step is evaluated, so that a table read
// while a fine-tuning runs never takes its best-so-far for the result (sweep_results.cpp).
TEST(FinetuneResume, AResultIsFinishedOnlyAtTheLastStep) {
  TaskRecord r;
  r.task = "sst2", r.steps = 40;
  EXPECT_EQ(to_json(r)["finished"], false);  // nothing evaluated yet
  r.history.push_back({{"step", 20}});
  EXPECT_EQ(to_json(r)["finished"], false);
  r.history.push_back({{"step", 40}});
  EXPECT_EQ(to_json(r)["finished"], true);
  EXPECT_EQ(task_record_from_json(to_json(r)).steps, 40);
  r.steps = 0, r.history = nlohmann::json::array();  // `thx eval` of one checkpoint
  r.history.push_back({{"step", 7}});
  EXPECT_EQ(to_json(r)["finished"], true);
}

// An ALBERT fine-tuning of two tasks, as if killed in its second after step 40's records: the
// first task is done and skipped, the second resumes from step 30. Its SessionLog START drops
// every tag of the earlier file from TensorBoard's view, the first task's too, and its history
// brings both back, so that tb/ shows each task's steps once (tb_check.py).
TEST(FinetuneResume, AnAlbertRunResumedInItsSecondTaskShowsEachStepOnce) {
  if (std::system("/usr/bin/python3 -c 'import google.protobuf, crc32c, numpy' 2>/dev/null") != 0)
    GTEST_SKIP() << "/usr/bin/python3 lacks protobuf or crc32c (scripts/setup.sh installs them)";
  FinetuneFixture s;
  make_finetune_fixture(s, true);
  fs::create_directories(s.dir.file("data/glue/CoLA"));  // CoLA: no header; source, label, -, sentence
  for (const char* split : {"train", "dev"}) {
    std::istringstream sst2(read_file(s.dir.file(fmt::format("data/glue/SST-2/{}.tsv", split))));
    std::string line, cola;
    std::getline(sst2, line);  // (its header)
    while (std::getline(sst2, line))
      cola += "x\t" + line.substr(line.find('\t') + 1) + "\t\t" + line.substr(0, line.find('\t')) + "\n";
    std::ofstream(s.dir.file(fmt::format("data/glue/CoLA/{}.tsv", split))) << cola;
  }
  const std::string both = finetune(s, "run") + " --set 'finetune.tasks=[sst2, cola]'";
  const auto straight = run_thx(both);
  ASSERT_EQ(straight.code, 0) << straight.out;
  ASSERT_TRUE(fs::remove(s.dir.file("run/checkpoints/cola/step-00000040.h5")));
  ASSERT_TRUE(fs::remove(s.dir.file("run/cola.h5")));
  const auto resumed = run_thx(both + " --resume");
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  const std::string check = fmt::format("{}/tests/scripts/tb_check.py {}", THX_SOURCE_DIR, s.dir.file("run"));
  const RunResult r = run_command("/usr/bin/python3 " + check + " 2>&1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("2 event file(s), 1 restart(s), 80 scalars"), std::string::npos) << r.out;
}

TEST(FinetuneResume, T5KilledAfterItsFirstCheckpointEndsBitIdentical) { kill_and_resume(false); }

TEST(FinetuneResume, AlbertKilledAfterItsFirstCheckpointEndsBitIdentical) { kill_and_resume(true); }

TEST(FinetuneResume, ATruncatedCheckpointIsOneLineAndExit2) {
  FinetuneFixture s;
  make_finetune_fixture(s, false);
  run_and_kill(s, "run");
  const std::string newest = list_checkpoints(s.dir.file("run/checkpoints")).back();
  fs::resize_file(newest, fs::file_size(newest) / 2);
  const auto r = run_thx(finetune(s, "run") + " --resume");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find(newest), std::string::npos) << r.out;
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
