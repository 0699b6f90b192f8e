// The training loop's own duties, through pretraining (the fine-tuning ones are in
// tests/eval/finetune_resume_test.cpp): TensorBoard files read back by an independent reader,
// after a resume too, a tb/ that cannot be written, and --resume with a different config.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "cli/forked_cli.h"
#include "common/error.h"
#include "common/fs.h"
#include "training/checkpoint.h"
#include "training/run_dir.h"
#include "training/tensorboard.h"
#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {
namespace fs = std::filesystem;

bool python_has(const char* modules) {
  return std::system(fmt::format("/usr/bin/python3 -c 'import {}' 2>/dev/null", modules).c_str()) == 0;
}

// The published check value of CRC-32C (Castagnoli): crc("123456789") = 0xE3069283; the mask
// is TFRecord's rotate-by-15 plus 0xa282ead8.
TEST(TensorBoard, MaskedCrc32cOfTheCheckString) {
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
  EXPECT_NE(masked_crc32c("123456780", 9), masked_crc32c("123456789", 9));
}

// A run's tb/ holds what metrics.jsonl holds, framed and encoded as TensorBoard reads it:
// checked by tests/scripts/tb_check.py (Google's protobuf runtime with the messages declared
// from their published field numbers, and python3-crc32c), which shares no code with thx.
TEST(TensorBoard, EventFilesAgreeWithMetricsUnderAnIndependentReader) {
  if (!python_has("google.protobuf, crc32c, numpy")) GTEST_SKIP() << "/usr/bin/python3 lacks protobuf or crc32c (scripts/setup.sh installs them)";
  TempDir dir;
  PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 10);
  c.train.log_every = 2;
  const std::string run = dir.file("run");
  run_pretrain(c, run, false);
  const std::string check = fmt::format("/usr/bin/python3 {}/tests/scripts/tb_check.py {}", THX_SOURCE_DIR, run);
  EXPECT_EQ(std::system(check.c_str()), 0) << check;
  // The reader is not a rubber stamp: one flipped byte in the file is a CRC error.
  const auto events = fs::directory_iterator(run + "/tb")->path().string();
  std::fstream f(events, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(60);
  f.put('\x7f');
  f.close();
  EXPECT_NE(std::system((check + " 2>/dev/null").c_str()), 0);
}

// A killed run's event files hold steps past the checkpoint it resumes from, and the resumed run
// writes those steps again into a new file. Read as TensorBoard reads a folder (tb_check.py:
// its restart rule), the folder shows each step once, with metrics.jsonl's values: the resumed
// run wrote a SessionLog START and the history (tensorboard.h), after the START that the folder's
// first file begins with, however the run began. Before, steps 6 to 10 had two
// values each (the killed run's throughput and the resumed run's). A finished run resumed
// again evaluates and records nothing more (it used to record its last evaluation twice), and
// brings back a deleted tb/.
TEST(TensorBoard, AResumedRunShowsEachStepOnce) {
  if (!python_has("google.protobuf, crc32c, numpy"))
    GTEST_SKIP() << "/usr/bin/python3 lacks protobuf or crc32c (scripts/setup.sh installs them)";
  TempDir dir;
  PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 10);
  c.train.log_every = 2, c.eval.every = 4, c.checkpoint.every = 4, c.checkpoint.keep = 5;
  const std::string run = dir.file("run");
  const std::string check = fmt::format("/usr/bin/python3 {}/tests/scripts/tb_check.py {}", THX_SOURCE_DIR, run);
  run_pretrain(c, run, true);  // begun with --resume, as a sweep begins its runs
  const std::string straight = read_file(run + "/metrics.jsonl");
  for (const int64_t step : {8, 10}) fs::remove(checkpoint_path(run + "/checkpoints", step));  // killed at 10
  const PretrainResult resumed = run_pretrain(c, run, true);
  const RunResult read = run_command(check + " 2>&1");
  EXPECT_EQ(read.code, 0) << read.out;
  EXPECT_NE(read.out.find("2 event file(s), 1 restart(s)"), std::string::npos) << read.out;
  const std::string metrics = read_file(run + "/metrics.jsonl");
  EXPECT_EQ(lines(metrics), lines(straight)) << metrics;  // steps 6 to 10 once, as in the straight run
  EXPECT_EQ(resumed.ln_ppl, run_pretrain(c, run, true).ln_ppl);  // finished: evaluated, not recorded
  EXPECT_EQ(read_file(run + "/metrics.jsonl"), metrics);
  const RunResult again = run_command(check + " 2>&1");
  EXPECT_EQ(again.code, 0) << again.out;
  EXPECT_NE(again.out.find("3 event file(s), 2 restart(s)"), std::string::npos) << again.out;  // (every resume)
  // Every resume writes the history, so a run killed during one, or whose tb/ was deleted,
  // shows it whole after the next.
  fs::remove_all(run + "/tb");
  run_pretrain(c, run, true);
  const RunResult rebuilt = run_command(check + " 2>&1");
  EXPECT_EQ(rebuilt.code, 0) << rebuilt.out;
  EXPECT_NE(rebuilt.out.find("1 event file(s), 1 restart(s)"), std::string::npos) << rebuilt.out;
}

