// `thx score squad` and the fine-tuning commands from the outside: scores, the v2.0 breakdown,
// and one-line errors with exit code 2 for bad prediction files and configs.
#include <gtest/gtest.h>

#include "cli/forked_cli.h"
#include "test_util.h"

namespace thx {
namespace {
namespace THX_FILE_ID {
using test::fork_thx;  // (cli/forked_cli.h)
using test::TempDir;

const char* kV2 =
    R"({"version": "v2.0", "data": [{"title": "T", "paragraphs": [{"context": "Denver won in 2016.", "qas": [)"
    R"({"id": "a", "question": "Who?", "answers": [{"text": "Denver", "answer_start": 0}, {"text": "the Denver", "answer_start": 0}], "is_impossible": false},)"
    R"({"id": "b", "question": "When?", "answers": [{"text": "2016", "answer_start": 14}], "is_impossible": false},)"
    R"({"id": "c", "question": "Why?", "answers": [], "is_impossible": true}]}]}]})";

TEST(ScoreSquad, PrintsEmF1AndTheV2Breakdown) {
  TempDir t;
  const std::string data = t.write("dev-v2.0.json", kV2);
  const std::string p = t.write("p.json", R"({"a": "Denver!", "b": "in 2016", "c": ""})");
  auto r = fork_thx("score squad --data " + data + " --predictions " + p);
  ASSERT_EQ(r.code, 0) << r.out;
  // a: EM 1; b: EM 0, F1 2/3; c: unanswerable, empty prediction right.
  EXPECT_NE(r.out.find("SQuAD v2.0: 3 questions: EM 66.67  F1 88.89"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("HasAns (2): EM 50.00  F1 83.33"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NoAns (1): EM 100.00  F1 100.00"), std::string::npos) << r.out;
  const std::string na = t.write("na.json", R"({"a": 0.1, "b": 0.2, "c": 0.9})");
  r = fork_thx("score squad --json --data " + data + " --predictions " + p + " --na-probs " + na);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"best_f1_thresh\""), std::string::npos) << r.out;
  // Equal probabilities are visited in the na_prob file's order, as the v2 script's stable sort
  // of json.load's dict does: a right (+1) with c's non-empty prediction (-1) at 0.5, then b at
  // 0.9 (EM +0, F1 +2/3), from 1 (c's abstention). c first: EM 0, 1, 1: best 1 of 3 at 0; F1 0,
  // 1, 5/3: 5/9 at 0.9. a first: EM 2, 1, 1: 2/3 at 0.5; F1 2, 1, 5/3: 2/3 at 0.5.
  const std::string px = t.write("px.json", R"({"a": "Denver!", "b": "in 2016", "c": "x"})");
  r = fork_thx("score squad --data " + data + " --predictions " + px + " --na-probs " +
               t.write("ca.json", R"({"c": 0.5, "a": 0.5, "b": 0.9})"));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("best threshold: EM 33.33 (at 0)  F1 55.56 (at 0.9)"), std::string::npos) << r.out;
  r = fork_thx("score squad --data " + data + " --predictions " + px + " --na-probs " +
               t.write("ac.json", R"({"a": 0.5, "c": 0.5, "b": 0.9})"));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("best threshold: EM 66.67 (at 0.5)  F1 66.67 (at 0.5)"), std::string::npos) << r.out;
  // A missing prediction scores 0 and is reported.
  r = fork_thx("score squad --data " + data + " --predictions " + t.write("q.json", R"({"a": "Denver"})"));
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("no prediction for 2 of 3 questions"), std::string::npos) << r.out;
}

TEST(ScoreSquad, BadFilesGiveOneLineAndExitCode2) {
  TempDir t;
  const std::string data = t.write("dev.json", kV2);
  auto r = fork_thx("score squad --data " + data + " --predictions " + t.write("p.json", R"({"a": 3})"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("p.json: the answer for 'a' is number, not a string"), std::string::npos) << r.out;
  r = fork_thx("score squad --data " + data + " --predictions " + t.write("l.json", R"(["Denver"])"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("expected a JSON object {question id: answer text}"), std::string::npos) << r.out;
  r = fork_thx("score squad --data " + data + " --predictions " + t.write("cut.json", R"({"a": "Den)"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("cut.json: not JSON"), std::string::npos) << r.out;
  r = fork_thx("score squad --data " + t.file("none.json") + " --predictions " + t.file("p.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("none.json: cannot open"), std::string::npos) << r.out;
}

TEST(FinetuneCli, BadConfigsNameFileLineAndKey) {
  TempDir t;
  const std::string f = t.write("ft.yaml", "finetune:\n  pretrained: x\n  tasks: [sst2, mnli-m]\n");
  auto r = fork_thx("finetune --config " + f + " --out " + t.file("o"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find(f + ":3: finetune.tasks[1]: unknown task 'mnli-m'; allowed: cola"), std::string::npos) << r.out;
  const std::string g = t.write("g.yaml", "finetune:\n  pretrained: x\n  tasks: [sst2]\n  stepz: 3\n");
  r = fork_thx("finetune --config " + g + " --out " + t.file("o"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find(g + ":4: finetune.stepz: unknown key"), std::string::npos) << r.out;
  const std::string h = t.write("h.yaml", "finetune:\n  pretrained: " + t.file("nothing") + "\n  tasks: [sst2]\n");
  r = fork_thx("finetune --config " + h + " --out " + t.file("o"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("nothing: no such checkpoint file or run directory"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(t.file("o")));  // nothing written on bad input
  r = fork_thx("eval --config " + h);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--checkpoint PATH is required"), std::string::npos) << r.out;
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx
