// train.precision as a user meets it (common/precision.h).
//
// - A value other than fp32/bf16 (train.precision, eval.precision) is one line naming the key,
//   exit 2, nothing written.
// - bf16 on a CPU without AMX-BF16 or AVX512-BF16 is one line, exit 2, naming the missing
//   features and a bf16 and an fp32 matmul rate measured on the spot (checked here on a
//   described CPU, so on every machine); on this machine the CLI then trains in bf16 if it has
//   the hardware, and is refused if it has not.
// - A bf16 run killed with SIGKILL after its first checkpoint and resumed ends bit-identical
//   to an uninterrupted bf16 run: parameters, optimizer state, data position. (The test
//   forces bf16 with THX_BF16_ANY_CPU, so it runs on any CPU, at a tiny size.)
// - --resume at another precision is refused naming train.precision, unless
//   --allow-config-change train.precision, which config_changes.jsonl records.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>

#include "cli/forked_cli.h"
#include "common/fs.h"
#include "common/precision.h"
#include "eval/eval_fixtures.h"
#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {
namespace fs = std::filesystem;

TEST(Precision, BadValuesAreOneLineNamingTheKey) {
  TempDir dir;
  const PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 2);
  const std::string run = " pretrain --config " + dir.write("run.yaml", c.yaml) + " --run-dir " + dir.file("run");
  for (const char* set : {"train.precision=fp16", "eval.precision=half"}) {
    const RunResult r = fork_thx(run + " --set " + set);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(lines(r.out), 1) << r.out;
    const std::string key = std::string(set).substr(0, std::string(set).find('='));
    EXPECT_NE(r.out.find(key + ": '"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("allowed: fp32, bf16"), std::string::npos) << r.out;
  }
  EXPECT_FALSE(fs::exists(dir.file("run")));
}

TEST(Precision, Bf16WithoutBf16HardwareIsRefusedWithMeasuredRates) {
  CpuBf16 old_cpu;
  old_cpu.model = "Test CPU 9000";
  const std::string e = error_of([&] { check_precision("bf16", torch::Device(torch::kCPU), "train.precision", old_cpu); });
  EXPECT_EQ(e.find("train.precision: bf16 needs a CPU with AMX-BF16 or AVX512-BF16, and this Test CPU 9000 has "
                   "neither (/proc/cpuinfo flags: no amx_bf16, no avx512_bf16): a bf16 matmul runs "), 0u) << e;
  EXPECT_NE(e.find(" in fp32 (measured now, "), std::string::npos) << e;
  EXPECT_NE(e.find("slower); use fp32"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);
  EXPECT_EQ(error_of([&] { check_precision("fp32", torch::Device(torch::kCPU), "train.precision", old_cpu); }), "(no error)");
  CpuBf16 amx = old_cpu;
  amx.amx_bf16 = true;
  EXPECT_EQ(error_of([&] { check_precision("bf16", torch::Device(torch::kCPU), "train.precision", amx); }), "(no error)");
  setenv(kBf16AnyCpuEnv, "1", 1);
  EXPECT_EQ(error_of([&] { check_precision("bf16", torch::Device(torch::kCPU), "train.precision", old_cpu); }), "(no error)");
  unsetenv(kBf16AnyCpuEnv);
}

// What a benchmark names beside its numbers: the model name, the family and model numbers (a VM's
// model name may be only "AMD EPYC", which says neither Zen 4 nor Zen 5), and the bf16 flags.
// This CPU's numbers are read here again from /proc/cpuinfo, by another parse.
TEST(Precision, TheCpuIsDescribedByItsFamilyAndModel) {
  CpuBf16 cpu;
  cpu.model = "Test CPU 9000";
  EXPECT_EQ(cpu.describe(), "Test CPU 9000 (no amx_bf16, no avx512_bf16)");
  cpu.family = "family 6, model 143", cpu.amx_bf16 = cpu.avx512_bf16 = true;
  EXPECT_EQ(cpu.describe(), "Test CPU 9000 (family 6, model 143; amx_bf16 avx512_bf16)");
  std::ifstream in("/proc/cpuinfo");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::smatch family, model;
  if (!std::regex_search(text, family, std::regex("cpu family\\s*: (\\d+)")) ||
      !std::regex_search(text, model, std::regex("\nmodel\\s*: (\\d+)")))
    GTEST_SKIP() << "/proc/cpuinfo has no cpu family or model here";
  EXPECT_NE(cpu_bf16().describe().find("(family " + family[1].str() + ", model " + model[1].str() + "; "),
            std::string::npos)
      << cpu_bf16().describe();
}

TEST(Precision, Bf16OnThisCpuTrainsOrIsRefused) {
  TempDir dir;
  const PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 2);
  // (on the CPU on any machine: this test is about the CPU's bf16 hardware)
  const std::string run = "--threads 1 --device cpu pretrain --config " + dir.write("run.yaml", c.yaml) +
                          " --run-dir " + dir.file("run") + " --set train.precision=bf16";
  const RunResult r = run_command("env -u " + std::string(kBf16AnyCpuEnv) + " " + THX_BINARY + " " + run + " 2>&1");
  if (cpu_bf16().native()) {
    EXPECT_EQ(r.code, 0) << cpu_bf16().describe() << ": " << r.out;
    EXPECT_TRUE(fs::exists(dir.file("run/checkpoints")));
  } else {
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(lines(r.out), 1) << r.out;
    EXPECT_NE(r.out.find("needs a CPU with AMX-BF16 or AVX512-BF16"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(dir.file("run")));
  }
}

TEST(Precision, KilledBf16RunResumesBitForBit) {
  setenv(kBf16AnyCpuEnv, "1", 1);  // the bf16 path on any CPU (tiny sizes), until the test ends or skips
  struct Unset {
    ~Unset() { unsetenv(kBf16AnyCpuEnv); }
  } unset;
  for (const bool albert : {false, true}) {
    SCOPED_TRACE(albert ? "albert" : "t5");
    TempDir dir;
    PretrainConfig c = albert ? tiny_albert_pretrain(prepared_corpus(dir, 120, TokenizerConvention::albert), 60)
                              : tiny_pretrain(prepared_corpus(dir), 60);
    c.model.dropout = 0.1;  // the generator's state is part of what resumes
    c.checkpoint.every = 5, c.checkpoint.keep = 20, c.eval.every = 60;
    bitwise_runs(c);
    const std::string cfg = dir.write("run.yaml", c.yaml);
    auto args = [&](const std::string& run) {
      return "--threads 1 --log-level warn pretrain --config " + cfg + " --run-dir " + dir.file(run) +
             " --set train.precision=bf16";
    };
    ASSERT_EQ(fork_thx(args("straight")).code, 0);
    ASSERT_TRUE(kill_thx_when_exists(args("killed"), checkpoint_path(dir.file("killed/checkpoints"), 5)));
    const RunResult r = fork_thx(args("killed") + " --resume");
    ASSERT_EQ(r.code, 0) << r.out;
    const Checkpoint a = load_checkpoint(checkpoint_path(dir.file("straight/checkpoints"), 60));
    const Checkpoint b = load_checkpoint(checkpoint_path(dir.file("killed/checkpoints"), 60));
    ASSERT_EQ(a.params.size(), b.params.size());
    for (const auto& [k, v] : a.params) {
      EXPECT_EQ(v.scalar_type(), torch::kFloat32) << k << ": checkpoints hold the fp32 master weights";
      EXPECT_TRUE(torch::equal(v, b.params.at(k))) << k;
    }
    for (const auto& [k, v] : a.optimizer) EXPECT_TRUE(torch::equal(v, b.optimizer.at(k))) << k;
    EXPECT_EQ(a.stream.example, b.stream.example);
    // And it did run in bf16: the fp32 run of the same config ends elsewhere.
    ASSERT_EQ(fork_thx(args("fp32") + " --set train.precision=fp32").code, 0);
    const Checkpoint f = load_checkpoint(checkpoint_path(dir.file("fp32/checkpoints"), 60));
    int differ = 0;
    for (const auto& [k, v] : a.params) differ += !torch::equal(v, f.params.at(k));
    EXPECT_GT(differ, int(a.params.size()) / 2);
  }
}

TEST(Precision, ResumeAtAnotherPrecisionNeedsAllowConfigChange) {
  setenv(kBf16AnyCpuEnv, "1", 1);
  TempDir dir;
  PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 5);
  const std::string cfg = dir.write("run.yaml", c.yaml);
  const std::string run = "--threads 1 --log-level warn pretrain --config " + cfg + " --run-dir " + dir.file("run");
  ASSERT_EQ(fork_thx(run).code, 0);
  RunResult r =
      fork_thx(run + " --resume --set train.steps=10 --set train.precision=bf16 --allow-config-change train.steps");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("train.precision"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(checkpoint_path(dir.file("run/checkpoints"), 10)));
  r = fork_thx(run + " --resume --set train.steps=10 --set train.precision=bf16 --allow-config-change train.steps "
                    "train.precision");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::exists(checkpoint_path(dir.file("run/checkpoints"), 10)));
  EXPECT_NE(read_file(dir.file("run/config_changes.jsonl")).find("\"train.precision\""), std::string::npos);
  unsetenv(kBf16AnyCpuEnv);
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test

