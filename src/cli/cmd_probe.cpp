// thx attention-probe: one attention layer, its inputs, outputs and gradients in an HDF5
// file, so that anyone can check thx's layer against an implementation of their own.
//
// File layout (fixed; outside scripts rely on it):
//   /inputs/X [b,n,d] /inputs/M [b,m,d] /inputs/G [b,n,d]     float32
//   /inputs/bias [1,h,n,m]                                     float32, with --bias
//   /inputs/mask  uint8, 1 = may attend: [b,m] (padding) or [n,m] (causal)
//   /params/<paper name>, /grads/<paper name>                  float32, paper shapes
//   /input_grads/X, /input_grads/M                             float32
//   /outputs/Y [b,n,d]                                         float32
//   attributes on "/": config (resolved YAML), dims, d_model, n, m, batch, seed, mask, bias
// The loss whose gradients are stored is sum(Y * G). Dropout is off (eval mode).
#include "attention/factory.h"
#include "cli/command.h"
#include "training/spec.h"
#include "common/h5.h"
#include "common/log.h"

namespace thx {
namespace {

struct ProbeCommand : Command {
  ConfigOptions config;
  int64_t d_model = 96, n = 8, m = 8, batch = 2, seed = 0;
  std::string mask = "none", out;
  bool bias = false;

  explicit ProbeCommand(CLI::App& parent) {
    app = parent.add_subcommand(
        "attention-probe",
        "Build one attention layer from attention settings and a seed, run forward and the "
        "backward of sum(Y*G), and write inputs, parameters, Y and gradients to HDF5");
    config.add_to(app);
    app->add_option("--d-model", d_model, "d_X = d_M = d_Y")->capture_default_str()
        ->check(CLI::PositiveNumber);
    app->add_option("--n", n, "query positions")->capture_default_str()->check(CLI::PositiveNumber);
    app->add_option("--m", m, "memory positions")->capture_default_str()->check(CLI::PositiveNumber);
    app->add_option("--batch", batch, "batch size")->capture_default_str()->check(CLI::PositiveNumber);
    app->add_option("--seed", seed, "seed of the parameters and inputs")->capture_default_str();
    app->add_option("--mask", mask, "none | padding (random lengths per example) | causal (n = m)")
        ->check(CLI::IsMember({"none", "padding", "causal"}))
        ->capture_default_str();
    app->add_flag("--bias", bias, "add a random bias [1,h,n,m] to the logits");
    app->add_option("--out", out, "output HDF5 file (written atomically)")->type_name("FILE");
  }

  int run() override {
    const ConfigTree tree = config.tree();
    AttentionDims dims;
    const RunConfig rc = load_config<RunConfig>(tree, [&](const RunConfig& c) {
      dims = resolve(c.attention, d_model, d_model, d_model, "attention");
    });
    const std::string yaml = cfg::to_yaml(rc);
    if (config.dump) {
      std::fputs(yaml.c_str(), stdout);
      return 0;
    }
    if (out.empty()) throw InputError("attention-probe: --out FILE is required");
    if (mask == "causal" && n != m)
      throw InputError(fmt::format("--mask causal needs --n equal to --m (got {} and {})", n, m));
    auto log = thx::log("probe");
    log->info("resolved config:\n{}", yaml);
    log->info("layer: {}", dims.summary());

    torch::manual_seed(seed);
    auto layer = make_attention(dims);
    layer->eval();
    torch::Tensor X = torch::randn({batch, n, d_model}).requires_grad_(true);
    torch::Tensor M = torch::randn({batch, m, d_model}).requires_grad_(true);
    torch::Tensor G = torch::randn({batch, n, d_model});
    torch::Tensor B, mask_file, mask_bool;
    if (bias) B = torch::randn({1, dims.h, n, m});
    if (mask == "padding") {
      torch::Tensor len = torch::randint(1, m + 1, {batch, 1});
      mask_file = torch::arange(m).unsqueeze(0) < len;  // [b,m]
      mask_bool = mask_file.view({batch, 1, 1, m});
    } else if (mask == "causal") {
      mask_file = torch::ones({n, m}, torch::kBool).tril();  // [n,m]
      mask_bool = mask_file.view({1, 1, n, m});
    }
    torch::Tensor Y = layer->forward(X, M, B, mask_bool);
    (Y * G).sum().backward();

    H5Writer h5(out);
    h5.write("/inputs/X", X);
    h5.write("/inputs/M", M);
    h5.write("/inputs/G", G);
    if (B.defined()) h5.write("/inputs/bias", B);
    if (mask_file.defined()) h5.write("/inputs/mask", mask_file.to(torch::kUInt8));
    for (const auto& p : layer->named_parameters()) {
      h5.write("/params/" + p.key(), p.value());
      h5.write("/grads/" + p.key(), p.value().grad());
    }
    h5.write("/input_grads/X", X.grad());
    h5.write("/input_grads/M", M.grad());
    h5.write("/outputs/Y", Y);
    h5.attr("/", "config", yaml);
    h5.attr("/", "dims", dims.summary());
    h5.attr("/", "variant", dims.name());
    for (auto [k, v] : {std::pair{"d_model", d_model}, std::pair{"n", n}, std::pair{"m", m},
                        std::pair{"batch", batch}, std::pair{"seed", seed}})
      h5.attr("/", k, std::to_string(v));
    h5.attr("/", "mask", mask);
    h5.attr("/", "bias", bias ? "true" : "false");
    h5.commit();
    log->info("wrote {}: Y {}, {} parameter tensors", out, c10::str(Y.sizes()), layer->named_parameters().size());
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> make_probe_command(CLI::App& parent) {
  return std::make_unique<ProbeCommand>(parent);
}

}  // namespace thx
