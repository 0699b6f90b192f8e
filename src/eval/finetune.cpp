#include "eval/finetune.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "data/tokenizer.h"
#include "eval/text2text.h"

namespace thx {
namespace fs = std::filesystem;
using json = nlohmann::json;
using torch::Tensor;

void validate(const FinetuneConfig& c, const std::string& path) {
  auto positive = [&](int64_t v, const char* key) {
    if (v < 1) throw ConfigError(path + "." + key, fmt::format("{} must be at least 1", v));
  };
  if (c.pretrained.empty())
    throw ConfigError(path + ".pretrained", "required: a pretrained checkpoint (.h5) or run directory");
  if (c.tasks.empty()) throw ConfigError(path + ".tasks", fmt::format("required; allowed: {}", task_names()));
  for (size_t i = 0; i < c.tasks.size(); ++i) {
    try {
      task_spec(c.tasks[i]);
    } catch (const InputError& e) {
      throw ConfigError(fmt::format("{}.tasks[{}]", path, i), e.what());
    }
    if (std::count(c.tasks.begin(), c.tasks.end(), c.tasks[i]) > 1)
      throw ConfigError(fmt::format("{}.tasks[{}]", path, i), fmt::format("'{}' is listed twice", c.tasks[i]));
  }
  positive(c.steps, "steps"), positive(c.batch_size, "batch_size"), positive(c.eval_every, "eval_every");
  positive(c.eval_batch_size, "eval_batch_size"), positive(c.log_every, "log_every");
  positive(c.targets_length, "targets_length"), positive(c.mixing_cap, "mixing_cap");
  positive(c.n_best, "n_best"), positive(c.max_answer_length, "max_answer_length");
  positive(c.max_query_length, "max_query_length"), positive(c.doc_stride, "doc_stride");
  if (c.inputs_length < 16) throw ConfigError(path + ".inputs_length", fmt::format("{} must be at least 16", c.inputs_length));
  const bool span = std::any_of(c.tasks.begin(), c.tasks.end(), [](const std::string& t) { return task_spec(t).kind == TaskKind::span; });
  if (span && c.max_query_length + 8 > c.inputs_length)  // only the span head's windows cut the question
    throw ConfigError(path + ".max_query_length",
                      fmt::format("{} leaves no room for the SQuAD context in inputs_length {} (lower "
                                  "max_query_length or raise inputs_length)", c.max_query_length, c.inputs_length));
  if (c.eval_examples < 0) throw ConfigError(path + ".eval_examples", "must be 0 (all) or positive");
  if (c.max_train_examples < 0) throw ConfigError(path + ".max_train_examples", "must be 0 (all) or positive");
  if (!(c.dropout >= 0 && c.dropout < 1)) throw ConfigError(path + ".dropout", fmt::format("{} is not in [0, 1)", c.dropout));
  if (!(c.classifier_dropout >= 0 && c.classifier_dropout < 1))
    throw ConfigError(path + ".classifier_dropout", fmt::format("{} is not in [0, 1)", c.classifier_dropout));
  if (c.attention_dropout && !(*c.attention_dropout >= 0 && *c.attention_dropout < 1))
    throw ConfigError(path + ".attention_dropout", fmt::format("{} is not in [0, 1)", *c.attention_dropout));
}

std::string resolve_checkpoint(const std::string& pretrained) {
  if (fs::is_regular_file(pretrained)) return pretrained;
  if (fs::is_directory(pretrained)) {
    const fs::path dir = fs::is_directory(fs::path(pretrained) / "checkpoints") ? fs::path(pretrained) / "checkpoints"
                                                                               : fs::path(pretrained);
    const auto all = list_checkpoints(dir.string());
    if (all.empty()) throw InputError(fmt::format("{}: no checkpoints (step-*.h5) in it", dir.string()));
    return all.back();
  }
  throw InputError(fmt::format("{}: no such checkpoint file or run directory", pretrained));
}

// ---- scoring ---------------------------------------------------------------------------------

std::map<std::string, double> score_task(const TaskSpec& spec, const std::vector<TaskExample>& dev,
                                         const std::vector<int>& labels, const std::vector<double>& scores,
                                         const std::vector<std::string>& texts,
                                         const std::map<std::string, double>* na_probs) {
  std::map<std::string, double> m;
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

double selection_score(const std::map<std::string, double>& metrics) {
  // SQuAD: F1 (its EM rises with it); other tasks: the mean of their metrics, as T5 averages.
  if (metrics.count("f1") && metrics.count("exact_match")) return metrics.at("f1");
  double s = 0;
  for (const auto& [k, v] : metrics) s += v;
  return metrics.empty() ? 0.0 : s / double(metrics.size());
}

// ---- SQuAD windows ---------------------------------------------------------------------------

std::vector<std::pair<int64_t, int64_t>> doc_windows(int64_t doc_tokens, int64_t room, int64_t stride) {
  std::vector<std::pair<int64_t, int64_t>> w;  // (start, length)
  for (int64_t start = 0;;) {
    const int64_t len = std::min(room, doc_tokens - start);
    w.emplace_back(start, std::max<int64_t>(len, 0));
    if (start + len >= doc_tokens) break;
    start += std::min(len, stride);
  }
  return w;
}

bool is_max_context(const std::vector<std::pair<int64_t, int64_t>>& windows, size_t w, int64_t pos) {
  double best = -1;
  size_t best_w = 0;
  for (size_t i = 0; i < windows.size(); ++i) {
    const auto [start, len] = windows[i];
    if (pos < start || pos >= start + len) continue;
    const int64_t left = pos - start, right = start + len - 1 - pos;
    const double score = double(std::min(left, right)) + 0.01 * double(len);
    if (score > best) best = score, best_w = i;
  }
  return best >= 0 && best_w == w;
}

SpanAnswer best_span(const std::vector<SpanWindow>& windows, int64_t n_best, int64_t max_answer_tokens) {
  SpanAnswer a;
  auto top = [&](const std::vector<float>& v) {
    std::vector<int64_t> idx(v.size());
    std::iota(idx.begin(), idx.end(), 0);
    const int64_t k = std::min<int64_t>(n_best, int64_t(v.size()));
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t x, int64_t y) { return v[x] > v[y]; });
    idx.resize(size_t(k));
    return idx;
  };
  for (const auto& w : windows) {
    if (w.start_logits.empty()) continue;
    a.null_score = std::min(a.null_score, double(w.start_logits[0]) + double(w.end_logits[0]));
    for (int64_t s : top(w.start_logits))
      for (int64_t e : top(w.end_logits)) {
        if (s >= int64_t(w.token_to_word.size()) || e >= int64_t(w.token_to_word.size())) continue;
        if (w.token_to_word[s] < 0 || w.token_to_word[e] < 0 || !w.max_context[s]) continue;
        if (e < s || e - s + 1 > max_answer_tokens) continue;
        const double score = double(w.start_logits[s]) + double(w.end_logits[e]);
        if (score > a.score) a.score = score, a.start_word = w.token_to_word[s], a.end_word = w.token_to_word[e];
      }
  }
  return a;
}

namespace {

auto now() { return std::chrono::steady_clock::now(); }
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(now() - t).count();
}

void copy_params(const std::vector<std::pair<std::string, Tensor>>& params,
                 const std::map<std::string, Tensor>& src, const std::string& file) {
  torch::NoGradGuard g;
  for (const auto& [path, p] : params) {
    auto it = src.find(path);
    if (it == src.end())
      throw InputError(fmt::format("{}: no parameter '{}' (is it a checkpoint of this model?)", file, path));
    if (it->second.sizes() != p.sizes())
      throw InputError(fmt::format("{}: '{}' has shape {}, the model wants {}", file, path,
                                   fmt::join(it->second.sizes(), "x"), fmt::join(p.sizes(), "x")));
    p.copy_(it->second);
  }
}

std::string tokenizer_path(const FinetuneConfig& c, const PretrainConfig& pc) {
  if (!c.tokenizer.empty()) return c.tokenizer;
  const fs::path manifest = fs::path(pc.data.prepared) / "manifest.json";
  if (fs::exists(manifest)) {
    try {
      const json j = json::parse(read_file(manifest.string()));
      if (j.contains("tokenizer") && j["tokenizer"].is_string()) return j["tokenizer"];
      if (j.contains("tokenizer") && j["tokenizer"].is_object() && j["tokenizer"].contains("path"))
        return j["tokenizer"]["path"];
    } catch (const json::exception&) {
    }
  }
  throw InputError(fmt::format("finetune.tokenizer: not set, and {} names none; set it to the "
                               "SentencePiece model the pretraining data was prepared with",
                               manifest.string()));
}

// The model's configuration for fine-tuning: the pretrained one with dropout everywhere.
PretrainConfig with_dropout(PretrainConfig pc, const FinetuneConfig& c) {
  const double p = c.dropout, a = c.attention_dropout.value_or(c.dropout);
  pc.model.dropout = p, pc.model.ff_dropout = p;
  pc.attention.encoder_self.dropout = a, pc.attention.decoder_self.dropout = a;
  pc.attention.encoder_decoder.dropout = a;
  return pc;
}

struct Splits {
  TaskData train, dev;
};

Splits load_splits(const FinetuneConfig& c, const std::string& task, bool need_train, std::mt19937_64& rng) {
  ReadOptions o;
  o.skip_bad = c.skip_bad_rows;
  Splits s;
  s.dev = load_task(c.data, task, "dev", o);
  if (s.dev.skipped) thx::log("finetune")->warn("{}: skipped {} malformed rows", s.dev.path, s.dev.skipped);
  if (c.eval_examples > 0 && int64_t(s.dev.examples.size()) > c.eval_examples) {
    // A fixed prefix would be one topic in SQuAD; a seeded sample of whole examples instead.
    std::mt19937_64 pick(1234);
    std::shuffle(s.dev.examples.begin(), s.dev.examples.end(), pick);
    s.dev.examples.resize(size_t(c.eval_examples));
  }
  if (need_train) {
    s.train = load_task(c.data, task, "train", o);
    if (s.train.skipped) thx::log("finetune")->warn("{}: skipped {} malformed rows", s.train.path, s.train.skipped);
    std::shuffle(s.train.examples.begin(), s.train.examples.end(), rng);
    if (c.max_train_examples > 0 && int64_t(s.train.examples.size()) > c.max_train_examples)
      s.train.examples.resize(size_t(c.max_train_examples));
  }
  return s;
}

// ---- output files ----------------------------------------------------------------------------

struct TaskRecord {
  std::string task;
  int64_t examples = 0, best_step = -1;
  std::map<std::string, double> best;
  json history = json::array();
};

std::string glue_folder_name(const std::string& task) {
  static const std::map<std::string, std::string> m = {
      {"cola", "CoLA"}, {"sst2", "SST-2"}, {"mrpc", "MRPC"}, {"stsb", "STS-B"}, {"qqp", "QQP"},
      {"mnli", "MNLI-m"}, {"mnli_mm", "MNLI-mm"}, {"qnli", "QNLI"}, {"rte", "RTE"}, {"wnli", "WNLI"},
      {"ax", "AX"}, {"boolq", "BoolQ"}, {"cb", "CB"}, {"copa", "COPA"}, {"multirc", "MultiRC"},
      {"record", "ReCoRD"}, {"rte_sg", "RTE"}, {"wic", "WiC"}, {"wsc", "WSC"}, {"axb", "AX-b"}, {"axg", "AX-g"}};
  auto it = m.find(task);
  return it != m.end() ? it->second : task;
}

}  // namespace

