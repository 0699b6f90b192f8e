// The official metrics on cases computed by hand (the arithmetic is in the comments), the SQuAD
// scripts' normalization and scoring edge cases, which metrics each task reports, and which
// evaluation of a run counts as its best.
#include <gtest/gtest.h>

#include <set>

#include "common/error.h"
#include "eval/metrics.h"
#include "eval/scoring.h"

namespace thx {
namespace {
namespace THX_FILE_ID {

TEST(Metrics, AccuracyAndBinaryF1) {
  // pred 1 1 0 0 1, gold 1 0 0 0 1: 4 of 5 right; TP 2, FP 1, FN 0 -> F1 = 4/5.
  const std::vector<int> p = {1, 1, 0, 0, 1}, g = {1, 0, 0, 0, 1};
  EXPECT_DOUBLE_EQ(accuracy(p, g), 0.8);
  EXPECT_DOUBLE_EQ(binary_f1(p, g), 0.8);
  EXPECT_DOUBLE_EQ(binary_f1({0, 0}, {0, 0}), 0.0);  // no positives: sklearn's 0
  // pred 1 0 0 1, gold 1 1 0 0: TP 1, FP 1, FN 1 -> 2 / (2 + 1 + 1) = 1/2 (2/3 without the FN).
  EXPECT_DOUBLE_EQ(binary_f1({1, 0, 0, 1}, {1, 1, 0, 0}), 0.5);
}

TEST(Metrics, MatthewsCorrelation) {
  // Binary: TP 2, FP 1, TN 2, FN 0 -> (2·2 − 1·0) / sqrt(3·2·3·2) = 4/6.
  EXPECT_NEAR(matthews_corrcoef({1, 1, 0, 0, 1}, {1, 0, 0, 0, 1}), 4.0 / 6.0, 1e-12);
  // Three classes: gold 0 1 2 0 1 2, pred 0 1 1 0 1 2: c = 5, s = 6, t = (2,2,2), p = (2,3,1):
  // (5·6 − 12) / sqrt((36 − 14)(36 − 12)) = 18 / sqrt(528).
  EXPECT_NEAR(matthews_corrcoef({0, 1, 1, 0, 1, 2}, {0, 1, 2, 0, 1, 2}), 18.0 / std::sqrt(528.0), 1e-12);
  // A constant prediction has no correlation (sklearn returns 0, not NaN).
  EXPECT_EQ(matthews_corrcoef({1, 1, 1}, {0, 1, 0}), 0.0);
  // Perfectly wrong binary predictions: −1.
  EXPECT_NEAR(matthews_corrcoef({1, 0, 1, 0}, {0, 1, 0, 1}), -1.0, 1e-12);
}

TEST(Metrics, PearsonAndSpearmanWithTies) {
  // x 1 2 3 4, y 2 4 5 9: Sxy = 11, Sxx = 5, Syy = 26 -> 11 / sqrt(130).
  EXPECT_NEAR(pearson({1, 2, 3, 4}, {2, 4, 5, 9}), 11.0 / std::sqrt(130.0), 1e-12);
  // Ties share their mean rank: x 1 2 2 3 -> ranks 1 2.5 2.5 4.
  const auto r = average_ranks({1, 2, 2, 3});
  EXPECT_EQ(r, (std::vector<double>{1, 2.5, 2.5, 4}));
  // Spearman: Pearson of ranks (1 2.5 2.5 4) and (1 3 2 4): 4.5 / sqrt(4.5 · 5).
  EXPECT_NEAR(spearman({1, 2, 2, 3}, {1, 3, 2, 4}), 4.5 / std::sqrt(22.5), 1e-12);
  // Monotone but not linear: Spearman 1, Pearson below 1.
  EXPECT_NEAR(spearman({1, 2, 3, 4}, {1, 8, 27, 64}), 1.0, 1e-12);
  EXPECT_LT(pearson({1, 2, 3, 4}, {1, 8, 27, 64}), 0.99);
}

TEST(Metrics, MacroF1AndMultiRc) {
  // gold 0 0 1 1 2 2, pred 0 1 1 1 2 0: F1 per class 2/4, 4/5, 2/3.
  EXPECT_NEAR(macro_f1({0, 1, 1, 1, 2, 0}, {0, 0, 1, 1, 2, 2}, 3), (0.5 + 0.8 + 2.0 / 3.0) / 3.0, 1e-12);
  // A class never predicted and never gold counts 0 in the mean (the mean is over all classes).
  EXPECT_NEAR(macro_f1({0, 1}, {0, 1}, 3), 2.0 / 3.0, 1e-12);
  // MultiRC: q1 all right, q2 its second answer wrong -> EM 1/2; F1a over options: TP 2, FP 1 -> 0.8.
  const MultiRcScore m = multirc_score({1, 0, 1, 1}, {1, 0, 1, 0}, {"q1", "q1", "q2", "q2"});
  EXPECT_DOUBLE_EQ(m.exact_match, 0.5);
  EXPECT_DOUBLE_EQ(m.f1a, 0.8);
  // q3 wrong at its first answer, right at its last: still not all right -> EM 1/3; F1a: TP 3,
  // FP 1, FN 1 -> 6/8.
  const MultiRcScore m3 = multirc_score({1, 0, 1, 1, 0, 1}, {1, 0, 1, 0, 1, 1}, {"q1", "q1", "q2", "q2", "q3", "q3"});
  EXPECT_DOUBLE_EQ(m3.exact_match, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(m3.f1a, 0.75);
}

TEST(SquadMetric, NormalizationAsTheOfficialScripts) {
  EXPECT_EQ(normalize_answer("The  Quick, brown fox!"), "quick brown fox");
  EXPECT_EQ(normalize_answer("an apple a day"), "apple day");
  EXPECT_EQ(normalize_answer("theater anthem"), "theater anthem");  // articles only as whole words
  EXPECT_EQ(normalize_answer("A.B.C."), "abc");                     // punctuation goes before articles
  EXPECT_EQ(normalize_answer("the-a"), "thea");                     // joined once "-" is gone
  EXPECT_EQ(normalize_answer("Ångström  units"), "ångström units");  // Unicode lowercase
  EXPECT_EQ(normalize_answer("\tNew\nYork "), "new york");
  EXPECT_EQ(normalize_answer("New\u00a0York\u2009City"), "new york city");  // Python splits on Unicode spaces
  EXPECT_EQ(normalize_answer("café the"), "café");  // é is a word character: "the" stands alone
}

TEST(SquadMetric, ExactMatchAndF1) {
  // gold "the cat sat on the mat" -> cat sat on mat; pred "cat on mat": P 1, R 3/4.
  EXPECT_NEAR(squad_f1_v1("the cat sat on the mat", "cat on mat"), 2 * 0.75 / 1.75, 1e-12);
  EXPECT_EQ(squad_exact("The Eiffel Tower.", "eiffel tower"), 1.0);
  // Repeated tokens count with multiplicity: gold "a b b", pred "b b b": common 2.
  EXPECT_NEAR(squad_f1_v1("x b b", "b b b"), 2 * (2.0 / 3) * (2.0 / 3) / (4.0 / 3), 1e-12);
  // Empty sides: v1.1 gives 0, v2.0 gives 1 only when both are empty.
  EXPECT_EQ(squad_f1_v1("", ""), 0.0);
  EXPECT_EQ(squad_f1_v2("", ""), 1.0);
  EXPECT_EQ(squad_f1_v2("", "the"), 1.0);  // "the" normalizes to nothing
  EXPECT_EQ(squad_f1_v2("Paris", ""), 0.0);
}

TEST(SquadMetric, ScoresWithMultipleGoldsMissingAndV2) {
  std::vector<SquadQuestion> qs = {{"q1", {"Denver Broncos", "the Broncos"}, true},
                                   {"q2", {"1990"}, true},
                                   {"q3", {}, false}};
  // v1.1 (q3 would not exist there; here it has no golds and scores 0).
  std::map<std::string, std::string> p = {{"q1", "Broncos"}, {"q2", "in 1990"}};
  SquadScore s = score_squad({qs[0], qs[1]}, p, "1.1");
  // q1: max over golds: "the Broncos" -> EM 1, F1 1; q2: EM 0, F1 2·(1/2)·1/(3/2) = 2/3.
  EXPECT_NEAR(s.exact, 50.0, 1e-9);
  EXPECT_NEAR(s.f1, 100.0 * (1.0 + 2.0 / 3.0) / 2.0, 1e-9);
  // A missing prediction scores 0 and is counted.
  s = score_squad({qs[0], qs[1]}, {{"q1", "Broncos"}}, "1.1");
  EXPECT_EQ(s.missing, 1);
  EXPECT_NEAR(s.exact, 50.0, 1e-9);
  // v2.0: the empty prediction is right for the unanswerable q3.
  p["q3"] = "";
  s = score_squad(qs, p, "2.0");
  EXPECT_NEAR(s.exact, 100.0 * 2.0 / 3.0, 1e-9);
  EXPECT_EQ(s.has_ans_total, 2);
  EXPECT_EQ(s.no_ans_total, 1);
  EXPECT_NEAR(*s.no_ans_exact, 100.0, 1e-9);
  EXPECT_NEAR(*s.has_ans_exact, 50.0, 1e-9);
  p["q3"] = "something";
  s = score_squad(qs, p, "2.0");
  EXPECT_NEAR(*s.no_ans_f1, 0.0, 1e-9);
  // v2.0 drops the golds that normalize to nothing (the v2 script's `if normalize_answer(a)`):
  // answerable with "the" and "Paris", the empty prediction scores 0, not 1 against "the".
  s = score_squad({{"q4", {"the", "Paris"}, true}}, {{"q4", ""}}, "2.0");
  EXPECT_EQ(s.exact, 0.0);
  EXPECT_EQ(s.f1, 0.0);
  s = score_squad({{"q4", {"the", "Paris"}, true}}, {{"q4", "paris"}}, "2.0");
  EXPECT_NEAR(s.exact, 100.0, 1e-9);
  EXPECT_THROW(score_squad(qs, p, "3.0"), InputError);
}

TEST(SquadMetric, BestNoAnswerThresholdAsTheV2Script) {
  // q1 answerable and right (na 0.1), q3 answerable and wrong (na 0.5), q2 unanswerable with a
  // non-empty prediction (na 0.9). Start: 1 (q2 counted right if all abstain); after q1: 2 at
  // 0.1; q3 adds 0; q2 subtracts 1. Best 2/3 at threshold 0.1.
  const std::vector<SquadQuestion> qs = {{"q1", {"a"}, true}, {"q2", {}, false}, {"q3", {"c"}, true}};
  const std::map<std::string, std::string> p = {{"q1", "a"}, {"q2", "b"}, {"q3", "x"}};
  const std::map<std::string, double> scores = {{"q1", 1}, {"q2", 0}, {"q3", 0}};
  const std::map<std::string, double> na = {{"q1", 0.1}, {"q2", 0.9}, {"q3", 0.5}};
  const auto [best, thresh] = best_no_answer_threshold(qs, p, scores, na);
  EXPECT_NEAR(best, 200.0 / 3.0, 1e-9);
  EXPECT_DOUBLE_EQ(thresh, 0.1);
}

TEST(Metrics, RecordAndBenchmarkAverage) {
  const auto [em, f1] = record_em_f1({"Barack Obama", "Obama"}, "obama");
  EXPECT_EQ(em, 1.0);
  EXPECT_EQ(f1, 1.0);
  // The best gold is the first: each is the maximum over golds, not the last gold's (F1 2/3).
  const auto [em2, f12] = record_em_f1({"Obama", "Barack Obama"}, "obama");
  EXPECT_EQ(em2, 1.0);
  EXPECT_EQ(f12, 1.0);
  // T5: a task with two metrics averages them first: ((80 + 90)/2 + 70) / 2 = 77.5.
  const BenchmarkAverage a = benchmark_average({{"mrpc", {{"f1", 90}, {"accuracy", 80}}}, {"rte", {{"accuracy", 70}}}});
  EXPECT_DOUBLE_EQ(a.value, 77.5);
  EXPECT_EQ(a.tasks, (std::vector<std::string>{"mrpc", "rte"}));
}

// The metrics each task reports, as the GLUE and SuperGLUE papers (and T5) name them: CoLA and
// the diagnostics AX and AX-b by Matthews correlation, MRPC and QQP by F1 and accuracy, STS-B by
// Pearson and Spearman, CB by macro-F1 and accuracy, MultiRC by F1a and exact match, ReCoRD and
// SQuAD by exact match and F1 (v2.0 with the F1 of its answerable questions, and of its
// unanswerable ones where it has any), every other task by accuracy.
const std::map<std::string, std::set<std::string>>& official_metrics() {
  static const std::set<std::string> acc = {"accuracy"}, em_f1 = {"exact_match", "f1"};
  static const std::map<std::string, std::set<std::string>> m = {
      {"cola", {"mcc"}}, {"sst2", acc}, {"mrpc", {"f1", "accuracy"}}, {"stsb", {"pearson", "spearman"}},
      {"qqp", {"f1", "accuracy"}}, {"mnli", acc}, {"mnli_mm", acc}, {"qnli", acc}, {"rte", acc}, {"wnli", acc},
      {"ax", {"mcc"}}, {"boolq", acc}, {"cb", {"f1_macro", "accuracy"}}, {"copa", acc},
      {"multirc", {"f1a", "exact_match"}}, {"record", em_f1}, {"rte_sg", acc}, {"wic", acc}, {"wsc", acc},
      {"axb", {"mcc"}}, {"axg", acc}, {"squad11", em_f1}, {"squad20", {"exact_match", "f1", "has_ans_f1"}}, {"race", acc}};
  return m;
}

// Each task's scores on a case where its candidate metrics differ, computed by hand:
// - two classes, gold 1 1 1 0 0 0, pred 1 1 1 1 0 0: TP 3, FP 1, FN 0, TN 2: accuracy 5/6, F1
//   6/7, MCC (3·2 − 1·0) / sqrt(4·2·3·3) = 6 / sqrt(72); MultiRC with questions q1 q1 q2 q2 q3 q3:
//   q2 wrong, EM 2/3;
// - three classes, gold 0 1 2 0 1 2, pred 0 1 1 0 1 2: accuracy 5/6, MCC 18 / sqrt(528) (above),
//   macro-F1 (1 + 4/5 + 2/3) / 3 over the three (9/10 over two);
// - four options (RACE), gold 0 1 2 3, pred 0 1 2 0: accuracy 3/4;
// - STS-B, gold 1 2 3 4, pred 1 8 27 64: Spearman 1, Pearson 104 / sqrt(5 · 2390);
// - answers: golds {Obama, Barack Obama} and {Paris}, predictions "obama" and "in Paris": EM 1/2,
//   F1 (1 + 2/3) / 2.
TEST(Scoring, EachTaskReportsItsOfficialMetrics) {
  const std::map<std::string, double> binary = {
      {"accuracy", 500.0 / 6}, {"f1", 600.0 / 7}, {"mcc", 600 / std::sqrt(72.0)}, {"f1a", 600.0 / 7},
      {"exact_match", 200.0 / 3}};
  const std::map<std::string, double> three = {
      {"accuracy", 500.0 / 6}, {"mcc", 1800 / std::sqrt(528.0)}, {"f1_macro", 100 * (1 + 0.8 + 2.0 / 3) / 3}};
  const std::map<std::string, double> spans = {
      {"exact_match", 50}, {"f1", 100 * (1 + 2.0 / 3) / 2}, {"has_ans_f1", 100 * (1 + 2.0 / 3) / 2}};
  for (const TaskSpec& spec : task_specs()) {
    SCOPED_TRACE(spec.name);
    ASSERT_TRUE(official_metrics().count(spec.name)) << "a task this test does not know";
    std::vector<TaskExample> dev;
    std::vector<int> pred;
    std::vector<double> scores;
    std::vector<std::string> texts;
    const std::map<std::string, double>* want = &binary;
    if (spec.kind == TaskKind::regression) {
      for (int i = 1; i <= 4; ++i) dev.emplace_back().score = i, scores.push_back(double(i * i * i));
      static const std::map<std::string, double> sts = {{"pearson", 10400 / std::sqrt(5.0 * 2390)}, {"spearman", 100}};
      want = &sts;
    } else if (spec.kind == TaskKind::span) {
      const std::vector<std::vector<std::string>> golds = {{"Obama", "Barack Obama"}, {"Paris"}};
      for (size_t i = 0; i < golds.size(); ++i) {
        TaskExample& e = dev.emplace_back();
        e.id = "q" + std::to_string(i), e.answers = golds[i];
      }
      texts = {"obama", "in Paris"}, want = &spans;
    } else {
      std::vector<int> gold = {1, 1, 1, 0, 0, 0};
      pred = {1, 1, 1, 1, 0, 0};
      if (spec.labels.size() == 3) gold = {0, 1, 2, 0, 1, 2}, pred = {0, 1, 1, 0, 1, 2}, want = &three;
      if (spec.labels.size() == 4) gold = {0, 1, 2, 3}, pred = {0, 1, 2, 0};
      ASSERT_LE(spec.labels.size(), 4u);
      for (size_t i = 0; i < gold.size(); ++i) {
        TaskExample& e = dev.emplace_back();
        e.label = gold[i], e.group = "q" + std::to_string(i / 2);
      }
    }
    const std::map<std::string, double> got = score_task(spec, dev, pred, scores, texts);
    std::set<std::string> names;
    for (const auto& [k, v] : got) names.insert(k);
    EXPECT_EQ(names, official_metrics().at(spec.name));
    for (const auto& [k, v] : got) {
      const double expect = spec.labels.size() == 4 ? 75.0 : want->count(k) ? want->at(k) : -1;
      EXPECT_NEAR(v, expect, 1e-9) << k;
    }
  }
}

// A run's best evaluation of a task: SQuAD's by F1, every other task's by the mean of its metrics
// (ReCoRD's EM and F1 too); an equal later one keeps the earlier step.
TEST(Scoring, TheBestEvaluationIsSquadsF1AndEveryOtherTasksMean) {
  const std::map<std::string, double> em_f1 = {{"exact_match", 80}, {"f1", 90}};
  EXPECT_EQ(selection_score("squad11", em_f1), 90);
  EXPECT_EQ(selection_score("squad20", em_f1), 90);
  EXPECT_EQ(selection_score("record", em_f1), 85);
  EXPECT_EQ(selection_score("mrpc", {{"f1", 90}, {"accuracy", 70}}), 80);
  TaskRecord r;
  r.task = "record";
  TaskEval ev;
  ev.metrics = {{"exact_match", 80}, {"f1", 90}};
  EXPECT_TRUE(note_eval(r, 10, ev));
  ev.metrics = {{"exact_match", 85}, {"f1", 85}};  // the same mean: the earlier stays best
  EXPECT_FALSE(note_eval(r, 20, ev));
  ev.metrics = {{"exact_match", 84}, {"f1", 88}};  // a higher mean, a lower F1
  EXPECT_TRUE(note_eval(r, 30, ev));
  EXPECT_EQ(r.best_step, 30);
  EXPECT_EQ(r.history.size(), 3u);
  r = TaskRecord{};
  r.task = "squad11";
  ev.metrics = {{"exact_match", 80}, {"f1", 90}};
  EXPECT_TRUE(note_eval(r, 10, ev));
  ev.metrics = {{"exact_match", 88}, {"f1", 89}};  // a higher mean, a lower F1
  EXPECT_FALSE(note_eval(r, 20, ev));
  EXPECT_EQ(r.best_step, 10);
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx
