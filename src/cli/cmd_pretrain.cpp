// thx pretrain: T5 span-corruption or BERT/ALBERT MLM pretraining (training/pretrain.h).
#include "cli/command.h"
#include "common/runtime.h"
#include "distributed/dist.h"
#include "distributed/launch.h"
#include "training/pretrain.h"

namespace thx {
namespace {

struct PretrainCommand : Command {
  ConfigOptions config;
  std::string run_dir;
  bool resume = false;
  std::vector<std::string> allow_changes;

  explicit PretrainCommand(CLI::App& parent) {
    app = parent.add_subcommand("pretrain", "Pretrain T5 on span corruption (section 7.1) or BERT/ALBERT "
                                            "on MLM + SOP/NSP (7.2, 7.3), with checkpoints, held-out "
                                            "metrics and exact --resume");
    config.add_to(app);
    app->add_option("--run-dir", run_dir, "run directory: config, metrics, log, checkpoints")
        ->type_name("DIR");
    app->add_flag("--resume", resume, "continue from the newest checkpoint in --run-dir");
    app->add_option("--allow-config-change", allow_changes,
                    "with --resume: keys (or blocks) whose values may differ from the run's stored config; "
                    "the change is recorded in config_changes.jsonl")
        ->type_name("KEY")->expected(1, -1);
  }

  int run() override {
    ConfigTree tree = config.tree();
    const dist::DistributedConfig dc = dist::take_distributed_config(tree);
    const PretrainConfig pc = load_pretrain_config(tree);
    if (config.dump) return dump_config(pc.yaml);
    if (run_dir.empty()) throw InputError("pretrain: --run-dir DIR is required");
    dist::start(dc, pc.yaml);  // under torchrun: join the group, same config on every rank
    // (A check after the config was read, on the data or the memory, names the file and line too.)
    const PretrainResult r = tree.told([&] { return run_pretrain(pc, run_dir, resume, allow_changes); });
    if (r.interrupted) {  // no result: the run is not done; the shell sees the signal (128 + N)
      if (dist::rank() == 0)
        std::fprintf(stderr, "%s: interrupted by %s at step %lld of %lld, checkpoint saved; no result yet; "
                             "continue with the same command and --resume\n",
                     run_dir.c_str(), signal_name(r.signal).c_str(), (long long)r.step, (long long)pc.train.steps);
      return 128 + r.signal;
    }
    if (dist::rank() == 0) std::printf("%s\n", result_line(pc, run_dir, r).c_str());
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> make_pretrain_command(CLI::App& parent) {
  return std::make_unique<PretrainCommand>(parent);
}

}  // namespace thx