TEST(TensorBoard, AnUnwritableTbDirectoryStopsBeforeTraining) {
  TempDir dir;
  const PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 10);
  const std::string run = dir.file("run");
  fs::create_directories(run);
  std::ofstream(run + "/tb") << "a file where the directory should be";
  try {
    run_pretrain(c, run, false);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(run + "/tb: cannot write TensorBoard events"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(run + "/config.yaml"));
  EXPECT_FALSE(fs::exists(run + "/checkpoints"));
}

TEST(RunDirectory, ConfigDifferencesNameEveryKey) {
  const auto d = config_differences("a:\n  b: 1\n  c: [x, y]\nd: 2\n", "a:\n  b: 1\n  c: [x]\ne: 3\n");
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d.at("a.c"), (std::pair<std::string, std::string>{"[x, y]", "[x]"}));
  EXPECT_EQ(d.at("d"), (std::pair<std::string, std::string>{"2", ""}));
  EXPECT_EQ(d.at("e"), (std::pair<std::string, std::string>{"", "3"}));
}

// `thx pretrain --resume` with a changed config: one line naming the keys, exit 2, the run's
// config.yaml untouched; the same change allowed by --allow-config-change goes through and is
// recorded.
TEST(RunDirectory, ResumeWithAChangedConfigIsRefusedUnlessAllowed) {
  TempDir dir;
  const std::string prep = prepared_corpus(dir);
  const std::string cfg = dir.write("run.yaml", to_yaml(tiny_pretrain(prep, 5)));
  const std::string run = dir.file("run");
  const std::string base = fmt::format("--log-level warn pretrain --config {} --run-dir {}", cfg, run);
  ASSERT_EQ(fork_thx(base).code, 0);
  const std::string stored = read_file(run + "/config.yaml");
  const auto changed = fork_thx(base + " --resume --set model.d_ff=128 --set train.steps=8");
  EXPECT_EQ(changed.code, 2) << changed.out;
  EXPECT_EQ(lines(changed.out), 1) << changed.out;
  EXPECT_NE(changed.out.find("model.d_ff (64 -> 128)"), std::string::npos) << changed.out;
  EXPECT_NE(changed.out.find("train.steps (5 -> 8)"), std::string::npos) << changed.out;
  EXPECT_EQ(read_file(run + "/config.yaml"), stored);
  EXPECT_EQ(list_checkpoints(run + "/checkpoints").back(), checkpoint_path(run + "/checkpoints", 5));
  // Allowed: the run goes on to step 8 and the change is on record.
  const auto allowed = fork_thx(base + " --resume --set train.steps=8 --allow-config-change train.steps");
  ASSERT_EQ(allowed.code, 0) << allowed.out;
  EXPECT_EQ(list_checkpoints(run + "/checkpoints").back(), checkpoint_path(run + "/checkpoints", 8));
  const std::string record = read_file(run + "/config_changes.jsonl");
  EXPECT_NE(record.find("\"train.steps\":{\"from\":\"5\",\"to\":\"8\"}"), std::string::npos) << record;
  EXPECT_NE(read_file(run + "/config.yaml").find("steps: 8"), std::string::npos);
  // Resuming with the same config again needs no flag.
  EXPECT_EQ(fork_thx(base + " --resume --set train.steps=8").code, 0);
  // The flag is for resuming, and names keys that exist: each mistake is one line, exit 2.
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {" --set train.steps=8 --allow-config-change train.steps", "only with --resume"},
           {" --resume --set train.steps=9 --allow-config-change trian.steps", "trian.steps: not a key or block"}}) {
    const auto r = fork_thx(base + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_EQ(lines(r.out), 1) << r.out;
    EXPECT_NE(r.out.find(says), std::string::npos) << r.out;
  }
  EXPECT_EQ(list_checkpoints(run + "/checkpoints").back(), checkpoint_path(run + "/checkpoints", 8));
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
