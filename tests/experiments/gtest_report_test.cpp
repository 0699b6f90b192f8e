// scripts/gtest_report.py (what a GPU session's tests skipped and failed) on googletest's own XML
// reports of this test binary (passed and skipped tests, in this googletest's format) beside a
// hand-made report of a failure; bad input as one line, exit 2.
#include <filesystem>

#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

RunResult report(const std::string& args) {
  return run_command("/usr/bin/python3 " + std::string(THX_SOURCE_DIR) + "/scripts/gtest_report.py " + args + " 2>&1");
}

TEST(GtestReport, CountsPassedFailedAndSkippedWithTheirReasons) {
  TempDir dir;
  const std::string xml = dir.file("xml");
  // Two processes of this binary: 2 tests that pass, 2 that skip (no GPU here).
  for (const char* filter : {"Nccl.RanksOnGpusNeedNcclAndAGpuEach:DevicePath.RmsNormOnCudaEqualsTheComposition",
                             "TorchCompat.KinetoTimesFromEitherVersionsMembers:DevicePath.T5StepOnCuda*"}) {
    const RunResult r = run_command("GTEST_OUTPUT=xml:" + xml + "/ " + std::string(THX_BUILD_DIR) +
                                    "/thx_tests --gtest_filter='" + filter + "' 2>&1");
    ASSERT_EQ(r.code, 0) << r.out;
  }
  ASSERT_TRUE(std::filesystem::exists(xml + "/thx_tests_1.xml")) << "one report a process";
  dir.write("xml/failed.xml",
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites tests=\"1\" failures=\"1\">\n"
            "  <testsuite name=\"Cuda\" tests=\"1\" failures=\"1\">\n"
            "    <testcase name=\"Bf16TrainsAndResumes\" status=\"run\" result=\"completed\" classname=\"Cuda\">\n"
            "      <failure message=\"tests/cli/cuda_test.cpp:80&#x0A;Expected equality of these values:\" "
            "type=\"\"/>\n    </testcase>\n  </testsuite>\n</testsuites>\n");
  const RunResult r = report(xml);
  ASSERT_EQ(r.code, 0) << r.out;
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is here: the OnCuda tests ran";
  EXPECT_NE(r.out.find("| Cuda.Bf16TrainsAndResumes | Expected equality of these values: |"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("| no CUDA device | 2 |"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1),
            "5 tests in 3 reports: 2 passed, 1 failed, 2 skipped\n")
      << r.out;
}

TEST(GtestReport, BadInputIsOneLineExitTwo) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> bad = {
      {dir.file("none"), "not a directory"},
      {dir.path.string(), "no XML report in it"},
  };
  for (const auto& [arg, says] : bad) {
    const RunResult r = report(arg);
    EXPECT_TRUE(refused(r, "gtest_report.py: ", says)) << r.out;
  }
  dir.write("bad.xml", "<testsuites><testsuite>");
  EXPECT_TRUE(refused(report(dir.path.string()), "gtest_report.py: " + dir.file("bad.xml"), ""));
  std::filesystem::remove(dir.file("bad.xml"));
  dir.write("other.xml", "<junit/>");
  EXPECT_TRUE(refused(report(dir.path.string()), "gtest_report.py: ", "not a googletest report"));
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
