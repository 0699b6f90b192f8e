// A T5 answer that names no class (here: a model fine-tuned for one step) must not reach a
// submission file: the GLUE TSV gets the most frequent training label instead, and <task>.json
// counts the misses (issue 16's campaign found "<extra_id_0>-<extra_id_1>" as a label). An
// STS-B answer that is no number gets the mean training score, likewise counted.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "common/fs.h"
#include "eval/eval_fixtures.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

TEST(PredictionLabels, MissesGetTheMostFrequentTrainingLabelAndAreCounted) {
  FinetuneFixture s;
  make_finetune_fixture(s, false);
  // STS-B beside SST-2: training scores with mean 3.0.
  std::filesystem::create_directories(s.dir.file("data/glue/STS-B"));
  std::string sts = "genre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n";
  for (int i = 0; i < 40; ++i)
    sts += "main\tx\t2012\t" + std::to_string(i) + "\tnone\tnone\tthe heads talk\tthe heads learn\t" +
           (i % 2 ? "2.0" : "4.0") + "\n";
  s.dir.write("data/glue/STS-B/train.tsv", sts);
  s.dir.write("data/glue/STS-B/dev.tsv", sts);
  const RunResult r = run_thx("--threads 1 --log-level warn finetune --config " + s.config +
                              " --set finetune.tasks=[sst2,stsb] --set finetune.steps=1 --set finetune.eval_every=1 "
                              "--set checkpoint.every=1 --out " + s.dir.file("out"));
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json rec = nlohmann::json::parse(read_file(s.dir.file("out/sst2.json")));
  const int64_t misses = rec.at("history").back().at("label_misses");
  EXPECT_GT(misses, 0) << "the one-step model answered every example with a class; the test needs misses";
  std::ifstream tsv(s.dir.file("out/SST-2.tsv"));
  std::string line;
  std::getline(tsv, line);
  EXPECT_EQ(line, "index\tprediction");
  int rows = 0;
  while (std::getline(tsv, line)) {
    const std::string label = line.substr(line.find('\t') + 1);
    EXPECT_TRUE(label == "0" || label == "1") << line;
    ++rows;
  }
  EXPECT_EQ(rows, int(rec.at("examples")));
  // STS-B: every row a number; the answers that were none got the training mean.
  const nlohmann::json sts_rec = nlohmann::json::parse(read_file(s.dir.file("out/stsb.json")));
  const int64_t sts_misses = sts_rec.at("history").back().at("label_misses");
  EXPECT_GT(sts_misses, 0) << "the one-step model answered every STS-B example with a number";
  std::ifstream sts_tsv(s.dir.file("out/STS-B.tsv"));
  std::getline(sts_tsv, line);
  int means = 0;
  while (std::getline(sts_tsv, line)) {
    const std::string v = line.substr(line.find('\t') + 1);
    size_t used = 0;
    std::stod(v, &used);
    EXPECT_EQ(used, v.size()) << line;
    means += v == "3.000";
  }
  EXPECT_GE(means, sts_misses);
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
