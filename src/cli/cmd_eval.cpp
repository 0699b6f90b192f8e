// thx eval: a fine-tuned checkpoint evaluated on the tasks' dev sets (eval/finetune.h).
#include <filesystem>

#include "cli/command.h"
#include "eval/finetune.h"
#include "training/pretrain.h"

namespace thx {
namespace {

struct EvalCommand : Command {
  ConfigOptions config;
  std::string checkpoint, out;

  explicit EvalCommand(CLI::App& parent) {
    app = parent.add_subcommand("eval", "Evaluate a fine-tuned checkpoint on the tasks' dev sets (with the fine-tuning "
                                        "--config), or without --config a pretraining run or checkpoint on its data's "
                                        "held-out split, as the run did");
    app->footer(task_help());
    config.add_to(app);
    app->add_option("--checkpoint", checkpoint,
                    "fine-tuned parameters: model.h5 (T5), <task>.h5 (BERT/ALBERT) or the finetune "
                    "output directory")
        ->type_name("PATH");
    app->add_option("--out", out, "output directory (default: beside the checkpoint, eval/)")->type_name("DIR");
  }

  int run() override {
    if (config.files.empty() && config.sets.empty() && !config.dump) return heldout();
    const ConfigTree tree = config.tree();
    const FinetuneRunConfig c = load_finetune_config(tree);
    if (config.dump) return dump_config(cfg::to_yaml(c));
    if (checkpoint.empty()) throw InputError("eval: --checkpoint PATH is required");
    if (!std::filesystem::exists(checkpoint)) throw InputError(fmt::format("{}: no such checkpoint", checkpoint));
    // (A check of the recipe against the model names the file and line of its key.)
    tree.told([&] { run_eval(c, load_pretrained(c.finetune.pretrained), checkpoint, out); });
    return 0;
  }

  // A pretraining checkpoint's held-out evaluation, as its run made it: the run's own line.
  int heldout() const {
    if (checkpoint.empty()) throw InputError("eval: --checkpoint PATH is required");
    if (!std::filesystem::exists(checkpoint)) throw InputError(fmt::format("{}: no such checkpoint", checkpoint));
    if (!out.empty())
      throw InputError("eval: --out goes with --config (a fine-tuned model's results); a pretraining checkpoint's "
                       "held-out evaluation is one line on stdout");
    const Pretrained p = load_pretrained(checkpoint);
    const PretrainResult r = evaluate_pretrained(p.config, p.checkpoint.params, p.checkpoint.step, p.path);
    std::printf("%s (%lld examples of the held-out split)\n", result_line(p.config, p.path, r).c_str(),
                (long long)p.config.eval.examples);
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> make_eval_command(CLI::App& parent) { return std::make_unique<EvalCommand>(parent); }

}  // namespace thx
