// Findings of the outside fault campaign (issue 16), each as a user met it: one line, exit 2,
// nothing written or changed; and a resumed run clears the checkpoint temporaries a killed
// process left.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "cli/forked_cli.h"
#include "training/checkpoint.h"
#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {
namespace fs = std::filesystem;

TEST(BadInput, ADirectoryIsNotAConfig) {
  TempDir dir;
  const RunResult r = fork_thx("pretrain --config " + dir.path.string() + " --run-dir " + dir.file("run"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "thx: error: " + dir.path.string() + ": is a directory, not a config file (--config takes a "
                   "YAML file)\n");
  EXPECT_FALSE(fs::exists(dir.file("run")));
}

TEST(BadInput, FlagErrorsAreOneLineInTheHouseFormat) {
  RunResult r = fork_thx("--threads -1 costs");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "thx: error: --threads: -1 is invalid: must be >= 0 (thx --help lists the options)\n");
  // A count that must be positive, a word and a fraction where a whole number goes, and a range:
  // CLI11 said "Value 0 not in range 0 to max" of the first two, "Could not convert: --n = 1.5".
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {"costs --n 0", "--n: 0 is invalid: must be > 0"},
           {"costs --n abc", "--n: abc is invalid: must be a number > 0"},
           {"costs --n 1.5", "--n: 1.5 is invalid: must be a whole number"},
           {"costs --n=", "--n: a value is required (INT:POSITIVE)"},
           {"--threads 2.5 costs", "--threads: 2.5 is invalid: must be a whole number"},
           {"spm-train --character-coverage 2 --input x --out y",  // CLI::Range: "Value 2 not in range 0.500000 to 1"
            "--character-coverage: 2 is invalid: must be in [0.5, 1]"}}) {
    r = fork_thx(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.out;
    EXPECT_EQ(r.out, "thx: error: " + want + " (thx --help lists the options)\n") << args;
  }
  r = fork_thx("costs --bogus");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "thx: error: The following argument was not expected: --bogus (thx --help lists the options)\n");
}

// THX_KERNELS names a build of the CPU kernels (kernels.h); one this CPU cannot run, or a typo,
// used to fall back to the best build without a word.
TEST(BadInput, AKernelBuildThisCpuCannotRunIsOneLine) {
  TempDir dir;
  const std::string want = "thx: error: THX_KERNELS=avx-512: not a build of thx's CPU kernels that this CPU runs; "
                           "allowed here: generic";
  RunResult r = run_command("THX_KERNELS=avx-512 " + std::string(THX_BINARY) + " pretrain --config " THX_SOURCE_DIR
                            "/configs/t5/mini.yaml --run-dir " + dir.file("run") + " 2>&1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out.rfind(want, 0), 0u) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_FALSE(fs::exists(dir.file("run")));
  EXPECT_EQ(run_command("THX_KERNELS=generic " + std::string(THX_BINARY) + " costs >/dev/null 2>&1").code, 0);
}

// THX_BF16_CORE chooses the CPU's bf16 attention core (attention/fused.h): a value that is not one
// is one line before any work, not the automatic choice without a word.
TEST(BadInput, ABf16CoreThatIsNotOneIsOneLine) {
  TempDir dir;
  const RunResult r = run_command("THX_BF16_CORE=fp16 " + std::string(THX_BINARY) + " pretrain --config " THX_SOURCE_DIR
                                  "/configs/t5/mini.yaml --run-dir " + dir.file("run") + " 2>&1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "thx: error: THX_BF16_CORE=fp16: not a choice of the CPU's bf16 attention core; allowed: auto, "
                   "bf16, fp32\n");
  EXPECT_FALSE(fs::exists(dir.file("run")));
  for (const char* ok : {"auto", "bf16", "fp32"})
    EXPECT_EQ(run_command("THX_BF16_CORE=" + std::string(ok) + " " + THX_BINARY + " costs >/dev/null 2>&1").code, 0);
}

// An output directory that is a file, or a path below a file, or a report's or a probe's file
// that is a folder: one line, exit 2, before the work whose result it would hold (a benchmark
// can take hours); nothing written, the file kept.
TEST(BadInput, AnOutputPathThatIsOrIsBelowAFileIsOneLineBeforeAnyWork) {
  TempDir dir;
  const std::string file = dir.write("afile", "keep me\n");
  const PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 2);
  const std::string cfg = dir.write("run.yaml", c.yaml);
  const std::string sweep = dir.write("sweep.yaml", "sweep: s\nbase: run.yaml\ngrid: {attention.h: [2]}\n");
  const std::string prepare =
      "prepare --input " + dir.file("corpus.txt") + " --format text --tokenizer " + dir.file("tiny.model");
  const std::string bench = "bench attention --heads 2 --d-model 16 --n 8 --batch 1 --reps 1 --no-reference";
  const std::string is_file = file + ": exists and is not a directory (";
  const std::string below = "--out " + file + "/x: cannot create the directory (" + file + " is not a directory)";
  const std::string report = "--out " + file + "/r.md: directory " + file + " is not a directory";
  const std::string pipe = dir.file("pipe");
  ASSERT_EQ(::mkfifo(pipe.c_str(), 0644), 0);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"pretrain --config " + cfg + " --run-dir " + file, is_file},
      {bench + " --out " + pipe, "--out " + pipe + ": is a pipe; thx writes its files whole"},
      {prepare + " --out " + file, is_file},
      {"sweep --dry-run --config " + sweep + " --out " + file, is_file},
      {prepare + " --out " + file + "/x", below},
      {"sweep --config " + sweep + " --out " + file + "/x", below},
      {bench + " --out " + file + "/r.md", report},
      {"bench train --config " + cfg + " --steps 1 --out " + file + "/r.md", report},
      {bench + " --out " + dir.path.string(), "--out " + dir.path.string() + ": is a directory; --out names a file"},
      {"attention-probe --out " + file + "/r.md", report},
      {"attention-probe --out " + dir.path.string(),
       "--out " + dir.path.string() + ": is a directory; --out names a file"},
      {"step-probe --config " + cfg + " --out " + file + "/r.md", report},
      {"pretrain --config " + cfg + " --run-dir " + file + "/x/y",
       "--run-dir " + file + "/x/y: cannot create the directory (" + file + " is not a directory)"},
      {"step-probe --config " + cfg + " --out " + dir.path.string(),
       "--out " + dir.path.string() + ": is a directory; --out names a file"},
  };
  for (const auto& [args, want] : cases) {
    const RunResult r = fork_thx(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_EQ(r.out.rfind("thx: error: " + want, 0), 0u) << args << "\n" << r.out;
    EXPECT_EQ(lines(r.out), 1) << r.out;
  }
  EXPECT_EQ(read_file(file), "keep me\n");
  EXPECT_TRUE(fs::is_fifo(pipe));
}

