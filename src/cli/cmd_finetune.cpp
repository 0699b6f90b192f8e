// thx finetune, thx eval, thx score squad: downstream tasks (src/eval/).
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "training/spec.h"
#include "common/fs.h"
#include "common/log.h"
#include "eval/finetune.h"
#include "training/pretrain.h"

namespace thx {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

FinetuneRunConfig load_finetune_config(const ConfigOptions& options, std::string* yaml) {
  ConfigTree tree = options.tree();
  const FinetuneRunConfig c = load_config<FinetuneRunConfig>(tree, [](const FinetuneRunConfig& c) {
    validate(c.finetune);
    validate(c.optimizer);
    validate(c.checkpoint);
  });
  if (yaml) *yaml = cfg::to_yaml(c);
  return c;
}

const char* const kTaskHelp =
    "Tasks: cola sst2 mrpc stsb qqp mnli mnli_mm qnli rte wnli ax (GLUE); boolq cb copa multirc "
    "record rte_sg wic wsc axb axg (SuperGLUE); squad11 squad20; race.";

struct FinetuneCommand : Command {
  ConfigOptions config;
  std::string out;
  FinetuneOptions options;

  explicit FinetuneCommand(CLI::App& parent) {
    app = parent.add_subcommand("finetune",
                                "Fine-tune a pretrained T5 (text to text, one mixture) or BERT/ALBERT "
                                "(a head per task) and report each task's best dev evaluation");
    app->footer(kTaskHelp);
    config.add_to(app);
    app->add_option("--out", out, "output directory: <task>.json, predictions, log, checkpoints, fine-tuned parameters")
        ->type_name("DIR");
    app->add_flag("--resume", options.resume, "continue the run in --out from its newest checkpoint");
    app->add_option("--allow-config-change", options.allow_changes,
                    "with --resume: keys (or blocks) whose values may differ from the run's finetune.yaml")
        ->type_name("KEY")->expected(1, -1);
  }

  int run() override {
    std::string yaml;
    const FinetuneRunConfig c = load_finetune_config(config, &yaml);
    if (config.dump) {
      std::fputs(yaml.c_str(), stdout);
      return 0;
    }
    if (out.empty()) throw InputError("finetune: --out DIR is required");
    const Pretrained p = load_pretrained(c.finetune.pretrained);
    if (!run_finetune(c, p, out, options)) {
      std::printf("%s: interrupted; --resume continues\n", out.c_str());
      return 0;
    }
    std::printf("%s: fine-tuned %s; results in %s/<task>.json\n", out.c_str(), p.path.c_str(), out.c_str());
    return 0;
  }
};

struct EvalCommand : Command {
  ConfigOptions config;
  std::string checkpoint, out;

  explicit EvalCommand(CLI::App& parent) {
    app = parent.add_subcommand("eval", "Evaluate a fine-tuned checkpoint on the tasks' dev sets");
    app->footer(kTaskHelp);
    config.add_to(app);
    app->add_option("--checkpoint", checkpoint,
                    "fine-tuned parameters: model.h5 (T5), <task>.h5 (BERT/ALBERT) or the finetune "
                    "output directory")
        ->type_name("PATH");
    app->add_option("--out", out, "output directory (default: beside the checkpoint, eval/)")->type_name("DIR");
  }

  int run() override {
    std::string yaml;
    const FinetuneRunConfig c = load_finetune_config(config, &yaml);
    if (config.dump) {
      std::fputs(yaml.c_str(), stdout);
      return 0;
    }
    if (checkpoint.empty()) throw InputError("eval: --checkpoint PATH is required");
    if (!fs::exists(checkpoint)) throw InputError(fmt::format("{}: no such checkpoint", checkpoint));
    const std::string dir = out.empty() ? ((fs::is_directory(checkpoint) ? fs::path(checkpoint)
                                                                        : fs::path(checkpoint).parent_path()) /
                                           "eval").string()
                                        : out;
    const Pretrained p = load_pretrained(c.finetune.pretrained);
    run_eval(c, p, checkpoint, dir);
    return 0;
  }
};

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

struct ScoreCommand : Command {
  std::string data, predictions, na_probs;
  bool as_json = false;

