// thx pretrain and thx step-probe: T5 span-corruption pretraining.
//
// Step-probe file layout (fixed; outside tools rely on it):
//   /batch/{inputs,decoder_inputs,targets}   int32, 0 = padding
//   /params_before/<path>, /grads/<path>, /params_after/<path>
//   /optimizer/<path>/{vr,vc} (factored) or /v, and /m with momentum
//   /loss (mean CE per target token + z-loss), /nll (mean CE), /learning_rate
//   attribute "config": the resolved YAML
#include <filesystem>

#include "attention/config.h"
#include "cli/command.h"
#include "common/log.h"
#include "models/t5.h"
#include "training/pretrain.h"

namespace thx {
namespace {

PretrainConfig load_pretrain_config(const ConfigOptions& options, std::string* yaml_out) {
  ConfigTree tree = options.tree();
  return load_pretrain_config(tree, yaml_out);
}

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
    std::string yaml;
    const PretrainConfig pc = load_pretrain_config(config, &yaml);
    if (config.dump) {
      std::fputs(yaml.c_str(), stdout);
      return 0;
    }
    if (run_dir.empty()) throw InputError("pretrain: --run-dir DIR is required");
    const PretrainResult r = run_pretrain(pc, run_dir, resume, allow_changes);
    std::string extra;
    if (r.mlm_accuracy) extra += fmt::format(", MLM accuracy {:.2f}%", 100 * *r.mlm_accuracy);
    if (r.sentence_accuracy)
      extra += fmt::format(", {} accuracy {:.2f}%", pc.data.sentence_task, 100 * *r.sentence_accuracy);
    std::printf("%s step %lld held-out %sln(PPL) %.4f%s%s\n", run_dir.c_str(), (long long)r.step,
                r.mlm_accuracy ? "MLM " : "", r.ln_ppl, extra.c_str(),
                r.interrupted ? " (interrupted; --resume continues)" : "");
    return 0;
  }
};

struct StepProbeCommand : Command {
  ConfigOptions config;
  std::string out;

  explicit StepProbeCommand(CLI::App& parent) {
    app = parent.add_subcommand("step-probe",
                                "Run exactly one optimizer step on the first batch and write the "
                                "batch, parameters before and after, gradients, optimizer state "
                                "and loss to HDF5");
    config.add_to(app);
    app->add_option("--out", out, "output HDF5 file (written atomically)")->type_name("FILE");
  }

  int run() override {
    std::string yaml;
    const PretrainConfig pc = load_pretrain_config(config, &yaml);
    if (config.dump) {
      std::fputs(yaml.c_str(), stdout);
      return 0;
    }
    if (out.empty()) throw InputError("step-probe: --out FILE is required");
    run_step_probe(pc, out);
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> make_pretrain_command(CLI::App& parent) {
  return std::make_unique<PretrainCommand>(parent);
}
std::unique_ptr<Command> make_step_probe_command(CLI::App& parent) {
  return std::make_unique<StepProbeCommand>(parent);
}

}  // namespace thx
