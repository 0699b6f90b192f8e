#include "eval/finetune_config.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "distributed/dist.h"
#include "training/run_dir.h"

namespace thx {
namespace fs = std::filesystem;
using json = nlohmann::json;

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
  positive(c.log_every, "log_every");
  if (c.eval_batch_size < 0)
    throw ConfigError(path + ".eval_batch_size", fmt::format("{} must be 0 (batch_size / ranks) or positive", c.eval_batch_size));
  positive(c.mixing_cap, "mixing_cap");
  if (c.targets_length < 2)  // (cut() takes a room of 0 as no cut: a target would keep every token)
    throw ConfigError(path + ".targets_length",
                      fmt::format("{} must be at least 2 (a target's token and EOS)", c.targets_length));
  positive(c.n_best, "n_best"), positive(c.max_answer_length, "max_answer_length");
  positive(c.max_query_length, "max_query_length"), positive(c.doc_stride, "doc_stride");
  if (c.inputs_length < 16) throw ConfigError(path + ".inputs_length", fmt::format("{} must be at least 16", c.inputs_length));
  const bool span = std::any_of(c.tasks.begin(), c.tasks.end(), [](const std::string& t) { return task_spec(t).kind == TaskKind::span; });
  if (span && c.max_query_length + 8 > c.inputs_length)  // only the span head's windows cut the question
    throw ConfigError(path + ".max_query_length",
                      fmt::format("{} leaves no room for the SQuAD context in inputs_length {} (lower "
                                  "max_query_length or raise inputs_length)", c.max_query_length, c.inputs_length));
  if (c.eval_examples < 0) throw ConfigError(path + ".eval_examples", "must be 0 (all) or positive");
  if (!c.model_type.empty() && c.model_type != "t5" && c.model_type != "bert" && c.model_type != "albert")
    throw ConfigError(path + ".model_type", fmt::format("'{}'; allowed: t5, bert, albert, or \"\" (any)", c.model_type));
  if (c.max_train_examples < 0) throw ConfigError(path + ".max_train_examples", "must be 0 (all) or positive");
  if (!(c.dropout >= 0 && c.dropout < 1)) throw ConfigError(path + ".dropout", fmt::format("{} is not in [0, 1)", c.dropout));
  if (!(c.classifier_dropout >= 0 && c.classifier_dropout < 1))
    throw ConfigError(path + ".classifier_dropout", fmt::format("{} is not in [0, 1)", c.classifier_dropout));
  if (c.attention_dropout && !(*c.attention_dropout >= 0 && *c.attention_dropout < 1))
    throw ConfigError(path + ".attention_dropout", fmt::format("{} is not in [0, 1)", *c.attention_dropout));
  for (auto [key, v] : {std::pair{".precision", &c.precision}, std::pair{".eval_precision", &c.eval_precision}})
    if (!v->empty() && *v != "fp32" && *v != "bf16")
      throw ConfigError(path + key, fmt::format("'{}' is not allowed; allowed: fp32, bf16 (or \"\": {})", *v,
                                                std::string(key) == ".precision" ? "the pretrained run's train.precision"
                                                                                 : "finetune.precision"));
}

std::string train_precision(const FinetuneConfig& c, const PretrainConfig& pretrained) {
  return c.precision.empty() ? pretrained.train.precision : c.precision;
}
std::string eval_precision(const FinetuneConfig& c, const PretrainConfig& pretrained) {
  return c.eval_precision.empty() ? train_precision(c, pretrained) : c.eval_precision;
}

