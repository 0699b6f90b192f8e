#include "eval/score_files.h"

#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/fs.h"
#include "eval/metrics.h"
#include "eval/tasks.h"

namespace thx {
using json = nlohmann::json;

namespace {

std::map<std::string, std::string> read_predictions(const std::string& path) {
  const json j = read_json(path);
  if (!j.is_object()) throw InputError(fmt::format("{}: expected a JSON object {{question id: answer text}}", path));
  std::map<std::string, std::string> out;
  for (const auto& [id, v] : j.items()) {
    if (!v.is_string())
      throw InputError(fmt::format("{}: the answer for '{}' is {}, not a string", path, id, v.type_name()));
    out[id] = v.get<std::string>();
  }
  return out;
}

}  // namespace

ScoreReport score_squad_files(const std::string& data, const std::string& predictions, const std::string& na_probs,
                              bool as_json) {
  ScoreReport r;
  const std::string version = squad_version(data);
  const TaskData d = read_squad(data);
  std::vector<SquadQuestion> qs;
  for (const auto& e : d.examples) qs.push_back({e.id, e.answers, !e.impossible});
  const auto preds = read_predictions(predictions);
  int64_t unknown = 0;
  std::map<std::string, bool> known;
  for (const auto& q : qs) known[q.id] = true;
  for (const auto& [id, a] : preds) unknown += !known.count(id);
  std::map<std::string, double> na;
  std::vector<std::string> na_order;  // the file's order: the v2 script's tie order (metrics.h)
  if (!na_probs.empty()) {
    const nlohmann::ordered_json j = read_ordered_json(na_probs);
    if (!j.is_object()) throw InputError(fmt::format("{}: expected {{question id: probability}}", na_probs));
    for (const auto& [id, v] : j.items()) {
      if (!v.is_number()) throw InputError(fmt::format("{}: the value for '{}' is not a number", na_probs, id));
      na[id] = v.get<double>(), na_order.push_back(id);
    }
  }
  const SquadScore s = score_squad(qs, preds, version, na_probs.empty() ? nullptr : &na, &na_order);
  if (as_json) {
    json j{{"version", version}, {"exact", s.exact}, {"f1", s.f1}, {"total", s.total}, {"missing", s.missing}};
    if (s.has_ans_f1) j["HasAns_exact"] = *s.has_ans_exact, j["HasAns_f1"] = *s.has_ans_f1, j["HasAns_total"] = s.has_ans_total;
    if (s.no_ans_f1) j["NoAns_exact"] = *s.no_ans_exact, j["NoAns_f1"] = *s.no_ans_f1, j["NoAns_total"] = s.no_ans_total;
    if (s.best_f1) j["best_exact"] = *s.best_exact, j["best_exact_thresh"] = *s.best_exact_thresh,
                   j["best_f1"] = *s.best_f1, j["best_f1_thresh"] = *s.best_f1_thresh;
    r.out += j.dump(1) + "\n";
  } else {
    r.out += fmt::format("SQuAD v{}: {} questions: EM {:.2f}  F1 {:.2f}\n", version, s.total, s.exact, s.f1);
    if (s.has_ans_f1) r.out += fmt::format("  HasAns ({}): EM {:.2f}  F1 {:.2f}\n", s.has_ans_total, *s.has_ans_exact, *s.has_ans_f1);
    if (s.no_ans_f1) r.out += fmt::format("  NoAns ({}): EM {:.2f}  F1 {:.2f}\n", s.no_ans_total, *s.no_ans_exact, *s.no_ans_f1);
    if (s.best_f1)
      r.out += fmt::format("  best threshold: EM {:.2f} (at {:.4g})  F1 {:.2f} (at {:.4g})\n", *s.best_exact,
                         *s.best_exact_thresh, *s.best_f1, *s.best_f1_thresh);
  }
  if (s.missing)
    r.warnings += fmt::format("{}: no prediction for {} of {} questions (scored 0)\n", predictions, s.missing, s.total);
  if (unknown)
    r.warnings += fmt::format("{}: {} ids are not questions of {} (ignored)\n", predictions, unknown, data);
  return r;
}

}  // namespace thx