// A record that cannot be written (here: a full disk, /dev/full) stops the run with one line
// naming the file and the record, exit 1: metrics.jsonl's, and config_changes.jsonl's of an
// allowed change on resume (before config.yaml is replaced). A run's numbers never go missing
// unsaid.
TEST(BadInput, ARecordThatCannotBeWrittenStopsTheRun) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here (the full disk this test stands in with)";
  TempDir dir;
  const PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 5);
  const std::string cfg = dir.write("run.yaml", c.yaml);
  const std::string thx = "--threads 1 --log-level warn pretrain --config " + cfg + " --run-dir ";
  fs::create_directories(dir.file("full"));
  fs::create_symlink("/dev/full", dir.file("full/metrics.jsonl"));
  RunResult r = fork_thx(thx + dir.file("full"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.out, "thx: error: " + dir.file("full/metrics.jsonl") +
                       ": cannot write the step-5 train record (No space left on device)\n");
  ASSERT_EQ(fork_thx(thx + dir.file("run")).code, 0);
  const std::string config = read_file(dir.file("run/config.yaml"));
  fs::create_symlink("/dev/full", dir.file("run/config_changes.jsonl"));
  r = fork_thx(thx + dir.file("run") + " --resume --allow-config-change train.steps --set train.steps=6");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("thx: error: " + dir.file("run/config_changes.jsonl") +
                       ": cannot record the config change (No space left on device)\n"), std::string::npos) << r.out;
  EXPECT_TRUE(read_file(dir.file("run/config.yaml")) == config) << "config.yaml replaced, the change unrecorded";
}

TEST(BadInput, ResumeRemovesTheTemporariesOfAKilledWriter) {
  TempDir dir;
  const PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 4);
  const std::string cfg = dir.write("run.yaml", c.yaml);
  const std::string run = dir.file("run");
  ASSERT_EQ(fork_thx("--threads 1 pretrain --config " + cfg + " --run-dir " + run + " --set train.steps=2").code, 0);
  // What a process killed inside save_checkpoint leaves: a temporary beside the checkpoints.
  const std::string stale = dir.write("run/checkpoints/step-00000004.h5.tmp-999999", std::string(1000, 'x'));
  const RunResult r = fork_thx("--threads 1 pretrain --config " + cfg + " --run-dir " + run +
                              " --resume --allow-config-change train.steps");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_NE(r.out.find("removed 1 unfinished checkpoint file (0.0 MB) left by a killed process"), std::string::npos)
      << r.out;
}

