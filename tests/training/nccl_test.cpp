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

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