// Predictions in the official formats: SQuAD {id: answer}; GLUE "index\tprediction" TSV;
// SuperGLUE {"idx", "label"} JSON lines.
void write_predictions(const std::string& dir, const TaskSpec& spec, const std::vector<TaskExample>& dev,
                       const TaskEval& ev) {
  if (spec.benchmark == "squad") {
    json j = json::object();
    for (const auto& [id, a] : ev.answers) j[id] = a;
    write_file_atomic((fs::path(dir) / (spec.name + "_predictions.json")).string(), j.dump(1) + "\n");
    if (!ev.na_probs.empty()) {
      json n = json::object();
      for (const auto& [id, p] : ev.na_probs) n[id] = p;
      write_file_atomic((fs::path(dir) / (spec.name + "_na_probs.json")).string(), n.dump(1) + "\n");
    }
    return;
  }
  if (spec.benchmark == "race") {
    json j = json::object();
    for (size_t i = 0; i < dev.size() && i < ev.predictions.size(); ++i) j[dev[i].id] = ev.predictions[i];
    write_file_atomic((fs::path(dir) / "race_predictions.json").string(), j.dump(1) + "\n");
    return;
  }
  const std::string name = glue_folder_name(spec.name);
  if (spec.benchmark == "glue") {
    std::string s = "index\tprediction\n";
    for (size_t i = 0; i < dev.size() && i < ev.predictions.size(); ++i)
      s += dev[i].id + "\t" + ev.predictions[i] + "\n";
    write_file_atomic((fs::path(dir) / (name + ".tsv")).string(), s);
    return;
  }
  std::string s;
  if (spec.name == "multirc") {
    // SuperGLUE's nesting: one line per passage, {idx, passage: {questions: [{idx, answers:
    // [{idx, label}]}]}}; our ids are "passage/question/answer".
    std::vector<std::pair<std::string, json>> passages;  // in file order
    for (size_t i = 0; i < dev.size() && i < ev.predictions.size(); ++i) {
      const std::string& id = dev[i].id;
      const size_t a = id.find('/'), b = id.rfind('/');
      auto num = [](const std::string& x) -> json {
        try {
          return json::parse(x);
        } catch (const json::exception&) {
          return x;
        }
      };
      const std::string pid = id.substr(0, a), qid = id.substr(a + 1, b - a - 1), aid = id.substr(b + 1);
      if (passages.empty() || passages.back().first != pid)
        passages.push_back({pid, {{"idx", num(pid)}, {"passage", {{"questions", json::array()}}}}});
      json& qs = passages.back().second["passage"]["questions"];
      if (qs.empty() || qs.back()["idx"] != num(qid)) qs.push_back({{"idx", num(qid)}, {"answers", json::array()}});
      qs.back()["answers"].push_back({{"idx", num(aid)}, {"label", ev.predictions[i] == "True" ? 1 : 0}});
    }
    for (const auto& [pid, j] : passages) s += j.dump() + "\n";
    write_file_atomic((fs::path(dir) / (name + ".jsonl")).string(), s);
    return;
  }
  for (size_t i = 0; i < dev.size() && i < ev.predictions.size(); ++i) {
    json j;
    try {
      j["idx"] = json::parse(dev[i].id);
    } catch (const json::exception&) {
      j["idx"] = dev[i].id;
    }
    const std::string& p = ev.predictions[i];
    if (spec.name == "copa") j["label"] = p == "choice2" ? 1 : 0;
    else if (spec.labels == std::vector<std::string>{"False", "True"}) j["label"] = p == "True" ? "true" : "false";
    else j["label"] = p;
    s += j.dump() + "\n";
  }
  write_file_atomic((fs::path(dir) / (name + ".jsonl")).string(), s);
}

namespace {

void write_record(const std::string& dir, const TaskRecord& r) {
  json j;
  j["task"] = r.task, j["split"] = "dev", j["examples"] = r.examples;
  j["metrics"] = r.best, j["step"] = r.best_step;
  j["protocol"] = "best evaluation of this task over the run (T5's and ALBERT's best checkpoint per task), "
                  "by the mean of its metrics (SQuAD: F1)";
  j["history"] = r.history;
  write_file_atomic((fs::path(dir) / (r.task + ".json")).string(), j.dump(1) + "\n");
}

// Record one evaluation; returns true when it is the task's new best.
bool note_eval(TaskRecord& r, int64_t step, const TaskEval& ev) {
  r.examples = ev.examples;
  r.history.push_back({{"step", step}, {"metrics", ev.metrics}});
  if (r.best_step < 0 || selection_score(ev.metrics) > selection_score(r.best)) {
    r.best = ev.metrics, r.best_step = step;
    return true;
  }
  return false;
}

std::string show_metrics(const std::map<std::string, double>& m) {
  std::string s;
  for (const auto& [k, v] : m) s += fmt::format("{}{} {:.2f}", s.empty() ? "" : ", ", k, v);
  return s;
}

void write_params(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& params,
                  const std::string& config, int64_t step) {
  Checkpoint ck;
  for (const auto& [k, p] : params) ck.params[k] = p.detach().clone();
  ck.step = step, ck.config = config;
  ck.rng = torch::zeros({1}, torch::kUInt8);
  save_checkpoint(path, ck);
}

// Tokens for a text, cut to `max` (0: no cut).
std::vector<int32_t> cut(std::vector<int32_t> v, size_t max) {
  if (max > 0 && v.size() > max) v.resize(max);
  return v;
}

// ==== T5: text to text =========================================================================

struct T5Item {
  std::vector<int32_t> input, target;
};

Tensor pad_rows(const std::vector<const std::vector<int32_t>*>& rows, int64_t prefix = -1) {
  size_t n = 0;
  for (auto* r : rows) n = std::max(n, r->size() + (prefix >= 0 ? 1 : 0));
  Tensor t = torch::zeros({int64_t(rows.size()), int64_t(std::max<size_t>(n, 1))}, torch::kInt64);
  auto a = t.accessor<int64_t, 2>();
  for (size_t i = 0; i < rows.size(); ++i) {
    size_t j = 0;
    if (prefix >= 0) a[i][j++] = prefix;
    for (size_t k = 0; k < rows[i]->size() && j < size_t(n); ++k) a[i][j++] = (*rows[i])[k];
  }
  return t;
}

struct T5Run {
  const FinetuneRunConfig& cfg;
  PretrainConfig pc;
  Tokenizer tok;
  T5 model{nullptr};
  std::vector<const TaskSpec*> specs;
  std::vector<Splits> data;
  std::vector<std::vector<T5Item>> train;
  std::string out;

  T5Run(const FinetuneRunConfig& c, const Pretrained& p, const std::string& o, const std::string& tokenizer)
      : cfg(c), pc(with_dropout(p.config, c.finetune)), tok(tokenizer), out(o) {
    const int64_t vocab = pc.model.vocab_size > 0 ? pc.model.vocab_size : tok.vocab_size();
    torch::manual_seed(uint64_t(c.finetune.seed));
    model = T5(pc.model, pc.attention, vocab);
  }

  T5Item item(const std::string& input, const std::string& target) const {
    const auto& f = cfg.finetune;
    T5Item it;
    it.input = cut(tok.encode(input), size_t(f.inputs_length - 1));
    it.input.push_back(Tokenizer::kEos);
    it.target = cut(tok.encode(target), size_t(f.targets_length - 1));
    it.target.push_back(Tokenizer::kEos);
    return it;
  }

