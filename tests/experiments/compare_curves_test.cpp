// scripts/compare_curves.py (a GPU run's loss curve against the CPU's) on hand-made runs: the
// largest relative difference against the bound decides the exit code, and bad input is one
// line, exit 2.
#include <filesystem>
#include <fstream>

#include "common/fs.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {
namespace fs = std::filesystem;

void write_run(const fs::path& dir, const std::vector<std::pair<int, double>>& losses, double ln_ppl) {
  fs::create_directories(dir);
  std::ofstream f(dir / "metrics.jsonl");
  for (const auto& [step, loss] : losses) f << "{\"step\": " << step << ", \"loss\": " << loss << ", \"lr\": 0.01}\n";
  f << "{\"step\": " << losses.back().first << ", \"ln_ppl\": " << ln_ppl << "}\n";
}

RunResult compare(const std::string& args) {
  return run_command("/usr/bin/python3 " + std::string(THX_SOURCE_DIR) + "/scripts/compare_curves.py " + args + " 2>&1");
}

TEST(CompareCurves, TheLargestRelativeDifferenceAgainstTheBound) {
  TempDir dir;
  const fs::path ref = dir.path / "cpu", run = dir.path / "gpu";
  write_run(ref, {{10, 8.0}, {20, 6.0}, {30, 5.0}}, 5.5);
  write_run(run, {{10, 8.004}, {20, 6.03}, {30, 5.0}, {40, 1.0}}, 5.49);  // step 20: 0.5%; 40 has no partner
  const std::string both = ref.string() + " " + run.string();
  RunResult r = compare(both + " --bound 0.006");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("3 steps to 30, largest loss difference 0.500% (step 20), 0.0300 absolute (step 20); "
                       "held-out ln(PPL) 5.4900 vs 5.5000; bound 0.60%: within"), std::string::npos) << r.out;
  r = compare(both + " --bound 0.004");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("OUTSIDE"), std::string::npos) << r.out;
  // A diverged run (NaN loss, as JSON's NaN) is outside any bound.
  const fs::path nan = dir.path / "nan";
  fs::create_directories(nan);
  std::ofstream(nan / "metrics.jsonl") << "{\"step\": 10, \"loss\": NaN}\n";
  r = compare(ref.string() + " " + nan.string() + " --bound 1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("a non-finite loss at step 10: OUTSIDE"), std::string::npos) << r.out;
}

TEST(CompareCurves, BadInputIsOneLineAndExitTwo) {
  TempDir dir;
  const fs::path ref = dir.path / "cpu", other = dir.path / "other", junk = dir.path / "junk";
  write_run(ref, {{10, 8.0}}, 5.5);
  write_run(other, {{20, 8.0}}, 5.5);
  fs::create_directories(junk);
  std::ofstream(junk / "metrics.jsonl") << "{\"step\": 1, \"loss\": 2}\nnot json\n";
  const std::string who = "compare_curves.py: ";
  EXPECT_TRUE(refused(compare(ref.string() + " " + (dir.path / "none").string() + " --bound 0.01"), who,
                      "none/metrics.jsonl: no such file"));
  EXPECT_TRUE(refused(compare(ref.string() + " " + other.string() + " --bound 0.01"), who, "no step in common"));
  EXPECT_TRUE(refused(compare(ref.string() + " " + junk.string() + " --bound 0.01"), who, "metrics.jsonl:2: not JSON"));
  EXPECT_TRUE(refused(compare(ref.string() + " " + ref.string() + " --bound 0"), who, "--bound 0.0: must be positive"));
  EXPECT_TRUE(refused(compare(ref.string()), who, "the following arguments are required"));
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