  explicit ScoreCommand(CLI::App& parent) {
    app = parent.add_subcommand("score", "Score a predictions file with a task's official rules");
    auto* squad = app->add_subcommand("squad", "SQuAD v1.1 or v2.0 (read from the data file) EM and F1");
    squad->add_option("--data", data, "the SQuAD dev JSON")->type_name("FILE")->required();
    squad->add_option("--predictions", predictions, "{question id: answer} JSON")->type_name("FILE")->required();
    squad->add_option("--na-probs", na_probs, "v2.0: {question id: no-answer probability}, for the best threshold")
        ->type_name("FILE");
    squad->add_flag("--json", as_json, "print the scores as JSON");
    app->require_subcommand(1);
  }

  int run() override {
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
    if (!na_probs.empty()) {
      const json j = read_json(na_probs);
      if (!j.is_object()) throw InputError(fmt::format("{}: expected {{question id: probability}}", na_probs));
      for (const auto& [id, v] : j.items()) {
        if (!v.is_number()) throw InputError(fmt::format("{}: the value for '{}' is not a number", na_probs, id));
        na[id] = v.get<double>();
      }
    }
    const SquadScore s = score_squad(qs, preds, version, na_probs.empty() ? nullptr : &na);
    if (as_json) {
      json j{{"version", version}, {"exact", s.exact}, {"f1", s.f1}, {"total", s.total}, {"missing", s.missing}};
      if (s.has_ans_f1) j["HasAns_exact"] = *s.has_ans_exact, j["HasAns_f1"] = *s.has_ans_f1, j["HasAns_total"] = s.has_ans_total;
      if (s.no_ans_f1) j["NoAns_exact"] = *s.no_ans_exact, j["NoAns_f1"] = *s.no_ans_f1, j["NoAns_total"] = s.no_ans_total;
      if (s.best_f1) j["best_exact"] = *s.best_exact, j["best_exact_thresh"] = *s.best_exact_thresh,
                     j["best_f1"] = *s.best_f1, j["best_f1_thresh"] = *s.best_f1_thresh;
      std::printf("%s\n", j.dump(1).c_str());
    } else {
      std::printf("SQuAD v%s: %lld questions: EM %.2f  F1 %.2f\n", version.c_str(), (long long)s.total, s.exact, s.f1);
      if (s.has_ans_f1) std::printf("  HasAns (%lld): EM %.2f  F1 %.2f\n", (long long)s.has_ans_total, *s.has_ans_exact, *s.has_ans_f1);
      if (s.no_ans_f1) std::printf("  NoAns (%lld): EM %.2f  F1 %.2f\n", (long long)s.no_ans_total, *s.no_ans_exact, *s.no_ans_f1);
      if (s.best_f1)
        std::printf("  best threshold: EM %.2f (at %.4g)  F1 %.2f (at %.4g)\n", *s.best_exact, *s.best_exact_thresh,
                    *s.best_f1, *s.best_f1_thresh);
    }
    if (s.missing)
      std::fprintf(stderr, "%s: no prediction for %lld of %lld questions (scored 0)\n", predictions.c_str(),
                   (long long)s.missing, (long long)s.total);
    if (unknown)
      std::fprintf(stderr, "%s: %lld ids are not questions of %s (ignored)\n", predictions.c_str(), (long long)unknown,
                   data.c_str());
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> make_finetune_command(CLI::App& parent) { return std::make_unique<FinetuneCommand>(parent); }
std::unique_ptr<Command> make_eval_command(CLI::App& parent) { return std::make_unique<EvalCommand>(parent); }
std::unique_ptr<Command> make_score_command(CLI::App& parent) { return std::make_unique<ScoreCommand>(parent); }

}  // namespace thx
