// thx step-probe: one optimizer step of a pretraining config, everything in it written to HDF5.
//
// Step-probe file layout (fixed; outside tools rely on it):
//   /batch/{inputs,decoder_inputs,targets}   int32, 0 = padding
//   /params_before/<path>, /grads/<path>, /params_after/<path>
//   /optimizer/<path>/{vr,vc} (factored) or /v, and /m with momentum
//   /loss (mean CE per target token + z-loss), /nll (mean CE), /learning_rate
//   attribute "config": the resolved YAML
#include "cli/command.h"
#include "common/fs.h"
#include "training/pretrain.h"

namespace thx {
namespace {

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
    ConfigTree tree = config.tree();
    const PretrainConfig pc = load_pretrain_config(tree);
    if (config.dump) return dump_config(pc.yaml);
    if (out.empty()) throw InputError("step-probe: --out FILE is required");
    check_output_file(out, "--out");  // before the data, the model and the step
    tree.told([&] { run_step_probe(pc, out); });  // (as pretrain's)
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> make_step_probe_command(CLI::App& parent) {
  return std::make_unique<StepProbeCommand>(parent);
}

}  // namespace thx
