#include "eval/scoring.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/error.h"

namespace thx {
using json = nlohmann::json;

std::map<std::string, double> score_task(const TaskSpec& spec, const std::vector<TaskExample>& dev,
                                         const std::vector<int>& labels, const std::vector<double>& scores,
                                         const std::vector<std::string>& texts,
                                         const std::map<std::string, double>* na_probs) {
  std::map<std::string, double> m;
  // Unlabeled examples (thx predict's lines) have nothing to score against.
  const bool unlabeled = std::all_of(dev.begin(), dev.end(), [](const TaskExample& e) {
    return e.label < 0 && !std::isfinite(e.score) && e.answers.empty();
  });
  if (unlabeled && !dev.empty() && (spec.kind == TaskKind::classification || spec.kind == TaskKind::regression))
    return m;
  if (spec.kind == TaskKind::regression) {
    std::vector<double> gold;
    for (const auto& e : dev) gold.push_back(e.score);
    THX_CHECK(scores.size() == gold.size(), "{}: {} predictions for {} examples", spec.name, scores.size(), gold.size());
    m["pearson"] = 100 * pearson(scores, gold);
    m["spearman"] = 100 * spearman(scores, gold);
    return m;
  }
  if (spec.benchmark == "squad") {
    std::vector<SquadQuestion> qs;
    std::map<std::string, std::string> preds;
    for (size_t i = 0; i < dev.size(); ++i) {
      qs.push_back({dev[i].id, dev[i].answers, !dev[i].impossible});
      if (i < texts.size()) preds[dev[i].id] = texts[i];
    }
    const SquadScore s = score_squad(qs, preds, spec.name == "squad20" ? "2.0" : "1.1", na_probs);
    m["exact_match"] = s.exact, m["f1"] = s.f1;
    if (s.has_ans_f1) m["has_ans_f1"] = *s.has_ans_f1;
    if (s.no_ans_f1) m["no_ans_f1"] = *s.no_ans_f1;
    if (s.best_f1) m["best_f1"] = *s.best_f1, m["best_exact"] = *s.best_exact;
    return m;
  }
  if (spec.name == "record") {
    double em = 0, f1 = 0;
    for (size_t i = 0; i < dev.size(); ++i) {
      const auto [e, f] = record_em_f1(dev[i].answers, i < texts.size() ? texts[i] : std::string());
      em += e, f1 += f;
    }
    m["exact_match"] = 100 * em / std::max<size_t>(dev.size(), 1);
    m["f1"] = 100 * f1 / std::max<size_t>(dev.size(), 1);
    return m;
  }
  std::vector<int> gold;
  for (const auto& e : dev) gold.push_back(e.label);
  THX_CHECK(labels.size() == gold.size(), "{}: {} predictions for {} examples", spec.name, labels.size(), gold.size());
  if (spec.name == "multirc") {
    std::vector<std::string> group;
    for (const auto& e : dev) group.push_back(e.group);
    const MultiRcScore s = multirc_score(labels, gold, group);
    m["f1a"] = 100 * s.f1a, m["exact_match"] = 100 * s.exact_match;
    return m;
  }
  for (const auto& name : spec.metrics) {
    if (name == "accuracy") m[name] = 100 * accuracy(labels, gold);
    else if (name == "f1") m[name] = 100 * binary_f1(labels, gold);
    else if (name == "mcc") m[name] = 100 * matthews_corrcoef(labels, gold);
    else if (name == "f1_macro") m[name] = 100 * macro_f1(labels, gold, int(spec.labels.size()));
  }
  return m;
}

double selection_score(const std::string& task, const std::map<std::string, double>& metrics) {
  if (task_spec(task).benchmark == "squad" && metrics.count("f1")) return metrics.at("f1");
  double s = 0;
  for (const auto& [k, v] : metrics) s += v;
  return metrics.empty() ? 0.0 : s / double(metrics.size());
}

bool note_eval(TaskRecord& r, int64_t step, const TaskEval& ev) {
  r.examples = ev.examples;
  r.history.push_back({{"step", step}, {"metrics", ev.metrics}, {"label_misses", ev.label_misses}});
  if (r.best_step < 0 || selection_score(r.task, ev.metrics) > selection_score(r.task, r.best)) {
    r.best = ev.metrics, r.best_step = step;
    return true;
  }
  return false;
}

json to_json(const TaskRecord& r) {
  json j;
  j["task"] = r.task, j["split"] = "dev", j["examples"] = r.examples;
  j["metrics"] = r.best, j["step"] = r.best_step;
  j["protocol"] = "best evaluation of this task over the run (T5's and ALBERT's best checkpoint per task), "
                  "by the mean of its metrics (SQuAD: F1)";
  j["history"] = r.history;
  j["steps"] = r.steps;
  j["finished"] = r.steps <= 0 || (!r.history.empty() && r.history.back().value("step", int64_t(0)) >= r.steps);
  return j;
}

TaskRecord task_record_from_json(const json& j) {
  TaskRecord r;
  r.task = j.at("task"), r.examples = j.at("examples"), r.best_step = j.at("step");
  r.best = j.at("metrics").get<std::map<std::string, double>>();
  r.history = j.at("history");
  r.steps = j.value("steps", int64_t(0));
  return r;
}

std::string show_metrics(const std::map<std::string, double>& m) {
  std::string s;
  for (const auto& [k, v] : m) s += fmt::format("{}{} {:.2f}", s.empty() ? "" : ", ", k, v);
  return s;
}

}  // namespace thx
