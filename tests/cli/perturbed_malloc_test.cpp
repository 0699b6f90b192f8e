// The whole binary reads no memory that nothing wrote, and none that it freed: glibc's perturb
// tunable (MALLOC_PERTURB_, mallopt's M_PERTURB; here with its thread cache off, which would hand
// small blocks back unfilled) fills every block malloc, memalign and posix_memalign return with one
// byte (~N) and every freed block with another (N), where malloc would otherwise give whatever was
// there (fresh pages: zeros). LibTorch's CPU tensors are
// such blocks, and so is everything else thx and its libraries allocate: corpus text, token
// buffers, batches, HDF5's and protobuf's buffers. Each run below gives the same numbers bit for
// bit with the variable as without it:
//  - `thx prepare`: every dataset of its train and held-out shards;
//  - pretraining (T5 with talking-heads, dropout on, held-out evaluations): the checkpoint's
//    parameters and optimizer state, and the evaluation records; a perturbed run killed at its
//    first checkpoint and resumed perturbed, too;
//  - fine-tuning ALBERT's head and T5 (text to text, greedy decoding with its caches), each with
//    evaluations, then `thx eval` of the result: the parameters, the best-of-run record and the
//    predictions of both.
// tests/test_util.h's PoisonedCpuMemory does the same for tensors alone, in-process, with NaN.
#include <gtest/gtest.h>

#include <malloc.h>

#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/fs.h"
#include "common/h5.h"
#include "data/data_fixtures.h"
#include "eval/eval_fixtures.h"
#include "training/checkpoint.h"
#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

// Blocks filled with 0x5A, freed ones with 0xA5 (glibc fills with ~N and N), and no thread cache of
// small blocks, which glibc would hand back unfilled.
const std::string kPerturb = "GLIBC_TUNABLES=glibc.malloc.tcache_count=0:glibc.malloc.perturb=165 ";

RunResult run_thx_perturbed(bool perturbed, const std::string& args) {
  return run_command((perturbed ? kPerturb : "env -u GLIBC_TUNABLES -u MALLOC_PERTURB_ ") + std::string(THX_BINARY) +
                     " " + args + " 2>&1");
}