  TaskEval evaluate(size_t k) {
    const auto& f = cfg.finetune;
    const TaskSpec& spec = *specs[k];
    const auto& dev = data[k].dev.examples;
    std::vector<std::vector<int32_t>> inputs;
    for (const auto& e : dev) {
      auto v = cut(tok.encode(t5_input(spec, e)), size_t(f.inputs_length - 1));
      v.push_back(Tokenizer::kEos);
      inputs.push_back(std::move(v));
    }
    std::vector<size_t> order(dev.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return inputs[a].size() < inputs[b].size(); });
    std::vector<std::string> texts(dev.size());
    model->eval();
    for (size_t b = 0; b < order.size(); b += size_t(f.eval_batch_size)) {
      std::vector<const std::vector<int32_t>*> rows;
      for (size_t i = b; i < std::min(order.size(), b + size_t(f.eval_batch_size)); ++i) rows.push_back(&inputs[order[i]]);
      const Tensor ids = model->greedy_decode(pad_rows(rows), f.targets_length, Tokenizer::kEos);
      auto a = ids.accessor<int64_t, 2>();
      for (size_t r = 0; r < rows.size(); ++r) {
        std::vector<int32_t> v;
        for (int64_t j = 0; j < ids.size(1) && a[r][j] != 0 && a[r][j] != Tokenizer::kEos; ++j) v.push_back(int32_t(a[r][j]));
        texts[order[b + r]] = tok.decode(v);
      }
    }
    model->train();
    TaskEval ev;
    ev.examples = int64_t(dev.size());
    std::vector<int> labels;
    std::vector<double> scores;
    // Label names as the tokenizer renders them (what the model was trained to produce).
    std::vector<std::string> rendered;
    for (const auto& name : target_names(spec)) rendered.push_back(tok.decode(tok.encode(name)));
    for (size_t i = 0; i < dev.size(); ++i) {
      if (spec.kind == TaskKind::regression) {
        scores.push_back(text_to_score(texts[i]));
        ev.predictions.push_back(fmt::format("{:.3f}", scores.back()));
      } else if (spec.kind == TaskKind::span) {
        ev.answers[dev[i].id] = texts[i];
        ev.predictions.push_back(texts[i]);
      } else {
        labels.push_back(text_to_label(rendered, texts[i]));
        const int l = labels.back();
        // Submission files name classes as the task's files do; a miss writes the raw text.
        ev.predictions.push_back(l >= 0 ? (spec.name == "copa" ? target_names(spec)[size_t(l)] : spec.labels[size_t(l)])
                                        : texts[i]);
      }
    }
    ev.metrics = score_task(spec, dev, labels, scores, texts);
    return ev;
  }

  void run() {
    const auto& f = cfg.finetune;
    auto log = thx::log("finetune");
    std::mt19937_64 rng(uint64_t(f.seed));
    std::vector<double> rates;
    for (const auto& t : f.tasks) {
      specs.push_back(&task_spec(t));
      data.push_back(load_splits(f, t, true, rng));
      std::vector<T5Item> items;
      for (const auto& e : data.back().train.examples)
        for (const auto& p : t5_training_pairs(*specs.back(), e)) items.push_back(item(p.input, p.target));
      THX_CHECK(!items.empty(), "{}: no labeled training examples", data.back().train.path);
      rates.push_back(double(std::min<int64_t>(int64_t(items.size()), f.mixing_cap)));
      log->info("{}: {} training pairs, {} dev examples", t, items.size(), data.back().dev.examples.size());
      train.push_back(std::move(items));
    }
    const double total_rate = std::accumulate(rates.begin(), rates.end(), 0.0);
    for (size_t k = 0; k < rates.size(); ++k)
      log->info("mixture: {} {:.2f}%", f.tasks[k], 100 * rates[k] / total_rate);
    std::discrete_distribution<size_t> pick_task(rates.begin(), rates.end());

    auto params = model->named_parameters_by_path();
    if (f.freeze_embedding) model->shared.requires_grad_(false);
    std::vector<std::pair<std::string, Tensor>> trained;
    for (const auto& [k, p] : params)
      if (p.requires_grad()) trained.emplace_back(k, p);
    auto optimizer = make_optimizer(cfg.optimizer, optimized_params(*model, trained, cfg.optimizer));
    std::vector<TaskRecord> records(specs.size());
    for (size_t k = 0; k < specs.size(); ++k) records[k].task = specs[k]->name;
    std::ofstream metrics((fs::path(out) / "metrics.jsonl").string(), std::ios::app);
    auto evaluate_all = [&](int64_t step) {
      for (size_t k = 0; k < specs.size(); ++k) {
        const auto t0 = now();
        const TaskEval ev = evaluate(k);
        const bool best = note_eval(records[k], step, ev);
        log->info("step {} {} dev ({} examples, {:.0f} s): {}{}", step, specs[k]->name, ev.examples,
                  seconds_since(t0), show_metrics(ev.metrics), best ? " (best so far)" : "");
        if (best) write_predictions(out, *specs[k], data[k].dev.examples, ev);
        write_record(out, records[k]);
      }
    };
    model->train();
    const auto start = now();
    double loss_sum = 0;
    int64_t loss_n = 0;
    for (int64_t step = 1; step <= f.steps; ++step) {
      std::vector<const T5Item*> batch;
      for (int64_t i = 0; i < f.batch_size; ++i) {
        const auto& items = train[pick_task(rng)];
        batch.push_back(&items[std::uniform_int_distribution<size_t>(0, items.size() - 1)(rng)]);
      }
      std::vector<const std::vector<int32_t>*> in, tg;
      for (auto* b : batch) in.push_back(&b->input), tg.push_back(&b->target);
      const Tensor inputs = pad_rows(in), targets = pad_rows(tg);
      const Tensor decoder_inputs = pad_rows(tg, 0).narrow(1, 0, targets.size(1));  // shifted right
      for (auto& [k, p] : trained) p.mutable_grad() = Tensor();
      auto r = model->forward(inputs, decoder_inputs, targets);
      r.loss.backward();
      const double lr = learning_rate(cfg.optimizer, step, f.steps);
      optimizer->step(lr);
      const double loss = r.loss.item<double>();
      if (!std::isfinite(loss)) throw RunError(fmt::format("finetune: loss is {} at step {}", loss, step));
      loss_sum += loss, ++loss_n;
      if (step % f.log_every == 0 || step == f.steps) {
        const double el = seconds_since(start);
        log->info("step {}/{} loss {:.4f} lr {:.3g} ({:.2f} s/step, {} left)", step, f.steps, loss_sum / loss_n, lr,
                  el / step, format_duration(el / step * double(f.steps - step)));
        metrics << json{{"step", step}, {"loss", loss_sum / loss_n}, {"lr", lr}}.dump() << "\n" << std::flush;
        loss_sum = 0, loss_n = 0;
      }
      if (step % f.eval_every == 0 || step == f.steps) evaluate_all(step);
    }
    write_params((fs::path(out) / "model.h5").string(), model->named_parameters_by_path(), pc.yaml, f.steps);
    for (const auto& r : records)
      log->info("{}: best at step {}: {}", r.task, r.best_step, show_metrics(r.best));
  }
};

// ==== BERT / ALBERT: task heads ================================================================

struct Feature {
  std::vector<int32_t> ids, types;
  int64_t example = 0;
  int label = -1;
  float score = 0;
  int64_t start = 0, end = 0;       // span targets (0: [CLS])
  std::vector<int64_t> token_to_word;  // span: per position, the context word or -1
  std::vector<bool> max_context;
};

