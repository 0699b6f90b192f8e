// thx finetune: fine-tune a pretrained T5, BERT or ALBERT on GLUE, SuperGLUE, SQuAD and RACE
// (eval/finetune.h).
#include "cli/command.h"
#include "common/runtime.h"
#include "distributed/dist.h"
#include "distributed/launch.h"
#include "eval/finetune.h"

namespace thx {
namespace {

struct FinetuneCommand : Command {
  ConfigOptions config;
  std::string out;
  FinetuneOptions options;

  explicit FinetuneCommand(CLI::App& parent) {
    app = parent.add_subcommand("finetune",
                                "Fine-tune a pretrained T5 (text to text, one mixture) or BERT/ALBERT "
                                "(a head per task) and report each task's best dev evaluation");
    app->footer(task_help());
    config.add_to(app);
    app->add_option("--out", out, "output directory: <task>.json, predictions, log, checkpoints, fine-tuned parameters")
        ->type_name("DIR");
    app->add_flag("--resume", options.resume, "continue the run in --out from its newest checkpoint");
    app->add_option("--allow-config-change", options.allow_changes,
                    "with --resume: keys (or blocks) whose values may differ from the run's finetune.yaml")
        ->type_name("KEY")->expected(1, -1);
  }

  int run() override {
    ConfigTree tree = config.tree();
    const dist::DistributedConfig dc = dist::take_distributed_config(tree);
    const FinetuneRunConfig c = load_finetune_config(tree);
    if (config.dump) return dump_config(cfg::to_yaml(c));
    if (out.empty()) throw InputError("finetune: --out DIR is required");
    dist::start(dc, cfg::to_yaml(c));  // under torchrun: join the group, same config on every rank
    const Pretrained p = load_pretrained(c.finetune.pretrained);
    const int stopped_by = tree.told([&] { return run_finetune(c, p, out, options); });  // (as pretrain's)
    if (stopped_by) {  // no result: the shell sees the signal (128 + N)
      if (dist::rank() == 0)
        std::fprintf(stderr, "%s: interrupted by %s, checkpoint saved; no result yet; continue with the same "
                             "command and --resume\n", out.c_str(), signal_name(stopped_by).c_str());
      return 128 + stopped_by;
    }
    if (dist::rank() != 0) return 0;
    std::string files;
    for (const auto& t : c.finetune.tasks) files += (files.empty() ? "" : ", ") + out + "/" + t + ".json";
    std::printf("%s: fine-tuned %s; results in %s\n", out.c_str(), p.path.c_str(), files.c_str());
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> make_finetune_command(CLI::App& parent) { return std::make_unique<FinetuneCommand>(parent); }

}  // namespace thx
