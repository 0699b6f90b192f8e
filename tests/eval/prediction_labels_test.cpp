// A T5 answer that names no class (here: a model fine-tuned for one step) must not reach a
// submission file: the GLUE TSV gets the most frequent training label instead, and <task>.json
// counts the misses (issue 16's campaign found "<extra_id_0>-<extra_id_1>" as a label).
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "common/fs.h"
#include "eval/eval_fixtures.h"

namespace thx::test {
namespace {

TEST(PredictionLabels, MissesGetTheMostFrequentTrainingLabelAndAreCounted) {
  FinetuneFixture s;
  make_finetune_fixture(s, false);
  const RunResult r = run_thx("--threads 1 --log-level warn finetune --config " + s.config +
                              " --set finetune.steps=1 --set finetune.eval_every=1 --set checkpoint.every=1 --out " +
                              s.dir.file("out"));
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
}

}  // namespace
}  // namespace thx::test