class HeadImpl : public torch::nn::Module {
 public:
  HeadImpl(int64_t d, int64_t out) {
    w = register_parameter("w", torch::empty({d, out}));
    b = register_parameter("bias", torch::zeros({out}));
    init_truncated_normal(w, 0.02);
  }
  Tensor w, b;
};
TORCH_MODULE(Head);

struct EncoderRun {
  const FinetuneRunConfig& cfg;
  PretrainConfig pc;
  Tokenizer tok;
  std::string out;
  const Pretrained& pretrained;

  EncoderRun(const FinetuneRunConfig& c, const Pretrained& p, const std::string& o, const std::string& tokenizer)
      : cfg(c), pc(with_dropout(p.config, c.finetune)), tok(tokenizer), out(o), pretrained(p) {
    THX_CHECK(tok.convention() == TokenizerConvention::albert,
              "{}: a T5-convention tokenizer; BERT/ALBERT fine-tuning needs [CLS]/[SEP] ids "
              "(`thx spm-train --convention albert`)", tokenizer);
  }

  EncoderModel make_model() {
    const int64_t vocab = pc.model.vocab_size > 0 ? pc.model.vocab_size : tok.vocab_size();
    EncoderModel m(pc.model, pc.attention.encoder_self, vocab, false);
    return m;
  }

  int64_t outputs(const TaskSpec& s) const {
    if (s.kind == TaskKind::regression || s.kind == TaskKind::multiple_choice) return 1;
    if (s.kind == TaskKind::span) return 2;
    return int64_t(s.labels.size());
  }

  // [CLS] a [SEP] b [SEP], the longer side cut first.
  Feature pair(std::vector<int32_t> a, std::vector<int32_t> b, bool has_b) const {
    const size_t room = size_t(cfg.finetune.inputs_length) - (has_b ? 3 : 2);
    while (a.size() + b.size() > room) (a.size() >= b.size() ? a : b).pop_back();
    Feature f;
    f.ids.push_back(Tokenizer::kCls);
    f.ids.insert(f.ids.end(), a.begin(), a.end());
    f.ids.push_back(Tokenizer::kSep);
    f.types.assign(f.ids.size(), 0);
    if (has_b) {
      f.ids.insert(f.ids.end(), b.begin(), b.end());
      f.ids.push_back(Tokenizer::kSep);
      f.types.resize(f.ids.size(), 1);
    }
    return f;
  }

  // Features of one example; multiple choice: one per option, in order; SQuAD: one per window.
  std::vector<Feature> features(const TaskSpec& s, const TaskExample& e, int64_t index, bool training) const {
    std::vector<Feature> out;
    if (s.kind == TaskKind::multiple_choice) {
      const std::vector<int32_t> ctx = tok.encode(e.text[0]);
      for (size_t o = 0; o < e.options.size(); ++o) {
        std::string second;
        if (s.name == "race") {
          const std::string& q = e.text[1];
          const size_t blank = q.find('_');
          second = blank != std::string::npos ? q.substr(0, blank) + e.options[o] + q.substr(blank + 1)
                                              : q + " " + e.options[o];
        } else {  // COPA
          second = (e.word == "cause" ? "What was the cause? " : "What happened as a result? ") + e.options[o];
        }
        auto b = tok.encode(second);
        // The option side keeps up to half the input; the article is cut first.
        if (b.size() > size_t(cfg.finetune.inputs_length / 2)) b.resize(size_t(cfg.finetune.inputs_length / 2));
        Feature f = pair(ctx, b, true);
        f.example = index, f.label = e.label;
        out.push_back(std::move(f));
      }
      return out;
    }
    if (s.kind == TaskKind::span) return span_features(e, index, training);
    std::vector<int32_t> a = tok.encode(e.text[0]), b;
    bool has_b = e.text.size() > 1;
    if (s.name == "wic") a = tok.encode(e.word + ": " + e.text[0]);
    if (s.name == "wsc") b = tok.encode(e.word + " / " + e.word2), has_b = true;
    else if (s.name == "multirc") a = tok.encode(e.text[0] + " " + e.text[1]), b = tok.encode(e.text[2]);
    else if (has_b) b = tok.encode(e.text[1]);
    Feature f = pair(std::move(a), std::move(b), has_b);
    f.example = index, f.label = e.label, f.score = float(e.score);
    out.push_back(std::move(f));
    return out;
  }

  // SQuAD: the context split on whitespace into words, each word tokenized on its own (so a
  // token maps back to a word), the question cut to max_query_length, doc-stride windows.
  std::vector<Feature> span_features(const TaskExample& e, int64_t index, bool training) const {
    const auto& fc = cfg.finetune;
    const std::string& context = e.text[1];
    std::vector<int64_t> word_start_char;  // per word
    std::vector<int64_t> char_to_word(context.size(), -1);
    {
      bool in_word = false;
      for (size_t i = 0; i < context.size(); ++i) {
        const char c = context[i];
        const bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r';
        if (!space && !in_word) word_start_char.push_back(int64_t(i));
        in_word = !space;
        char_to_word[i] = int64_t(word_start_char.size()) - 1;
      }
    }
    std::vector<int32_t> doc;
    std::vector<int64_t> doc_word;
    std::vector<int64_t> word_first_token(word_start_char.size()), word_last_token(word_start_char.size());
    for (size_t w = 0; w < word_start_char.size(); ++w) {
      const int64_t a = word_start_char[w];
      const int64_t b = w + 1 < word_start_char.size() ? word_start_char[w + 1] : int64_t(context.size());
      std::string word = context.substr(size_t(a), size_t(b - a));
      while (!word.empty() && (word.back() == ' ' || word.back() == '\n' || word.back() == '\t' || word.back() == '\r'))
        word.pop_back();
      word_first_token[w] = int64_t(doc.size());
      for (int32_t t : tok.encode(word)) doc.push_back(t), doc_word.push_back(int64_t(w));
      word_last_token[w] = int64_t(doc.size()) - 1;
    }
    int64_t ans_start = -1, ans_end = -1;  // document token positions of the first gold answer
    if (training && !e.impossible && !e.answers.empty()) {
      const int64_t c0 = e.answer_starts[0], c1 = c0 + int64_t(e.answers[0].size()) - 1;
      if (c0 >= 0 && c1 < int64_t(context.size()) && c1 >= c0) {
        const int64_t w0 = char_to_word[size_t(c0)], w1 = char_to_word[size_t(c1)];
        if (w0 >= 0 && w1 >= w0) ans_start = word_first_token[size_t(w0)], ans_end = word_last_token[size_t(w1)];
      }
      if (ans_start < 0) return {};  // an answer that does not line up with the text: skipped
    }
    auto q = cut(tok.encode(e.text[0]), size_t(fc.max_query_length));
    const int64_t room = fc.inputs_length - int64_t(q.size()) - 3;
    const auto windows = doc_windows(int64_t(doc.size()), room, fc.doc_stride);
    std::vector<Feature> out;
    for (size_t w = 0; w < windows.size(); ++w) {
      const auto [start, len] = windows[w];
      Feature f;
      f.example = index;
      f.ids.push_back(Tokenizer::kCls);
      f.ids.insert(f.ids.end(), q.begin(), q.end());
      f.ids.push_back(Tokenizer::kSep);
      f.types.assign(f.ids.size(), 0);
      f.token_to_word.assign(f.ids.size(), -1);
      f.max_context.assign(f.ids.size(), false);
      const int64_t offset = int64_t(f.ids.size());
      for (int64_t i = start; i < start + len; ++i) {
        f.ids.push_back(doc[size_t(i)]), f.types.push_back(1);
        f.token_to_word.push_back(doc_word[size_t(i)]);
        f.max_context.push_back(is_max_context(windows, w, i));
      }
      f.ids.push_back(Tokenizer::kSep), f.types.push_back(1), f.token_to_word.push_back(-1), f.max_context.push_back(false);
      if (ans_start >= 0 && ans_start >= start && ans_end < start + len)
        f.start = ans_start - start + offset, f.end = ans_end - start + offset;
      out.push_back(std::move(f));
    }
    return out;
  }