int64_t eval_rows(const FinetuneConfig& c) {
  return c.eval_batch_size > 0 ? c.eval_batch_size : std::max<int64_t>(1, c.batch_size / dist::world_size());
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

FinetuneRunConfig load_finetune_config(ConfigTree tree) {
  tree.resolve_paths({"finetune.pretrained", "finetune.tokenizer", "finetune.data"});  // config_tree.h's rule
  return load_config<FinetuneRunConfig>(tree, [](const FinetuneRunConfig& c) {
    validate(c.finetune);
    validate(c.optimizer);
    validate(c.checkpoint);
  });
}

namespace {

// A fine-tuning checkpoint (its stored config is a recipe: a finetune block) where a pretrained
// model is asked for: one line naming the pretrained model it started from, not the first key
// a pretraining config does not know.
void refuse_fine_tuned(const std::string& stored, const std::string& path, const char* what) {
  YAML::Node recipe;
  try {
    recipe = YAML::Load(stored);
  } catch (const YAML::Exception&) {
    return;  // (the pretraining config's reader says what is wrong with it)
  }
  if (!recipe.IsMap() || !recipe["finetune"]) return;
  const YAML::Node from = recipe["finetune"]["pretrained"];
  throw InputError(fmt::format("{}: a fine-tuning {}, not a pretraining one; give the pretraining run or checkpoint{}",
                               path, what, from && from.IsScalar() ? " it started from, " + from.Scalar() : ""));
}

}  // namespace

Pretrained load_pretrained(const std::string& setting) {
  Pretrained p;
  if (const fs::path recipe = fs::path(setting) / kFinetuneConfigFile; fs::is_directory(setting) && fs::exists(recipe))
    refuse_fine_tuned(read_file(recipe.string()), setting, "run's folder");
  p.path = resolve_checkpoint(setting);
  p.checkpoint = load_checkpoint(p.path);
  if (p.checkpoint.config.empty())
    throw InputError(fmt::format("{}: carries no configuration (attribute 'config')", p.path));
  refuse_fine_tuned(p.checkpoint.config, p.path, "checkpoint");
  p.config = pretrain_config_from_text(p.checkpoint.config, p.path + " (stored config)");
  return p;
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
  return with_dropouts(std::move(pc), c.dropout, c.attention_dropout.value_or(c.dropout));
}

void skip_misplaced_answers(TaskData& d) {
  int64_t answerable = 0, misplaced = 0;
  std::vector<TaskExample> kept;
  for (auto& e : d.examples) {
    const bool answered = !e.impossible && !e.answers.empty();
    answerable += answered;
    if (answered && e.answer_starts[0] < 0) {
      ++misplaced;
      continue;
    }
    kept.push_back(std::move(e));
  }
  d.examples = std::move(kept);
  if (misplaced == 0) return;
  THX_CHECK(misplaced < answerable, "{}: none of its {} training answers matches its context at answer_start (a "
            "character offset): is this a SQuAD file?", d.path, answerable);
  thx::log("finetune")->warn("{}: skipped {} of {} training questions whose answer does not match the context at "
                             "answer_start (past its end, or other text there), as BERT's run_squad.py does",
                             d.path, misplaced, answerable);
}

Splits read_splits(const FinetuneConfig& c, const std::string& task, bool need_train) {
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
    if (task_spec(task).kind == TaskKind::span) skip_misplaced_answers(s.train);
  }
  return s;
}

Splits shuffled(Splits s, const FinetuneConfig& c, std::mt19937_64& rng) {
  if (s.train.examples.empty()) return s;
  std::shuffle(s.train.examples.begin(), s.train.examples.end(), rng);
  if (c.max_train_examples > 0 && int64_t(s.train.examples.size()) > c.max_train_examples)
    s.train.examples.resize(size_t(c.max_train_examples));
  return s;
}

void save_finetune_state(Checkpoint& c, const std::mt19937_64& sampler, const std::vector<TaskRecord>& records) {
  std::ostringstream s;
  s << sampler;
  c.extra["sampler"] = s.str();
  json r = json::array();
  for (const auto& rec : records) r.push_back(to_json(rec));
  c.extra["records"] = r.dump();
}

void load_finetune_state(const Checkpoint& c, std::mt19937_64& sampler, std::vector<TaskRecord>& records) {
  for (const char* k : {"sampler", "records"})
    if (!c.extra.count(k)) throw InputError(fmt::format("no /state/extra/{}: not a fine-tuning checkpoint of thx", k));
  std::istringstream in(c.extra.at("sampler"));
  std::mt19937_64 g;
  if (!(in >> g)) throw InputError("/state/extra/sampler: not a generator state");
  const json r = json::parse(c.extra.at("records"));  // a parse error: the loop names the file
  if (!r.is_array() || r.size() != records.size())
    throw InputError(fmt::format("/state/extra/records: {} task records, the run has {}", r.is_array() ? r.size() : 0,
                                 records.size()));
  std::vector<TaskRecord> out;
  for (size_t k = 0; k < records.size(); ++k) {
    out.push_back(task_record_from_json(r[k]));
    out.back().steps = records[k].steps;  // this run's plan (a checkpoint from before "steps" lacks it)
    if (out.back().task != records[k].task)
      throw InputError(fmt::format("/state/extra/records: task {} is '{}', the run's is '{}'", k, out.back().task,
                                   records[k].task));
  }
  sampler = g, records = std::move(out);
}

std::vector<int32_t> cut(std::vector<int32_t> v, size_t max, bool* was_cut) {
  const bool cutting = max > 0 && v.size() > max;
  if (was_cut) *was_cut = cutting;
  if (cutting) v.resize(max);
  return v;
}

double percent_of(int64_t n, size_t total) { return total > 0 ? 100.0 * double(n) / double(total) : 0.0; }

}  // namespace thx