// The controls, so that the tests below can fail: this glibc fills new blocks while perturbing is
// asked (mallopt's M_PERTURB is the tunable's setting), a block of 1 MiB (past malloc's mmap
// threshold, where fresh pages would read 0) and one of 4 KiB; and its loader takes kPerturb's
// tunables. (Without tcache_count=0 a small block freed and taken again from the thread's cache
// keeps its old bytes: glibc perturbs only blocks that pass through malloc's arenas.)
TEST(PerturbedMalloc, GlibcFillsNewBlocksWhileAsked) {
  ASSERT_EQ(mallopt(M_PERTURB, 165), 1);
  auto* big = static_cast<unsigned char*>(std::malloc(1 << 20));
  auto* page = static_cast<unsigned char*>(std::malloc(4096));
  ASSERT_EQ(mallopt(M_PERTURB, 0), 1);
  ASSERT_TRUE(big && page);
  // (Read through volatile: bytes never written are what this test reads, and GCC warns of them.)
  const volatile unsigned char *big_bytes = big, *page_bytes = page;
  const int big_byte = big_bytes[(1 << 19) + 7], page_byte = page_bytes[4000];
  EXPECT_EQ(big_byte, 0x5A);
  EXPECT_EQ(page_byte, 0x5A);
  std::free(big), std::free(page);
  const RunResult r = run_command(kPerturb + "/lib64/ld-linux-x86-64.so.2 --list-tunables 2>&1");
  EXPECT_NE(r.out.find("glibc.malloc.perturb: 165"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("glibc.malloc.tcache_count: 0x0 "), std::string::npos) << r.out;
}

::testing::AssertionResult same_datasets(const std::string& a, const std::string& b) {
  const H5Reader x(a), y(b);
  const std::vector<std::string> names = x.datasets();
  if (names != y.datasets()) return ::testing::AssertionFailure() << a << " and " << b << " hold other datasets";
  for (const auto& n : names)
    if (!torch::equal(x.read(n), y.read(n))) return ::testing::AssertionFailure() << n << " differs";
  return ::testing::AssertionSuccess() << names.size() << " datasets";
}

TEST(PerturbedMalloc, PrepareEqualsTheHeaps) {
  TempDir dir;
  const std::string corpus = dir.write("corpus.txt", synthetic_corpus(120));
  const std::string spm = tiny_tokenizer(dir, 64, TokenizerConvention::t5);
  for (const bool perturbed : {false, true}) {
    const RunResult r = run_thx_perturbed(perturbed, "--log-level warn prepare --input " + corpus +
                                                         " --format text --tokenizer " + spm +
                                                         " --heldout-fraction 0.1 --out " +
                                                         dir.file(perturbed ? "perturbed" : "plain"));
    ASSERT_EQ(r.code, 0) << r.out;
  }
  for (const char* shard : {"train-00000.h5", "heldout-00000.h5"})
    EXPECT_TRUE(same_datasets(dir.file(std::string("plain/") + shard), dir.file(std::string("perturbed/") + shard)))
        << shard;
}

TEST(PerturbedMalloc, PretrainingAndItsResumeEqualTheHeaps) {
  TempDir dir;
  PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 6);
  c.model.dropout = 0.1;
  c.checkpoint.every = 3, c.checkpoint.keep = 2, c.eval.every = 3;
  finish(c);
  const std::string cfg = dir.write("run.yaml", c.yaml);
  auto args = [&](const std::string& run) {
    return "--threads 1 --device cpu --log-level warn pretrain --config " + cfg + " --run-dir " + dir.file(run);
  };
  RunResult r = run_thx_perturbed(false, args("plain"));
  ASSERT_EQ(r.code, 0) << r.out;
  r = run_thx_perturbed(true, args("perturbed"));
  ASSERT_EQ(r.code, 0) << r.out;
  // Killed at its first checkpoint and resumed, both perturbed (the kill's environment is this process's).
  setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0:glibc.malloc.perturb=165", 1);
  const ::testing::AssertionResult killed =
      kill_thx_when_exists(args("resumed"), dir.file("resumed/checkpoints/step-00000003.h5"));
  unsetenv("GLIBC_TUNABLES");
  ASSERT_TRUE(killed);
  r = run_thx_perturbed(true, args("resumed") + " --resume");
  ASSERT_EQ(r.code, 0) << r.out;
  const Checkpoint want = load_checkpoint(checkpoint_path(dir.file("plain/checkpoints"), 6));
  const auto want_evals = eval_records(dir.file("plain/metrics.jsonl"));
  EXPECT_EQ(want_evals.size(), 2u);
  for (const std::string run : {"perturbed", "resumed"}) {
    SCOPED_TRACE(run);
    const Checkpoint got = load_checkpoint(checkpoint_path(dir.file(run + "/checkpoints"), 6));
    ASSERT_EQ(got.params.size(), want.params.size());
    for (const auto& [k, v] : want.params) EXPECT_TRUE(torch::equal(v, got.params.at(k))) << k;
    for (const auto& [k, v] : want.optimizer) EXPECT_TRUE(torch::equal(v, got.optimizer.at(k))) << k;
    EXPECT_EQ(eval_records(dir.file(run + "/metrics.jsonl")), want_evals);
  }
}

TEST(PerturbedMalloc, FineTuningAndEvaluationEqualTheHeaps) {
  for (const bool albert : {true, false}) {  // ALBERT's head; T5's text-to-text with greedy decoding
    SCOPED_TRACE(albert ? "albert" : "t5");
    FinetuneFixture s;
    make_finetune_fixture(s, albert);
    for (const bool perturbed : {false, true}) {
      const std::string out = s.dir.file(perturbed ? "perturbed" : "plain");
      RunResult r = run_thx_perturbed(perturbed, "--threads 1 --device cpu --log-level warn finetune --config " +
                                                     s.config + " --out " + out +
                                                     " --set finetune.steps=8 --set finetune.eval_every=4");
      ASSERT_EQ(r.code, 0) << r.out;
      r = run_thx_perturbed(perturbed, "--threads 1 --device cpu --log-level warn eval --config " + s.config +
                                           " --checkpoint " + out + " --out " + out + "-eval");
      ASSERT_EQ(r.code, 0) << r.out;
    }
    EXPECT_TRUE(same_params(s.dir.file("plain/" + s.final_params), s.dir.file("perturbed/" + s.final_params), 0));
    for (const std::string f : {"sst2.json", "SST-2.tsv"}) {
      EXPECT_EQ(read_file(s.dir.file("plain/" + f)), read_file(s.dir.file("perturbed/" + f))) << f;
      EXPECT_EQ(read_file(s.dir.file("plain-eval/" + f)), read_file(s.dir.file("perturbed-eval/" + f))) << f;
    }
  }
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