  struct Batch {
    Tensor ids, types;
  };
  static Batch batch(const std::vector<const Feature*>& fs) {
    size_t n = 0;
    for (auto* f : fs) n = std::max(n, f->ids.size());
    Tensor ids = torch::zeros({int64_t(fs.size()), int64_t(n)}, torch::kInt64), types = torch::zeros_like(ids);
    auto a = ids.accessor<int64_t, 2>(), t = types.accessor<int64_t, 2>();
    for (size_t i = 0; i < fs.size(); ++i)
      for (size_t j = 0; j < fs[i]->ids.size(); ++j) a[i][j] = fs[i]->ids[j], t[i][j] = fs[i]->types[j];
    return {ids, types};
  }

  // Head outputs: classification [B,K], regression [B], span [B,n,2], choice [B/options... ] flat [B].
  Tensor head_forward(EncoderModel& m, Head& h, const TaskSpec& s, const Batch& b) {
    const Tensor hidden = m->encode(b.ids, b.types);
    if (s.kind == TaskKind::span) return torch::matmul(hidden, h->w) + h->b;  // [B,n,2]
    Tensor pooled = m->pooled(hidden);
    if (m->is_training() && cfg.finetune.classifier_dropout > 0)
      pooled = torch::dropout(pooled, cfg.finetune.classifier_dropout, true);
    const Tensor out = torch::addmm(h->b, pooled, h->w);  // [B,K]
    return s.kind == TaskKind::classification ? out : out.squeeze(1);
  }

  TaskEval evaluate(EncoderModel& m, Head& h, const TaskSpec& s, const std::vector<TaskExample>& dev) {
    torch::NoGradGuard g;
    m->eval(), h->eval();
    std::vector<Feature> feats;
    for (size_t i = 0; i < dev.size(); ++i)
      for (auto& f : features(s, dev[i], int64_t(i), false)) feats.push_back(std::move(f));
    std::vector<int> labels(dev.size(), -1);
    std::vector<double> scores(dev.size(), 0);
    std::vector<std::vector<float>> choice(dev.size());
    std::vector<std::vector<SpanWindow>> windows(dev.size());
    const size_t bs = size_t(cfg.finetune.eval_batch_size);
    for (size_t b0 = 0; b0 < feats.size(); b0 += bs) {
      std::vector<const Feature*> fs;
      for (size_t i = b0; i < std::min(feats.size(), b0 + bs); ++i) fs.push_back(&feats[i]);
      const Tensor o = head_forward(m, h, s, batch(fs)).contiguous();
      for (size_t i = 0; i < fs.size(); ++i) {
        const Feature& f = *fs[i];
        if (s.kind == TaskKind::classification) labels[size_t(f.example)] = int(o[int64_t(i)].argmax().item<int64_t>());
        else if (s.kind == TaskKind::regression) scores[size_t(f.example)] = o[int64_t(i)].item<double>();
        else if (s.kind == TaskKind::multiple_choice) choice[size_t(f.example)].push_back(o[int64_t(i)].item<float>());
        else {
          SpanWindow w;
          w.token_to_word = f.token_to_word, w.max_context = f.max_context;
          const Tensor l = o[int64_t(i)].narrow(0, 0, int64_t(f.ids.size()));  // [n,2]
          const Tensor st = l.select(1, 0).contiguous(), en = l.select(1, 1).contiguous();
          w.start_logits.assign(st.data_ptr<float>(), st.data_ptr<float>() + st.numel());
          w.end_logits.assign(en.data_ptr<float>(), en.data_ptr<float>() + en.numel());
          windows[size_t(f.example)].push_back(std::move(w));
        }
      }
    }
    m->train(), h->train();
    TaskEval ev;
    ev.examples = int64_t(dev.size());
    std::vector<std::string> texts(dev.size());
    for (size_t i = 0; i < dev.size(); ++i) {
      if (s.kind == TaskKind::multiple_choice) {
        const auto& c = choice[i];
        labels[i] = c.empty() ? -1 : int(std::max_element(c.begin(), c.end()) - c.begin());
      }
      if (s.kind == TaskKind::span) {
        const SpanAnswer a = best_span(windows[i], cfg.finetune.n_best, cfg.finetune.max_answer_length);
        texts[i] = answer_text(dev[i].text[1], a);
        if (s.name == "squad20") {
          // The no-answer margin; the official script's best threshold decides below.
          ev.na_probs[dev[i].id] = a.start_word < 0 ? 1e9 : a.null_score - a.score;
        }
        ev.answers[dev[i].id] = texts[i];
        ev.predictions.push_back(texts[i]);
      } else if (s.kind == TaskKind::regression) {
        ev.predictions.push_back(fmt::format("{:.3f}", scores[i]));
      } else {
        const int l = labels[i];
        ev.predictions.push_back(l < 0 ? "" : s.name == "race" ? std::string(1, char('A' + l))
                                          : s.name == "copa"  ? target_names(s)[size_t(l)]
                                                              : s.labels[size_t(l)]);
      }
    }
    if (s.name == "squad20") {
      // Choose the threshold on dev as the official script does, then apply it: predictions
      // above it become "".
      std::vector<SquadQuestion> qs;
      for (const auto& e : dev) qs.push_back({e.id, e.answers, !e.impossible});
      std::map<std::string, double> f1;
      for (size_t i = 0; i < dev.size(); ++i) {
        double best = 0;
        std::vector<std::string> golds;
        for (const auto& a : dev[i].answers)
          if (!normalize_answer(a).empty()) golds.push_back(a);
        if (golds.empty()) golds = {""};
        for (const auto& g : golds) best = std::max(best, squad_f1_v2(g, texts[i]));
        f1[dev[i].id] = best;
      }
      const auto [best_f1, thresh] = best_no_answer_threshold(qs, ev.answers, f1, ev.na_probs);
      for (size_t i = 0; i < dev.size(); ++i)
        if (ev.na_probs[dev[i].id] > thresh) texts[i] = "", ev.answers[dev[i].id] = "", ev.predictions[i] = "";
      ev.metrics = score_task(s, dev, labels, scores, texts, &ev.na_probs);
      ev.metrics["threshold"] = thresh;
      (void)best_f1;
      return ev;
    }
    ev.metrics = score_task(s, dev, labels, scores, texts);
    return ev;
  }