TEST(BadInput, ATruncatedCheckpointIsNotBuriedUnderTheConfig) {
  TempDir dir;
  const PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 2);
  const std::string cfg = dir.write("run.yaml", c.yaml);
  const std::string run = dir.file("run");
  ASSERT_EQ(fork_thx("--threads 1 pretrain --config " + cfg + " --run-dir " + run).code, 0);
  const std::string ck = checkpoint_path(run + "/checkpoints", 2);
  fs::resize_file(ck, fs::file_size(ck) / 2);
  const RunResult r = fork_thx("--threads 1 pretrain --config " + cfg + " --run-dir " + run + " --resume");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out.find("resolved config"), std::string::npos) << r.out;
  EXPECT_LE(lines(r.out), 3) << r.out;
  EXPECT_NE(r.out.find("thx: error: " + ck), std::string::npos) << r.out;
}

// The machine's memory running out in a CPU step (common/host_memory.h): the loop's one line, not
// Linux's SIGKILL, and the checkpoints as they were. A floor above any machine's memory makes the
// step's first block of 1 MiB or more (its embeddings: 1024 x 32 x 32 fp32) the one refused.
TEST(BadInput, RunningOutOfHostMemoryIsOneLineAndKeepsTheCheckpoints) {
  TempDir dir;
  const PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 4);
  const std::string cfg = dir.write("run.yaml", c.yaml);
  const std::string run = dir.file("run"), big = " --set train.batch_size=1024";
  ASSERT_EQ(fork_thx("--threads 1 pretrain --config " + cfg + " --run-dir " + run + big + " --set train.steps=2").code,
            0);
  const std::string ck = checkpoint_path(run + "/checkpoints", 2);
  const std::string before = read_file(ck);
  const std::string args = " --threads 1 --log-level error pretrain --config " + cfg + " --run-dir " + run + big;
  const RunResult r = run_command("THX_MEMORY_FLOOR_MB=100000000 " + std::string(THX_BINARY) + args +
                                  " --resume --allow-config-change train.steps 2>&1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
  EXPECT_EQ(r.out.rfind("thx: error: step 3: out of memory in training with micro-batches of 1024 examples (batch "
                        "1024 / grad_accum 1) (host memory: ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("THX_MEMORY_FLOOR_MB); this process holds "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("); raise train.grad_accum (smaller micro-batches, the same batch) or lower train.batch_size; "
                       "the checkpoints in " + run + "/checkpoints are as they were\n"), std::string::npos) << r.out;
  EXPECT_EQ(list_checkpoints(run + "/checkpoints"), std::vector<std::string>{ck});
  EXPECT_EQ(read_file(ck), before);
}

TEST(BadInput, AMemorySettingThatIsNotAWholeNumberIsOneLine) {
  const std::string why = ": not a whole number of MB of at most 12 digits (0 turns the ";
  for (const auto& [setting, want] : std::vector<std::pair<std::string, std::string>>{
           {"THX_MEMORY_FLOOR_MB=1.5", "THX_MEMORY_FLOOR_MB=1.5" + why + "check off)"},
           {"THX_MEMORY_LIMIT_MB=-1", "THX_MEMORY_LIMIT_MB=-1" + why + "limit off)"},
           {"THX_MEMORY_FLOOR_MB=lots", "THX_MEMORY_FLOOR_MB=lots" + why + "check off)"},
           {"THX_MEMORY_LIMIT_MB=1234567890123", "THX_MEMORY_LIMIT_MB=1234567890123" + why + "limit off)"}}) {
    const RunResult r = run_command(setting + " " + std::string(THX_BINARY) + " costs 2>&1");
    EXPECT_EQ(r.code, 2) << setting << ": " << r.out;
    EXPECT_EQ(r.out, "thx: error: " + want + "\n") << setting;
  }
  EXPECT_EQ(run_command("THX_MEMORY_FLOOR_MB=0 THX_MEMORY_LIMIT_MB= " + std::string(THX_BINARY) + " costs >/dev/null")
                .code,
            0);
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
