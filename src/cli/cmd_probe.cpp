// thx attention-probe: one attention layer, its inputs, outputs and gradients in HDF5
// (experiments/attention_probe.h has the file layout).
#include "cli/command.h"
#include "experiments/attention_probe.h"

namespace thx {
namespace {

struct ProbeCommand : Command {
  ConfigOptions config;
  AttentionProbeOptions o;

  explicit ProbeCommand(CLI::App& parent) {
    app = parent.add_subcommand(
        "attention-probe",
        "Build one attention layer from attention settings and a seed, run forward and the "
        "backward of sum(Y*G), and write inputs, parameters, Y and gradients to HDF5");
    config.add_to(app);
    app->add_option("--d-model", o.d_model, "d_X = d_M = d_Y")->capture_default_str()
        ->check(thx::positive_number());
    app->add_option("--n", o.n, "query positions")->capture_default_str()->check(thx::positive_number());
    app->add_option("--m", o.m, "memory positions")->capture_default_str()->check(thx::positive_number());
    app->add_option("--batch", o.batch, "batch size")->capture_default_str()->check(thx::positive_number());
    app->add_option("--seed", o.seed, "seed of the parameters and inputs")->capture_default_str();
    app->add_option("--mask", o.mask, "none | padding (random lengths per example) | causal (n = m)")
        ->check(CLI::IsMember({"none", "padding", "causal"}))
        ->capture_default_str();
    app->add_flag("--bias", o.bias, "add a random bias [1,h,n,m] to the logits");
    app->add_option("--out", o.out, "output HDF5 file (written atomically)")->type_name("FILE");
  }

  int run() override {
    const AttentionProbe probe = load_attention_probe(config.tree(), o.d_model);
    if (config.dump) return dump_config(probe.yaml);
    run_attention_probe(probe, o);
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> make_probe_command(CLI::App& parent) {
  return std::make_unique<ProbeCommand>(parent);
}

}  // namespace thx