  // The words of the predicted span, joined by single spaces.
  static std::string answer_text(const std::string& context, const SpanAnswer& a) {
    if (a.start_word < 0) return "";
    std::vector<std::string> words;
    std::string cur;
    for (char c : context) {
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        if (!cur.empty()) words.push_back(cur), cur.clear();
      } else {
        cur += c;
      }
    }
    if (!cur.empty()) words.push_back(cur);
    std::string s;
    for (int64_t w = a.start_word; w <= a.end_word && w < int64_t(words.size()); ++w) s += (s.empty() ? "" : " ") + words[size_t(w)];
    return s;
  }

  Tensor loss(const TaskSpec& s, const Tensor& o, const std::vector<const Feature*>& fs) {
    const int64_t B = int64_t(fs.size());
    if (s.kind == TaskKind::regression) {
      Tensor y = torch::empty({B});
      for (int64_t i = 0; i < B; ++i) y[i] = fs[size_t(i)]->score;
      return torch::mse_loss(o, y);
    }
    if (s.kind == TaskKind::span) {
      Tensor st = torch::empty({B}, torch::kInt64), en = torch::empty({B}, torch::kInt64);
      for (int64_t i = 0; i < B; ++i) st[i] = fs[size_t(i)]->start, en[i] = fs[size_t(i)]->end;
      // Padding positions must not win: their logits are masked out of the softmax.
      const Tensor pad = (batch(fs).ids == 0);
      const Tensor sl = o.select(2, 0).masked_fill(pad, -1e9), el = o.select(2, 1).masked_fill(pad, -1e9);
      return 0.5 * (torch::cross_entropy_loss(sl, st) + torch::cross_entropy_loss(el, en));
    }
    if (s.kind == TaskKind::multiple_choice) {
      const int64_t K = int64_t(s.name == "race" ? 4 : 2);
      Tensor y = torch::empty({B / K}, torch::kInt64);
      for (int64_t i = 0; i < B / K; ++i) y[i] = fs[size_t(i * K)]->label;
      return torch::cross_entropy_loss(o.view({B / K, K}), y);
    }
    Tensor y = torch::empty({B}, torch::kInt64);
    for (int64_t i = 0; i < B; ++i) y[i] = fs[size_t(i)]->label;
    return torch::cross_entropy_loss(o, y);
  }

  void run_task(const std::string& task) {
    const auto& fc = cfg.finetune;
    auto log = thx::log("finetune");
    const TaskSpec& s = task_spec(task);
    std::mt19937_64 rng(uint64_t(fc.seed));
    const Splits d = load_splits(fc, task, true, rng);
    torch::manual_seed(uint64_t(fc.seed));
    EncoderModel m = make_model();
    copy_params(m->named_parameters_by_path(), pretrained.checkpoint.params, pretrained.path);
    Head h(pc.model.d_model, outputs(s));
    // Training units: one feature, or (multiple choice) the options of one example together.
    std::vector<std::vector<Feature>> units;
    const auto t0 = now();
    for (size_t i = 0; i < d.train.examples.size(); ++i) {
      const auto& e = d.train.examples[i];
      if (s.kind != TaskKind::regression && s.kind != TaskKind::span && e.label < 0) continue;
      auto fs = features(s, e, int64_t(i), true);
      if (fs.empty()) continue;
      if (s.kind == TaskKind::multiple_choice) units.push_back(std::move(fs));
      else
        for (auto& f : fs) units.push_back({std::move(f)});
    }
    THX_CHECK(!units.empty(), "{}: no usable training examples", d.train.path);
    log->info("{}: {} training units from {} examples ({:.0f} s), {} dev examples", task, units.size(),
              d.train.examples.size(), seconds_since(t0), d.dev.examples.size());
    std::vector<std::pair<std::string, Tensor>> params = m->named_parameters_by_path();
    const std::string head_path = "heads/" + task + "/";
    std::vector<OptimizedParam> op = optimized_params(*m, params, cfg.optimizer);
    for (auto [name, p] : std::vector<std::pair<std::string, Tensor>>{{"w", h->w}, {"bias", h->b}}) {
      OptimizedParam o;
      o.path = head_path + name, o.param = p, o.view = p.sizes().vec();
      o.no_decay = name == "bias";
      op.push_back(o);
      params.emplace_back(o.path, p);
    }
    auto optimizer = make_optimizer(cfg.optimizer, op);
    TaskRecord rec;
    rec.task = task;
    std::ofstream metrics((fs::path(out) / "metrics.jsonl").string(), std::ios::app);
    std::vector<size_t> order(units.size());
    std::iota(order.begin(), order.end(), 0);
    size_t cursor = order.size();
    const auto start = now();
    double loss_sum = 0;
    int64_t loss_n = 0;
    m->train(), h->train();
    for (int64_t step = 1; step <= fc.steps; ++step) {
      std::vector<const Feature*> fs;
      for (int64_t i = 0; i < fc.batch_size; ++i) {
        if (cursor == order.size()) std::shuffle(order.begin(), order.end(), rng), cursor = 0;
        for (const auto& f : units[order[cursor++]]) fs.push_back(&f);
      }
      for (auto& [k, p] : params) p.mutable_grad() = Tensor();
      const Tensor l = loss(s, head_forward(m, h, s, batch(fs)), fs);
      l.backward();
      const double lr = learning_rate(cfg.optimizer, step, fc.steps);
      optimizer->step(lr);
      const double lv = l.item<double>();
      if (!std::isfinite(lv)) throw RunError(fmt::format("finetune {}: loss is {} at step {}", task, lv, step));
      loss_sum += lv, ++loss_n;
      if (step % fc.log_every == 0 || step == fc.steps) {
        const double el = seconds_since(start);
        log->info("{} step {}/{} loss {:.4f} lr {:.3g} ({:.2f} s/step, {} left)", task, step, fc.steps,
                  loss_sum / loss_n, lr, el / step, format_duration(el / step * double(fc.steps - step)));
        metrics << json{{"task", task}, {"step", step}, {"loss", loss_sum / loss_n}, {"lr", lr}}.dump() << "\n"
                << std::flush;
        loss_sum = 0, loss_n = 0;
      }
      if (step % fc.eval_every == 0 || step == fc.steps) {
        const auto e0 = now();
        const TaskEval ev = evaluate(m, h, s, d.dev.examples);
        const bool best = note_eval(rec, step, ev);
        log->info("step {} {} dev ({} examples, {:.0f} s): {}{}", step, task, ev.examples, seconds_since(e0),
                  show_metrics(ev.metrics), best ? " (best so far)" : "");
        if (best) write_predictions(out, s, d.dev.examples, ev);
        write_record(out, rec);
      }
    }
    write_params((fs::path(out) / (task + ".h5")).string(), params, pc.yaml, fc.steps);
    log->info("{}: best at step {}: {}", task, rec.best_step, show_metrics(rec.best));
  }

  void eval_task(const std::string& task, const Checkpoint& ck, const std::string& file) {
    const TaskSpec& s = task_spec(task);
    std::mt19937_64 rng(uint64_t(cfg.finetune.seed));
    const Splits d = load_splits(cfg.finetune, task, false, rng);
    EncoderModel m = make_model();
    copy_params(m->named_parameters_by_path(), ck.params, file);
    Head h(pc.model.d_model, outputs(s));
    copy_params({{"heads/" + task + "/w", h->w}, {"heads/" + task + "/bias", h->b}}, ck.params, file);
    const TaskEval ev = evaluate(m, h, s, d.dev.examples);
    TaskRecord rec;
    rec.task = task;
    note_eval(rec, ck.step, ev);
    write_predictions(out, s, d.dev.examples, ev);
    write_record(out, rec);
    thx::log("eval")->info("{} dev ({} examples): {}", task, ev.examples, show_metrics(ev.metrics));
  }
};

