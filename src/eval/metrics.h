// metrics.h: the official metrics of GLUE, SuperGLUE, SQuAD and RACE.
//
// Definitions (scores are fractions in [0, 1] unless a name says percent):
//   accuracy      mean of pred == gold
//   f1            binary F1 of class 1 (MRPC, QQP: sklearn's f1_score); 0 when undefined
//   mcc           Matthews correlation, multiclass form (sklearn's matthews_corrcoef); 0 when
//                 a marginal is constant
//   pearson       Pearson r; spearman: Pearson r of average ranks (ties share their mean rank)
//   f1_macro      unweighted mean of per-class F1 over classes 0..K-1 (CB; T5's
//                 mean_multiclass_f1); a class with no predictions and no golds scores 0
//   multirc       f1a: binary F1 over every answer option; exact_match: fraction of questions
//                 whose options are all right
//   SQuAD / ReCoRD: the official evaluation scripts' normalization (lowercase, drop ASCII
//                 punctuation, drop the words a/an/the, collapse whitespace), exact match and
//                 token F1, each the max over gold answers. v2.0: an unanswerable question's
//                 gold is the empty string, an empty prediction is right, and F1 with an empty
//                 side is 1 only when both are empty.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace thx {

double accuracy(const std::vector<int>& pred, const std::vector<int>& gold);
double binary_f1(const std::vector<int>& pred, const std::vector<int>& gold);
double matthews_corrcoef(const std::vector<int>& pred, const std::vector<int>& gold);
double pearson(const std::vector<double>& x, const std::vector<double>& y);
double spearman(const std::vector<double>& x, const std::vector<double>& y);
std::vector<double> average_ranks(const std::vector<double>& x);  // 1-based, ties averaged
double macro_f1(const std::vector<int>& pred, const std::vector<int>& gold, int classes);

struct MultiRcScore {
  double f1a = 0, exact_match = 0;
};
// pred/gold per answer option; group: the question each option belongs to.
MultiRcScore multirc_score(const std::vector<int>& pred, const std::vector<int>& gold,
                           const std::vector<std::string>& group);

// ---- SQuAD -----------------------------------------------------------------------------------

std::string normalize_answer(const std::string& s);
double squad_exact(const std::string& gold, const std::string& pred);  // 0 or 1
double squad_f1_v1(const std::string& gold, const std::string& pred);  // v1.1's f1_score
double squad_f1_v2(const std::string& gold, const std::string& pred);  // v2.0's compute_f1

struct SquadQuestion {
  std::string id;
  std::vector<std::string> answers;  // gold texts; empty for an unanswerable v2 question
  bool has_answer = true;
};

struct SquadScore {
  double exact = 0, f1 = 0;  // percent
  int64_t total = 0, missing = 0;
  // v2.0 only:
  std::optional<double> has_ans_exact, has_ans_f1, no_ans_exact, no_ans_f1;
  int64_t has_ans_total = 0, no_ans_total = 0;
  std::optional<double> best_exact, best_exact_thresh, best_f1, best_f1_thresh;  // with na_probs
};

// Score predictions {id: text} as the official script of `version` ("1.1" or "2.0") does. A
// question without a prediction scores 0 and is counted in `missing`. na_probs (v2.0): the
// no-answer probability per id, for the best-threshold search of the official script; na_order:
// its ids in the order of the file they were read from (below), or none for the ids' order.
SquadScore score_squad(const std::vector<SquadQuestion>& questions,
                       const std::map<std::string, std::string>& predictions, const std::string& version,
                       const std::map<std::string, double>* na_probs = nullptr,
                       const std::vector<std::string>* na_order = nullptr);

// v2.0's find_best_thresh: the best score (percent) and the no-answer probability threshold
// above which predicting "" maximizes it. scores: per id 0/1 (exact) or F1. The script visits
// the ids by probability in a stable sort of its na_prob file's order, so among equal
// probabilities the file's order decides where the best prefix ends: na_order gives that order
// (every id of na_probs once); without it the ids' order, which is the order of the files thx
// writes (predictions.cpp).
std::pair<double, double> best_no_answer_threshold(const std::vector<SquadQuestion>& questions,
                                                   const std::map<std::string, std::string>& predictions,
                                                   const std::map<std::string, double>& scores,
                                                   const std::map<std::string, double>& na_probs,
                                                   const std::vector<std::string>* na_order = nullptr);

// ReCoRD: max over gold answers of SQuAD v1.1 exact match and F1.
std::pair<double, double> record_em_f1(const std::vector<std::string>& golds, const std::string& pred);

// ---- averages --------------------------------------------------------------------------------

// T5's benchmark average: each task's metrics are averaged first, then the tasks. scores:
// task -> metric -> percent. Returns the average and the tasks it covers (sorted).
struct BenchmarkAverage {
  double value = 0;
  std::vector<std::string> tasks;
};
BenchmarkAverage benchmark_average(const std::map<std::string, std::map<std::string, double>>& scores);

}  // namespace thx
