// scoring.h: a task's dev predictions scored with its official metrics, and the record of a
// run's evaluations of it: the best (T5's and ALBERT's protocol: the checkpoint chosen per
// task, by the mean of its metrics; SQuAD: F1) and the history.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/metrics.h"
#include "eval/tasks.h"

namespace thx {

// One task's evaluation: metrics (percent) and the predictions behind them.
struct TaskEval {
  std::map<std::string, double> metrics;
  int64_t examples = 0;
  std::vector<std::string> predictions;  // per dev example: label name, score or answer text
  std::map<std::string, std::string> answers;  // SQuAD/ReCoRD: id -> answer
  std::map<std::string, double> na_probs;      // SQuAD v2 (encoders): id -> no-answer margin
  int64_t label_misses = 0;  // T5: dev answers that named no class or number (written as the fallback)
  std::vector<std::pair<std::string, std::string>> samples;  // T5: a few (decoded answer, target)
  std::vector<std::string> decoded;  // T5: every dev example's decoded answer
};

// Score a task's dev predictions. labels: class / option index (-1 a miss); scores: STS-B;
// texts: SQuAD / ReCoRD answers.
std::map<std::string, double> score_task(const TaskSpec& spec, const std::vector<TaskExample>& dev,
                                         const std::vector<int>& labels, const std::vector<double>& scores,
                                         const std::vector<std::string>& texts,
                                         const std::map<std::string, double>* na_probs = nullptr);

// What "best" means per task: SQuAD's F1 (its EM rises with it), every other task's mean of its
// metrics, as T5 averages them (ReCoRD's EM and F1 too).
double selection_score(const std::string& task, const std::map<std::string, double>& metrics);

// Every evaluation of one task in a run, and the best of them.
struct TaskRecord {
  std::string task;
  int64_t examples = 0, best_step = -1;
  std::map<std::string, double> best;
  nlohmann::json history = nlohmann::json::array();
  int64_t steps = 0;  // the fine-tuning's planned steps (0: one checkpoint evaluated)
};
// Record one evaluation; returns true when it is the task's new best.
bool note_eval(TaskRecord& r, int64_t step, const TaskEval& ev);
// <task>.json's content ("finished": false while the run has steps left, so that a table
// never shows a mid-run best as the result); and back (a fine-tuning checkpoint keeps its
// records this way).
nlohmann::json to_json(const TaskRecord& r);
TaskRecord task_record_from_json(const nlohmann::json& j);
// "accuracy 91.20, f1 88.00"
std::string show_metrics(const std::map<std::string, double>& m);

}  // namespace thx
