// NCCL as the process group's backend for CUDA tensors (src/distributed/nccl.h), on a GPU machine
// where thx was built with it: one rank (a lent machine has one GPU), a CUDA and a CPU all-reduce
// through the same group, and DDP's Reducer over a CUDA parameter (dist::nccl_one_rank_check).
// More than one rank over NCCL needs more than one GPU and has not run.
#include <gtest/gtest.h>

#include "distributed/dist.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

TEST(NcclOnCuda, OneRankGroupAllReducesAndRunsTheReducer) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (!dist::nccl_built()) GTEST_SKIP() << "thx built without NCCL (THX_NCCL)";
  EXPECT_EQ(dist::nccl_one_rank_check(), "");
}

// Without NCCL the check says so in one line instead of failing somewhere inside c10d.
TEST(Nccl, WithoutItTheCheckSaysSo) {
  if (dist::nccl_built()) GTEST_SKIP() << "this build has NCCL";
  EXPECT_EQ(dist::nccl_one_rank_check(), "thx was built without NCCL (THX_NCCL)");
}

// Several ranks on a GPU need NCCL and a GPU each on their node (else one line before any work);
// the CPU (Gloo) and one process take any device.
TEST(Nccl, RanksOnGpusNeedNcclAndAGpuEach) {
  const torch::Device cpu(torch::kCPU), gpu(torch::kCUDA, 0);
  EXPECT_EQ(dist::device_refusal(cpu, 4, 4, false, 0), "");
  EXPECT_EQ(dist::device_refusal(gpu, 1, 1, false, 1), "");
  EXPECT_EQ(dist::device_refusal(gpu, 2, 2, true, 2), "");
  EXPECT_EQ(dist::device_refusal(gpu, 8, 4, true, 4), "");  // two nodes of four
  EXPECT_EQ(dist::device_refusal(gpu, 2, 2, false, 2).rfind("data parallel with 2 ranks runs on the CPU only in this "
                                                            "build (c10d's Gloo; thx was built without NCCL", 0),
            0u);
  EXPECT_EQ(dist::device_refusal(gpu, 2, 2, true, 1),
            "2 ranks on this node (LOCAL_WORLD_SIZE) and 1 GPU: NCCL needs a GPU for each rank; start at most 1 a "
            "node (torchrun --nproc_per_node 1), or train on the CPU with --device cpu");
  EXPECT_NE(dist::device_refusal(gpu, 16, 8, true, 4).find("8 ranks on this node (LOCAL_WORLD_SIZE) and 4 GPUs"),
            std::string::npos);
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
