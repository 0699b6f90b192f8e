// --device as a user meets it on a machine without a GPU: "cuda" is one line, exit 2, before
// anything is written; "auto" and "cpu" train. (train.precision: tests/cli/precision_test.cpp.)
#include <gtest/gtest.h>

#include <filesystem>

#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

TEST(Device, CudaIsOneLineOnTheCpu) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is here: tests/cli/cuda_test.cpp runs on it";
  TempDir dir;
  PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 2);
  const std::string cfg = dir.write("run.yaml", c.yaml);
  const std::string run = " pretrain --config " + cfg + " --run-dir " + dir.file("run");
  RunResult r = run_thx("--device cuda" + run);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("thx: error: --device cuda: "), std::string::npos) << r.out;
  r = run_thx(run + " --set train.device=cuda");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("thx: error: train.device cuda: "), std::string::npos) << r.out;
  r = run_thx(run + " --set train.device=gpu");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("train.device: 'gpu' is not allowed; allowed: cpu, cuda, auto"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir.file("run")));
  r = run_thx("--threads 1 --device auto" + run + " --set train.device=cpu");
  EXPECT_EQ(r.code, 0) << r.out;
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
