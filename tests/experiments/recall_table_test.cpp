// scripts/recall_table.py on hand-made sweep directories: the numbers it prints are the mean and
// sample σ of the rows it was given, sweeps of one task join into one table with the multiplier
// as its own column, and bad input (a missing dir, sweeps of different tasks, an unknown variant,
// two plot files) is one line on stderr and exit 2.
#include "common/fs.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

namespace fs = std::filesystem;

struct RecallRow {
  std::string variant;
  int h, seed;
  double accuracy;    // percent, as results.jsonl's "mlm"
  int solved_at = 0;  // first step whose held-out accuracy is >= 90%; 0: never
};

// A finished recall sweep as `thx sweep` leaves it, reduced to what recall_table.py reads.
void write_recall_sweep(const fs::path& out, int pairs, double multiplier,
                        const std::vector<RecallRow>& rows) {
  fs::create_directories(out);
  std::ofstream results(out / "results.jsonl");
  for (const RecallRow& r : rows) {
    const std::string name = r.variant + "-h" + std::to_string(r.h) + "-s" + std::to_string(r.seed);
    results << "{\"attention\":{\"encoder_self\":{\"h\":" << r.h << ",\"variant\":\"" << r.variant
            << "\"}},\"d_model\":64,\"mlm\":" << r.accuracy << ",\"model\":\"bert\",\"name\":\""
            << name << "\",\"seed\":" << r.seed << ",\"steps\":300}\n";
    fs::create_directories(out / name);
    std::ofstream(out / name / "run.yaml")
        << "data:\n  synthetic:\n    recall:\n      vocab_size: 64\n      pairs: " << pairs
        << "\noptimizer:\n  mixing_lr_multiplier: " << multiplier << "\n";
    std::ofstream metrics(out / name / "metrics.jsonl");
    for (int step = 100; step <= 300; step += 100) {
      const double acc = r.solved_at && step >= r.solved_at ? 0.95 : 0.2;
      metrics << "{\"step\":" << step << ",\"mlm_accuracy\":" << acc << "}\n";
    }
  }
}

RunResult recall_table(const std::string& args) {
  return run_command("/usr/bin/python3 " + std::string(THX_SOURCE_DIR) +
                     "/scripts/recall_table.py " + args + " 2>&1");
}

TEST(RecallTable, JoinsSweepsOfOneTaskAndPrintsMeanAndSampleSigma) {
  TempDir dir;
  const fs::path one = dir.path / "x1", tenth = dir.path / "x01";
  write_recall_sweep(one, 8, 1, {{"multi_head", 2, 1, 50, 0}, {"multi_head", 2, 2, 70, 0},
                                 {"talking_heads", 2, 1, 96, 200}, {"talking_heads", 2, 2, 98, 100}});
  write_recall_sweep(tenth, 8, 0.1, {{"talking_heads", 2, 1, 90, 300}, {"talking_heads", 2, 2, 30, 0}});
  const std::string plot = dir.file("recall.png");
  RunResult r = recall_table(one.string() + " " + tenth.string() + " " + plot);
  ASSERT_EQ(r.code, 0) << r.out;
  // One row (h 2, d_k 32), three columns, a variant's multipliers in ascending order: mean ±
  // sample σ (n - 1) over the two seeds.
  EXPECT_NE(r.out.find("| h | d_k | multi-head | talking-heads, P lr ×0.1 | talking-heads |"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 2 | 32 | 60.0 ± 14.1 | 60.0 ± 42.4 | 97.0 ± 1.4 |"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("| 2 | - - | 300 - | 200 100 |"), std::string::npos) << r.out;  // per seed
  EXPECT_NE(r.out.find("8 pairs"), std::string::npos) << r.out;
  const std::string png = fs::exists(plot) ? read_file(plot) : "";
  EXPECT_EQ(png.compare(0, 8, "\x89PNG\r\n\x1a\n"), 0);

  // --variants keeps only the named variants' columns.
  r = recall_table(one.string() + " " + tenth.string() + " " + plot + " --variants multi_head");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("| 2 | 32 | 60.0 ± 14.1 |\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("talking-heads"), std::string::npos) << r.out;
}

TEST(RecallTable, BadInputIsOneLineAndExitTwo) {
  TempDir dir;
  const fs::path eight = dir.path / "p8", sixteen = dir.path / "p16", empty = dir.path / "empty";
  write_recall_sweep(eight, 8, 1, {{"multi_head", 2, 1, 50, 0}});
  write_recall_sweep(sixteen, 16, 1, {{"multi_head", 2, 1, 50, 0}});
  write_recall_sweep(empty, 8, 1, {});
  auto expect_refused = [&](const std::string& args, const std::string& says) {
    EXPECT_TRUE(refused(recall_table(args), "recall_table.py: ", says)) << args;
  };
  expect_refused((dir.path / "missing").string(), "results.jsonl: not found");
  expect_refused(empty.string(), "no finished runs");
  expect_refused(eight.string() + " " + sixteen.string(), "differ in (vocab_size, pairs, d_model, steps)");
  expect_refused(eight.string() + " --variants multi_head,talking_head", "talking_head unknown; allowed:");
  expect_refused(eight.string() + " --variants talking_heads", "no runs of talking_heads");
  expect_refused(eight.string() + " a.png b.png", "one plot file, not 2");
  expect_refused(eight.string() + " --bogus", "unrecognized arguments: --bogus");
  EXPECT_FALSE(fs::exists("a.png"));
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
