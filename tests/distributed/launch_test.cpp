// Launching as users do: two torchrun invocations of one rank each (--nnodes 2, node ranks 0
// and 1, both on 127.0.0.1) equal one invocation of two ranks, bit for bit; bad launches are
// one line and exit 2 before any work.
#include <gtest/gtest.h>

#include <future>

#include "common/fs.h"
#include "distributed/dist_fixtures.h"
#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

struct Launch : ::testing::Test {
  TempDir dir;
  std::string config;
  void SetUp() override {
    PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 10);
    config = dir.write("run.yaml", c.yaml);
  }
  std::string args(const std::string& run, const std::string& extra = "") const {
    return fmt::format("pretrain --config {} --run-dir {} {}", config, dir.file(run), extra);
  }
};

TEST_F(Launch, TwoNodesEqualOneNodeBitForBit) {
  const int port = free_port();
  auto node = [&](int rank) {
    return run_torchrun(fmt::format("--nnodes 2 --node_rank {} --nproc_per_node 1 --master_addr 127.0.0.1 "
                                    "--master_port {}", rank, port), args("nodes"));
  };
  auto second = std::async(std::launch::async, node, 1);
  const RunResult first = node(0);
  const RunResult other = second.get();
  ASSERT_EQ(first.code, 0) << first.out;
  ASSERT_EQ(other.code, 0) << other.out;
  const RunResult one = run_torchrun(fmt::format("--nnodes 1 --nproc_per_node 2 --master_addr 127.0.0.1 "
                                                 "--master_port {}", free_port()), args("node"));
  ASSERT_EQ(one.code, 0) << one.out;
  const auto ck = [&](const std::string& run) { return checkpoint_path(dir.file(run + "/checkpoints"), 10); };
  EXPECT_TRUE(same_params(ck("nodes"), ck("node"), 0));
  // Only rank 0 wrote: one metrics file, one progress stream; rank 1 logged nothing at info.
  EXPECT_EQ(other.out.find("[train] step"), std::string::npos) << other.out;
  EXPECT_NE(first.out.find("[train] step 10/10"), std::string::npos) << first.out;
}

TEST_F(Launch, OneProcessCheckpointResumesOnTwoRanks) {
  // A one-process run's step-5 checkpoint continued on two ranks: the log says the world size
  // changed, and step 10 equals the one-process run's (the same global batches; only the sums
  // are reordered).
  const RunResult whole = run_thx("--threads 1 --device cpu " + args("whole"));
  ASSERT_EQ(whole.code, 0) << whole.out;
  std::filesystem::copy(dir.file("whole"), dir.file("grown"), std::filesystem::copy_options::recursive);
  std::filesystem::remove(checkpoint_path(dir.file("grown/checkpoints"), 10));
  const RunResult rest = run_torchrun(two_ranks(), args("grown", "--resume"));
  ASSERT_EQ(rest.code, 0) << rest.out;
  EXPECT_NE(rest.out.find("resumed from " + checkpoint_path(dir.file("grown/checkpoints"), 5)), std::string::npos)
      << rest.out;
  EXPECT_NE(rest.out.find("the checkpoint was written by 1 process, this run has 2"), std::string::npos) << rest.out;
  EXPECT_TRUE(same_params(checkpoint_path(dir.file("grown/checkpoints"), 10),
                          checkpoint_path(dir.file("whole/checkpoints"), 10), 1e-5));
}

TEST_F(Launch, ATruncatedCheckpointStopsEveryRankWithRankZerosLine) {
  ASSERT_EQ(run_thx("--threads 1 --device cpu " + args("cut")).code, 0);
  // Every checkpoint cut (with an older one intact, resume would fall back to it).
  for (const auto& f : list_checkpoints(dir.file("cut/checkpoints")))
    std::filesystem::resize_file(f, std::filesystem::file_size(f) / 2);
  const std::string ck = checkpoint_path(dir.file("cut/checkpoints"), 10);
  const RunResult r = run_torchrun(two_ranks(), args("cut", "--resume"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("[default0]:thx: error: " + ck), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[default1]:thx: error: rank 1: " + ck), std::string::npos) << r.out;
  // torchrun's own report ends with a rank's line as its root cause (thx writes torchrun's
  // error file), after torchrun's traceback, not only above it.
  const auto root = r.out.rfind("Root Cause");
  ASSERT_NE(root, std::string::npos) << r.out;
  EXPECT_GT(root, r.out.rfind("Traceback (most recent call last)")) << r.out;
  EXPECT_NE(r.out.find("thx: error: ", root), std::string::npos) << r.out.substr(root);
  EXPECT_NE(r.out.find(ck, root), std::string::npos) << r.out.substr(root);
}

TEST_F(Launch, BadDistributedSettingsAreOneLine) {
  RunResult r = run_thx(args("x", "--set distributed.timeout_s=0"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "thx: error: --set distributed.timeout_s=0: distributed.timeout_s: 0 is not a positive number "
                   "of seconds\n");
  r = run_thx(args("x", "--set distributed.timeout=5"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("distributed.timeout: unknown key"), std::string::npos) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir.file("x")));
}

TEST_F(Launch, WorldSizeWithoutMasterAddrIsOneLine) {
  const RunResult r = run_command(fmt::format("env WORLD_SIZE=2 RANK=0 {} --threads 1 {} 2>&1", THX_BINARY, args("x")));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("thx: error: environment: WORLD_SIZE=2 but MASTER_ADDR is not set"), std::string::npos) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir.file("x")));
}

TEST_F(Launch, MalformedRankIsOneLine) {
  const RunResult r = run_command(fmt::format("env WORLD_SIZE=2 RANK=two MASTER_ADDR=127.0.0.1 MASTER_PORT=1 {} "
                                              "--threads 1 {} 2>&1", THX_BINARY, args("x")));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("RANK=\"two\" is not an integer"), std::string::npos) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
}

TEST_F(Launch, BatchThatDoesNotDivideIsOneLinePerRank) {
  // 8 examples, grad_accum 8: micro-batches of one example cannot be split between 2 ranks.
  const RunResult r = run_torchrun(two_ranks(), args("x", "--set train.grad_accum=8"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("thx: error: train.batch_size 8 does not divide into grad_accum 8 micro-batches of 2 rank "
                       "shards (world size 2): it must be a multiple of 16"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir.file("x")));
}

TEST_F(Launch, RanksWithDifferentConfigsStopBeforeWork) {
  // Rank 1 reads another file: the resolved configs differ in train.steps.
  PretrainConfig other = pretrain_config_from_text(read_file(config), config);
  other.train.steps = 11;
  finish(other);
  const std::string second = dir.write("rank1.yaml", other.yaml);
  const std::string script = dir.write("by_rank.sh", fmt::format(
      "#!/bin/sh\nif [ \"$RANK\" = 1 ]; then c={}; else c={}; fi\n"
      "exec {} --threads 1 --device cpu pretrain --config $c --run-dir {}\n",
      second, config, THX_BINARY, dir.file("x")));
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  const RunResult r = run_torchrun_program(two_ranks(), script);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("thx: error: rank 1 resolved config differs from rank 0's"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir.file("x")));
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
