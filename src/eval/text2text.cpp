#include "eval/text2text.h"

#include <cmath>
#include <map>

#include <fmt/format.h>

#include "common/error.h"

namespace thx {

const std::vector<std::string>& target_names(const TaskSpec& spec) {
  static const std::map<std::string, std::vector<std::string>> names = {
      {"cola", {"unacceptable", "acceptable"}},
      {"sst2", {"negative", "positive"}},
      {"mrpc", {"not_equivalent", "equivalent"}},
      {"qqp", {"not_duplicate", "duplicate"}},
      {"wnli", {"not_entailment", "entailment"}},
  };
  auto it = names.find(spec.name);
  return it != names.end() ? it->second : spec.labels;
}

namespace {

// T5's glue preprocessor: the benchmark name, then "key: text" per feature.
std::string keyed(const std::string& prefix, const std::vector<std::pair<std::string, std::string>>& kv) {
  std::string s = prefix;
  for (const auto& [k, v] : kv) s += (s.empty() ? "" : " ") + k + ": " + v;
  return s;
}

}  // namespace

std::string t5_input(const TaskSpec& spec, const TaskExample& e) {
  const std::string& n = spec.name;
  auto f = [&](size_t i) { return i < e.text.size() ? e.text[i] : std::string(); };
  if (n == "cola" || n == "sst2") return keyed(n, {{"sentence", f(0)}});
  if (n == "mrpc" || n == "stsb" || n == "rte" || n == "wnli")
    return keyed(n, {{"sentence1", f(0)}, {"sentence2", f(1)}});
  if (n == "qqp") return keyed(n, {{"question1", f(0)}, {"question2", f(1)}});
  if (n == "mnli" || n == "mnli_mm" || n == "ax") return keyed("mnli", {{"hypothesis", f(1)}, {"premise", f(0)}});
  if (n == "qnli") return keyed(n, {{"question", f(0)}, {"sentence", f(1)}});
  if (n == "boolq") return keyed(n, {{"passage", f(1)}, {"question", f(0)}});
  if (n == "cb") return keyed(n, {{"hypothesis", f(1)}, {"premise", f(0)}});
  if (n == "rte_sg" || n == "axg") return keyed("rte", {{"hypothesis", f(1)}, {"premise", f(0)}});
  if (n == "axb") return keyed("rte", {{"hypothesis", f(1)}, {"premise", f(0)}});
  if (n == "copa")
    return keyed(n, {{"choice1", f(1)}, {"choice2", f(2)}, {"premise", f(0)}, {"question", e.word}});
  if (n == "multirc") return keyed(n, {{"question", f(0)}, {"answer", f(1)}, {"paragraph", f(2)}});
  if (n == "wic") return keyed(n, {{"sentence1", f(0)}, {"sentence2", f(1)}, {"word", e.word}});
  if (n == "wsc") return keyed(n, {{"span1_text", e.word}, {"span2_text", e.word2}, {"text", f(0)}});
  if (n == "squad11" || n == "squad20") return keyed("", {{"question", f(0)}, {"context", f(1)}});
  if (n == "record") {
    std::string ents;
    for (const auto& x : e.options) ents += (ents.empty() ? "" : ", ") + x;
    return keyed(n, {{"query", f(1)}, {"entities", ents}, {"passage", f(0)}});
  }
  if (n == "race") {
    std::string opts;
    for (size_t i = 0; i < e.options.size(); ++i)
      opts += fmt::format("{}{}: {}", i ? " " : "", char('A' + i), e.options[i]);
    return keyed(n, {{"question", f(1)}, {"options", opts}, {"article", f(0)}});
  }
  throw InputError(fmt::format("task {}: no text-to-text format", n));
}

// tf.round, as T5's stsb preprocessor uses it, rounds half to even: nearbyint in the default mode.
std::string score_to_text(double score) { return fmt::format("{:.1f}", std::nearbyint(score * 5.0) / 5.0); }

std::optional<double> parse_score(const std::string& text) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

double text_to_score(const std::string& text) { return parse_score(text).value_or(-1.0); }

int text_to_label(const std::vector<std::string>& names, const std::string& text) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == text) return int(i);
  return -1;
}

int text_to_label(const TaskSpec& spec, const std::string& text) { return text_to_label(target_names(spec), text); }

std::vector<TextExample> t5_training_pairs(const TaskSpec& spec, const TaskExample& e) {
  std::vector<TextExample> out;
  const std::string input = t5_input(spec, e);
  if (spec.kind == TaskKind::regression) {
    if (!std::isnan(e.score)) out.push_back({input, score_to_text(e.score)});
  } else if (spec.name == "record") {
    for (const auto& a : e.answers) out.push_back({input, a});
  } else if (spec.kind == TaskKind::span) {  // SQuAD
    if (!e.answers.empty()) out.push_back({input, e.answers[0]});
    else if (e.impossible) out.push_back({input, ""});
  } else if (e.label >= 0) {
    out.push_back({input, target_names(spec).at(size_t(e.label))});
  }
  return out;
}

}  // namespace thx
