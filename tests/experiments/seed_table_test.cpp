// scripts/seed_table.py on a hand-made seeded sweep: each head count's mean ± sample σ, the
// difference and its size in σ (signed so that positive means talking-heads is better, lower
// for ln(PPL)), the fine-tuning scores from finetune/**/<task>.json, and bad input (a missing
// dir, an unknown variant, a corrupt row, no head count with both variants) as one line, exit 2.
// scripts/plot_heads.py on the same kind of sweep: the points it plots (mean ± σ per variant and
// head count, pooled over sweeps), and its bad input as one line, exit 2.
#include "common/fs.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

namespace fs = std::filesystem;

struct SeedRun {
  std::string variant;
  int h, seed;
  double ln_ppl, mlm, sop;
  double sst2 = -1;  // < 0: not fine-tuned
  bool finished = true;  // false: its fine-tuning still running
};

void write_seeded_sweep(const fs::path& out, const std::vector<SeedRun>& runs) {
  fs::create_directories(out);
  std::ofstream results(out / "results.jsonl");
  for (const SeedRun& r : runs) {
    const std::string name = "h" + std::to_string(r.h) + "-" + r.variant + "-s" + std::to_string(r.seed);
    results << "{\"attention\":{\"encoder_self\":{\"d_k\":" << 192 / r.h << ",\"h\":" << r.h
            << ",\"variant\":\"" << r.variant << "\"}},\"ln_ppl\":" << r.ln_ppl << ",\"mlm\":" << r.mlm
            << ",\"name\":\"" << name << "\",\"seed\":" << r.seed << ",\"sop\":" << r.sop << "}\n";
    if (r.sst2 >= 0) {
      fs::create_directories(out / name / "finetune" / "sst2");
      std::ofstream(out / name / "finetune" / "sst2" / "sst2.json")
          << "{\"examples\": 872, \"metrics\": {\"accuracy\": " << r.sst2 << "}"
          << (r.finished ? "" : ", \"finished\": false") << "}\n";
    }
  }
}

RunResult seed_table(const std::string& args) {
  return run_command("/usr/bin/python3 " + std::string(THX_SOURCE_DIR) + "/scripts/seed_table.py " +
                     args + " 2>&1");
}

