#include "experiments/attention_probe.h"

#include <fmt/format.h>

#include "attention/factory.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/h5.h"
#include "common/log.h"
#include "common/runtime.h"
#include "training/spec.h"

namespace thx {

AttentionProbe load_attention_probe(const ConfigTree& tree, int64_t d_model) {
  AttentionProbe p;
  const RunConfig rc = load_config<RunConfig>(tree, [&](const RunConfig& c) {
    p.dims = resolve(c.attention, d_model, d_model, d_model, "attention");
  });
  p.yaml = cfg::to_yaml(rc);
  return p;
}

void run_attention_probe(const AttentionProbe& probe, const AttentionProbeOptions& o) {
  if (o.out.empty()) throw InputError("attention-probe: --out FILE is required");
  check_output_file(o.out, "--out");  // before the layer is built and run
  if (o.mask == "causal" && o.n != o.m)
    throw InputError(fmt::format("--mask causal needs --n equal to --m (got {} and {})", o.n, o.m));
  const AttentionDims& dims = probe.dims;
  const std::string& yaml = probe.yaml;
  {  // the logits and the weights with their gradients: b x h x n x m floats each, at least
    const double need = 4.0 * 4 * double(o.batch) * double(std::max(dims.h, dims.h_k)) * double(o.n) * double(o.m);
    const double have = physical_memory_bytes();
    if (have > 0 && need > have)
      throw InputError(fmt::format("{} {}: the attention weights of --batch {} x h {} x --n {} x --m {} and their "
                                   "gradients need at least {}, more than {} {}; nothing "
                                   "was allocated", o.n >= o.m ? "--n" : "--m", o.n >= o.m ? o.n : o.m, o.batch,
                                   std::max(dims.h, dims.h_k), o.n, o.m, format_gb(need), memory_owner(torch::kCPU),
                                   format_gb(have)));
  }
  auto log = thx::log("probe");
  log->info("resolved config:\n{}", yaml);
  log->info("layer: {}", dims.summary());

  torch::manual_seed(o.seed);
  auto layer = make_attention(dims);
  layer->eval();
  torch::Tensor X = torch::randn({o.batch, o.n, o.d_model}).requires_grad_(true);
  torch::Tensor M = torch::randn({o.batch, o.m, o.d_model}).requires_grad_(true);
  torch::Tensor G = torch::randn({o.batch, o.n, o.d_model});
  torch::Tensor B, mask_file, mask_bool;
  if (o.bias) B = torch::randn({1, dims.h, o.n, o.m});
  if (o.mask == "padding") {
    torch::Tensor len = torch::randint(1, o.m + 1, {o.batch, 1});
    mask_file = torch::arange(o.m).unsqueeze(0) < len;  // [b,m]
    mask_bool = mask_file.view({o.batch, 1, 1, o.m});
  } else if (o.mask == "causal") {
    mask_file = torch::ones({o.n, o.m}, torch::kBool).tril();  // [n,m]
    mask_bool = mask_file.view({1, 1, o.n, o.m});
  }
  torch::Tensor Y = layer->forward(X, M, B, mask_bool);
  (Y * G).sum().backward();

  H5Writer h5(o.out);
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
  for (auto [k, v] : {std::pair{"d_model", o.d_model}, std::pair{"n", o.n}, std::pair{"m", o.m},
                      std::pair{"batch", o.batch}, std::pair{"seed", o.seed}})
    h5.attr("/", k, std::to_string(v));
  h5.attr("/", "mask", o.mask);
  h5.attr("/", "bias", o.bias ? "true" : "false");
  h5.commit();
  log->info("wrote {}: Y {}, {} parameter tensors", o.out, c10::str(Y.sizes()), layer->named_parameters().size());
}

}  // namespace thx