void prepare_out(const std::string& out) {
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) throw InputError(fmt::format("{}: cannot create the output directory ({})", out, ec.message()));
}

}  // namespace

void run_finetune(const FinetuneRunConfig& config, const Pretrained& pretrained, const std::string& out_dir) {
  // Everything that can be checked is checked before the output directory is touched.
  validate(config.finetune);
  if (pretrained.config.model.encoder_only())
    for (const auto& t : config.finetune.tasks)
      THX_CHECK(t != "record", "finetune.tasks: record needs an entity-ranking head, which BERT/ALBERT "
                               "fine-tuning does not have; T5 fine-tunes it as text to text");
  const std::string tokenizer = tokenizer_path(config.finetune, pretrained.config);
  THX_CHECK(fs::is_regular_file(tokenizer), "{}: no such tokenizer model (finetune.tokenizer)", tokenizer);
  for (const auto& t : config.finetune.tasks)
    for (const char* split : {"train", "dev"}) {
      const std::string path = task_path(config.finetune.data, t, split);
      THX_CHECK(fs::exists(path), "{}: not found (task {}, split {}; finetune.data is {})", path, t, split,
                config.finetune.data);
    }
  for (const auto& t : config.finetune.tasks)
    if (fs::exists(fs::path(out_dir) / (t + ".json")))
      throw InputError(fmt::format("{}: already has results for {}; choose a new --out (nothing was "
                                   "overwritten)", out_dir, t));
  prepare_out(out_dir);
  add_log_file((fs::path(out_dir) / "finetune.log").string());
  if (pretrained.config.model.encoder_only()) {
    EncoderRun r(config, pretrained, out_dir, tokenizer);
    for (const auto& t : config.finetune.tasks) r.run_task(t);
  } else {
    T5Run r(config, pretrained, out_dir, tokenizer);
    copy_params(r.model->named_parameters_by_path(), pretrained.checkpoint.params, pretrained.path);
    r.run();
  }
  remove_log_file();
}

// The fine-tuned parameters `thx eval --checkpoint` names for a task: the file itself, or in a
// `thx finetune` directory <task>.h5 (BERT/ALBERT, one run per task) or model.h5 (T5's mixture).
std::string finetuned_file(const std::string& checkpoint, const Pretrained& model, const std::string& task) {
  if (!fs::is_directory(checkpoint)) return checkpoint;
  return (fs::path(checkpoint) / (model.config.model.encoder_only() ? task + ".h5" : "model.h5")).string();
}

void run_eval(const FinetuneRunConfig& config, const Pretrained& model, const std::string& checkpoint,
              const std::string& out_dir) {
  // As run_finetune: every input is checked before the output directory is created.
  validate(config.finetune);
  const std::string tokenizer = tokenizer_path(config.finetune, model.config);
  THX_CHECK(fs::is_regular_file(tokenizer), "{}: no such tokenizer model (finetune.tokenizer)", tokenizer);
  for (const auto& t : config.finetune.tasks) {
    const std::string dev = task_path(config.finetune.data, t, "dev");
    THX_CHECK(fs::exists(dev), "{}: not found (task {}, split dev; finetune.data is {})", dev, t, config.finetune.data);
    const std::string file = finetuned_file(checkpoint, model, t);
    THX_CHECK(fs::is_regular_file(file), "{}: no fine-tuned parameters for task {} (--checkpoint)", file, t);
  }
  prepare_out(out_dir);
  if (model.config.model.encoder_only()) {
    EncoderRun r(config, model, out_dir, tokenizer);
    for (const auto& t : config.finetune.tasks) {
      const std::string file = finetuned_file(checkpoint, model, t);
      r.eval_task(t, load_checkpoint(file), file);
    }
  } else {
    const std::string file = finetuned_file(checkpoint, model, config.finetune.tasks.front());
    const Checkpoint ck = load_checkpoint(file);
    T5Run r(config, model, out_dir, tokenizer);
    copy_params(r.model->named_parameters_by_path(), ck.params, file);
    std::mt19937_64 rng(uint64_t(config.finetune.seed));
    for (const auto& t : config.finetune.tasks) {
      r.specs.push_back(&task_spec(t));
      r.data.push_back(load_splits(config.finetune, t, false, rng));
    }
    for (size_t k = 0; k < r.specs.size(); ++k) {
      const TaskEval ev = r.evaluate(k);
      TaskRecord rec;
      rec.task = r.specs[k]->name;
      note_eval(rec, ck.step, ev);
      write_predictions(out_dir, *r.specs[k], r.data[k].dev.examples, ev);
      write_record(out_dir, rec);
      thx::log("eval")->info("{} dev ({} examples): {}", rec.task, ev.examples, show_metrics(ev.metrics));
    }
  }
}

}  // namespace thx