namespace thx::test {
namespace {
namespace THX_FILE_ID {

// Fine-tuning: finetune.precision (default: the pretrained run's train.precision) and
// finetune.eval_precision; bad values are one line naming the key; bf16 fine-tuning of T5 and
// of an ALBERT head runs to its finished dev record, and ends elsewhere than fp32 does.
TEST(Precision, FineTuningInBf16) {
  setenv(kBf16AnyCpuEnv, "1", 1);
  for (const bool albert : {false, true}) {
    SCOPED_TRACE(albert ? "albert" : "t5");
    FinetuneFixture s;
    make_finetune_fixture(s, albert);
    const std::string base = "--threads 1 --log-level warn finetune --config " + s.config + " --out ";
    for (const char* bad : {"finetune.precision=fp8", "finetune.eval_precision=int8"}) {
      const RunResult r = fork_thx(base + s.dir.file("bad") + " --set " + bad);
      EXPECT_EQ(r.code, 2) << r.out;
      EXPECT_EQ(lines(r.out), 1) << r.out;
      EXPECT_NE(r.out.find(std::string(bad).substr(0, std::string(bad).find('=')) + ": '"), std::string::npos) << r.out;
      EXPECT_FALSE(fs::exists(s.dir.file("bad")));
    }
    const RunResult r = fork_thx(base + s.dir.file("bf16") + " --set finetune.precision=bf16");
    ASSERT_EQ(r.code, 0) << r.out;
    const std::string record = read_file(s.dir.file("bf16/sst2.json"));
    EXPECT_NE(record.find("\"finished\": true"), std::string::npos) << record;
    ASSERT_EQ(fork_thx(base + s.dir.file("fp32")).code, 0);
    EXPECT_NE(read_file(s.dir.file("fp32/" + s.final_params)), read_file(s.dir.file("bf16/" + s.final_params)))
        << "bf16 fine-tuning must differ from fp32";
  }
  unsetenv(kBf16AnyCpuEnv);
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