// A T5 sweep (no MLM accuracy in its results): its ln(PPL) is span corruption's, not MLM's.
TEST(SeedTable, AT5SweepsLnPplIsNotCalledMlm) {
  TempDir dir;
  const fs::path sweep = dir.path / "t5";
  fs::create_directories(sweep);
  std::ofstream results(sweep / "results.jsonl");
  for (const char* variant : {"multi_head", "talking_heads"})
    for (int seed : {1, 2})
      results << "{\"attention\":{\"encoder_self\":{\"d_k\":16,\"h\":12,\"variant\":\"" << variant
              << "\"}},\"ln_ppl\":" << 3.0 + seed * 0.1 << ",\"name\":\"" << variant << "-s" << seed
              << "\",\"seed\":" << seed << "}\n";
  results.close();
  const RunResult r = seed_table(sweep.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("| held-out ln(PPL) (span corruption) | 3.150 ± 0.071 | 3.150 ± 0.071 |"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("MLM"), std::string::npos) << r.out;
}

TEST(SeedTable, MeanSigmaAndTheDifferenceInSigmaPerHeadCount) {
  TempDir dir;
  const fs::path sweep = dir.path / "sweep";
  write_seeded_sweep(sweep, {{"multi_head", 12, 1, 6.0, 21, 70, 83},
                             {"multi_head", 12, 2, 6.2, 23, 80, 81},
                             {"talking_heads", 12, 1, 5.9, 22, 60, 82},
                             {"talking_heads", 12, 2, 5.9, 24, 62},  // not fine-tuned
                             {"multi_head", 48, 1, 6.5, 20, 70}});   // no talking-heads at 48
  const RunResult r = seed_table(sweep.string());
  ASSERT_EQ(r.code, 0) << r.out;
  // ln(PPL): 6.1 ± 0.141 against 5.9 ± 0: −0.2, 1.4σ in talking-heads' favour.
  EXPECT_NE(r.out.find("| held-out MLM ln(PPL) | 6.100 ± 0.141 | 5.900 ± 0.000 | −0.200 | 1.4 |"),
            std::string::npos) << r.out;
  // Accuracy: +1 over σ 2: 0.5σ; SOP: −14 over sqrt(50 + 2): −1.9σ.
  EXPECT_NE(r.out.find("| MLM accuracy (%) | 22.00 ± 1.41 | 23.00 ± 1.41 | +1.00 | 0.5 |"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("| SOP accuracy (%) | 75.00 ± 7.07 | 61.00 ± 1.41 | −14.00 | −1.9 |"),
            std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("sst2"), std::string::npos) << r.out;  // one run lacks it
  EXPECT_NE(r.out.find("| SOP accuracy (%), talking-heads | 60.00 | 62.00 |"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("48 heads"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("#### 12 heads (d_k 16), seeds 1, 2\n"), std::string::npos) << r.out;

  // With every 12-head run fine-tuned, SST-2 is a row of its own.
  write_seeded_sweep(sweep, {{"multi_head", 12, 1, 6.0, 21, 70, 83},
                             {"multi_head", 12, 2, 6.2, 23, 80, 81},
                             {"talking_heads", 12, 1, 5.9, 22, 60, 82},
                             {"talking_heads", 12, 2, 5.9, 24, 62, 80}});
  const RunResult all = seed_table(sweep.string());
  ASSERT_EQ(all.code, 0) << all.out;
  EXPECT_NE(all.out.find("| sst2 dev accuracy | 82.00 ± 1.41 | 81.00 ± 1.41 | −1.00 | −0.5 |"),
            std::string::npos) << all.out;
  // A fine-tuning still running counts as none: its best-so-far is not a score.
  write_seeded_sweep(sweep, {{"multi_head", 12, 1, 6.0, 21, 70, 83},
                             {"multi_head", 12, 2, 6.2, 23, 80, 81},
                             {"talking_heads", 12, 1, 5.9, 22, 60, 82},
                             {"talking_heads", 12, 2, 5.9, 24, 62, 80, false}});
  const RunResult running = seed_table(sweep.string());
  ASSERT_EQ(running.code, 0) << running.out;
  EXPECT_EQ(running.out.find("sst2"), std::string::npos) << running.out;
}

// A cell with one seed so far (a sweep still running) shows its value with no σ, and no size in σ.
TEST(SeedTable, OneSeedHasNoSigma) {
  TempDir dir;
  const fs::path sweep = dir.path / "sweep";
  write_seeded_sweep(sweep, {{"multi_head", 48, 1, 6.0, 21, 70}, {"multi_head", 48, 2, 6.2, 23, 80},
                             {"talking_heads", 48, 1, 5.9, 22, 60}});
  const RunResult r = seed_table(sweep.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("nan"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 6.100 ± 0.141 | 5.900 | −0.200 | — |"), std::string::npos) << r.out;
}

// --by-step: the ln(PPL) gap at every step all runs of a head count evaluated, from their
// metrics.jsonl (training lines, which have no ln_ppl, are skipped); a head count whose runs
// stopped earlier leaves its later cells empty.
TEST(SeedTable, ByStepGivesTheGapAtEveryCommonEvaluation) {
  TempDir dir;
  const fs::path sweep = dir.path / "sweep";
  write_seeded_sweep(sweep, {{"multi_head", 12, 1, 6.0, 21, 70}, {"multi_head", 12, 2, 6.2, 23, 80},
                             {"talking_heads", 12, 1, 5.9, 22, 60}, {"talking_heads", 12, 2, 5.9, 24, 62},
                             {"multi_head", 48, 1, 6.0, 21, 70}, {"talking_heads", 48, 1, 6.1, 21, 70}});
  auto curve = [&](const std::string& name, const std::vector<std::pair<int, double>>& evals) {
    fs::create_directories(sweep / name);
    std::ofstream m(sweep / name / "metrics.jsonl");
    for (const auto& [step, ln_ppl] : evals)
      m << "{\"loss\":7.5,\"step\":" << step - 50 << "}\n{\"ln_ppl\":" << ln_ppl << ",\"step\":" << step << "}\n";
  };
  curve("h12-multi_head-s1", {{500, 7.0}, {1000, 6.0}});
  curve("h12-multi_head-s2", {{500, 7.2}, {1000, 6.2}});
  curve("h12-talking_heads-s1", {{500, 7.3}, {1000, 5.9}});
  curve("h12-talking_heads-s2", {{500, 7.3}, {1000, 5.9}, {1500, 5.5}});  // only this one reached 1500
  curve("h48-multi_head-s1", {{500, 7.0}, {1000, 6.0}, {1500, 5.6}});
  curve("h48-talking_heads-s1", {{500, 7.1}, {1000, 6.1}, {1500, 5.5}});
  const RunResult r = seed_table(sweep.string() + " --by-step");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("| step | 12 heads (d_k 16) | 48 heads (d_k 4) |"), std::string::npos) << r.out;
  // 12 heads at 500: 7.3 against 7.1 ± 0.141 (+0.2, −1.4σ); at 1000 −0.2, 1.4σ; 48 heads: one seed, no σ.
  EXPECT_NE(r.out.find("| 500 | +0.200 (−1.4σ) | +0.100 (—) |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 1000 | −0.200 (1.4σ) | +0.100 (—) |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 1500 |  | −0.100 (—) |"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("ln(PPL) |"), std::string::npos) << r.out;  // not the final-value table

  fs::remove(sweep / "h48-talking_heads-s1" / "metrics.jsonl");
  EXPECT_TRUE(refused(seed_table(sweep.string() + " --by-step"), "seed_table.py: ",
                      "h48-talking_heads-s1/metrics.jsonl: not found (--by-step reads"));
  std::ofstream(sweep / "h48-talking_heads-s1" / "metrics.jsonl") << "{\"step\": 500}\n{oops\n";
  EXPECT_TRUE(refused(seed_table(sweep.string() + " --by-step"), "seed_table.py: ",
                      "h48-talking_heads-s1/metrics.jsonl:2: not JSON"));
}

TEST(SeedTable, BadInputIsOneLineAndExitTwo) {
  TempDir dir;
  const fs::path good = dir.path / "good", bad = dir.path / "bad", lonely = dir.path / "lonely";
  write_seeded_sweep(good, {{"multi_head", 12, 1, 6.0, 21, 70}, {"talking_heads", 12, 1, 5.9, 22, 60}});
  write_seeded_sweep(lonely, {{"multi_head", 12, 1, 6.0, 21, 70}});
  fs::create_directories(bad);
  std::ofstream(bad / "results.jsonl") << "{\"name\": \"x\"}\n";
  auto expect_refused = [&](const std::string& args, const std::string& says) {
    EXPECT_TRUE(refused(seed_table(args), "seed_table.py: ", says)) << args;
  };
  expect_refused((dir.path / "missing").string(), "results.jsonl: not found");
  expect_refused(good.string() + " --vs talking_head", "unknown variant talking_head; allowed:");
  expect_refused(bad.string(), "results.jsonl:1: not a results row");
  expect_refused(lonely.string(), "no head count has runs of both multi_head and talking_heads");
  expect_refused(good.string() + " --bogus", "unrecognized arguments: --bogus");  // argparse's, one line too
  expect_refused("", "the following arguments are required: sweep");
  fs::create_directories(good / "h12-multi_head-s1" / "finetune");
  std::ofstream(good / "h12-multi_head-s1" / "finetune" / "odd.json") << "[1, 2]\n";  // JSON, not a result
  EXPECT_EQ(seed_table(good.string()).code, 0);
}

RunResult plot_heads(const std::string& args) {
  return run_command("/usr/bin/python3 " + std::string(THX_SOURCE_DIR) + "/scripts/plot_heads.py " +
                     args + " 2>&1");
}

// Two sweeps pooled (12 and 48 heads in one, 24 in the other, as issue 34's ALBERT trend): every
// cell's mean and sample σ over its seeds in the summary, the PNG written.
TEST(PlotHeads, PoolsSweepsAndPlotsMeanAndSigmaPerHeadCount) {
  TempDir dir;
  const fs::path a = dir.path / "a", b = dir.path / "b";
  write_seeded_sweep(a, {{"multi_head", 12, 1, 6.0, 21, 70}, {"multi_head", 12, 2, 6.2, 23, 80},
                         {"talking_heads", 12, 1, 5.9, 22, 60}, {"talking_heads", 12, 2, 5.9, 24, 62},
                         {"multi_head", 48, 1, 6.5, 20, 70}});
  write_seeded_sweep(b, {{"multi_head", 24, 1, 6.1, 21, 70}, {"multi_head", 24, 2, 6.3, 23, 80},
                         {"multi_head", 24, 3, 6.2, 22, 75}});
  const std::string png = (dir.path / "heads.png").string(), md = (dir.path / "heads.md").string();
  const RunResult r = plot_heads(a.string() + " " + b.string() + " --out " + png + " --summary " + md);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_GT(fs::file_size(png), 1000u);
  const std::string summary = read_file(md);
  EXPECT_NE(summary.find("| multi-head | 12 | 16 | 2 | 6.1000 | 0.1414 |"), std::string::npos) << summary;
  EXPECT_NE(summary.find("| multi-head | 24 | 8 | 3 | 6.2000 | 0.1000 |"), std::string::npos) << summary;
  EXPECT_NE(summary.find("| multi-head | 48 | 4 | 1 | 6.5000 | — |"), std::string::npos) << summary;
  EXPECT_NE(summary.find("| talking-heads | 12 | 16 | 2 | 5.9000 | 0.0000 |"), std::string::npos) << summary;
  EXPECT_EQ(lines(summary), 2 + 4) << summary;
  // The same run names in two sweeps (a grid run again): both count; a sweep given twice once.
  const fs::path c = dir.path / "c";
  write_seeded_sweep(c, {{"multi_head", 12, 1, 6.4, 21, 70}});
  ASSERT_EQ(plot_heads(a.string() + " " + c.string() + " " + a.string() + " --out " + png + " --summary " + md).code, 0);
  EXPECT_NE(read_file(md).find("| multi-head | 12 | 16 | 3 | 6.2000 | 0.2000 |"), std::string::npos) << read_file(md);
  // A results file named directly (the published fp32 points beside a bf16 sweep): pooled the same.
  const fs::path file = dir.path / "points.jsonl";
  fs::copy_file(b / "results.jsonl", file);
  ASSERT_EQ(plot_heads(a.string() + " " + file.string() + " --out " + png + " --summary " + md).code, 0);
  EXPECT_NE(read_file(md).find("| multi-head | 24 | 8 | 3 | 6.2000 | 0.1000 |"), std::string::npos) << read_file(md);
  // MLM accuracy instead: 22 ± 1.414 at 12 heads.
  ASSERT_EQ(plot_heads(a.string() + " --metric mlm --out " + png + " --summary " + md).code, 0);
  EXPECT_NE(read_file(md).find("| multi-head | 12 | 16 | 2 | 22.0000 | 1.4142 |"), std::string::npos) << read_file(md);
}

TEST(PlotHeads, BadInputIsOneLineAndExitTwo) {
  TempDir dir;
  const fs::path good = dir.path / "good", bad = dir.path / "bad", t5 = dir.path / "t5";
  write_seeded_sweep(good, {{"multi_head", 12, 1, 6.0, 21, 70}});
  fs::create_directories(bad);
  std::ofstream(bad / "results.jsonl") << "{\"name\": \"x\"}\n";
  fs::create_directories(t5);
  std::ofstream(t5 / "results.jsonl")
      << "{\"attention\":{\"encoder_self\":{\"d_k\":16,\"h\":12,\"variant\":\"multi_head\"}},"
         "\"ln_ppl\":\"5.1\",\"model\":\"t5\",\"name\":\"r\",\"seed\":1}\n";
  const std::string out = " --out " + (dir.path / "x.png").string();
  auto expect_refused = [&](const std::string& args, const std::string& says) {
    EXPECT_TRUE(refused(plot_heads(args), "plot_heads.py: ", says)) << args;
  };
  expect_refused((dir.path / "missing").string() + out, "missing: not a directory");
  expect_refused(dir.path.string() + out, "results.jsonl: not found (is ");
  expect_refused((dir.path / "gone.jsonl").string() + out, "gone.jsonl: not found");
  fs::create_directories(dir.path / "dir.jsonl");  // named like a results file, but a directory
  expect_refused((dir.path / "dir.jsonl").string() + out,
                 "dir.jsonl: not found (a directory, not a results file)");
  expect_refused(bad.string() + out, "results.jsonl:1: not a results row");
  expect_refused(t5.string() + out, "results.jsonl:1: ln_ppl is '5.1', not a number");
  expect_refused(good.string() + " --metric nll" + out, "--metric nll: unknown; allowed: ln_ppl, mlm, sop");
  expect_refused(good.string() + " --out /nonexistent/x.png", "directory /nonexistent does not exist");
  expect_refused(good.string(), "the following arguments are required: --out");
  expect_refused(good.string() + " --metric sop --summary /nonexistent/s.md" + out, "/nonexistent does not exist");
  std::ofstream(good / "results.jsonl", std::ios::app)
      << "{\"attention\":{\"encoder_self\":{\"d_k\":16,\"h\":12,\"variant\":\"multi_head\"}},"
         "\"ln_ppl\":5.1,\"model\":\"t5\",\"name\":\"t\",\"seed\":1}\n";
  // write_seeded_sweep's rows name no model; a row that says t5 beside them is a mix.
  expect_refused(good.string() + out, "the sweeps mix models");
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
