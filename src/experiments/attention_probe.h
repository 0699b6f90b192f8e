// attention_probe.h: `thx attention-probe`: one attention layer, its inputs, outputs and gradients in an HDF5
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
#pragma once
#include <cstdint>
#include <string>

#include "attention/config.h"
#include "common/config_tree.h"

namespace thx {

struct AttentionProbeOptions {
  int64_t d_model = 96, n = 8, m = 8, batch = 2, seed = 0;
  std::string mask = "none";  // none | padding | causal
  bool bias = false;
  std::string out;
};

// The layer a config tree's `attention:` block makes at d_model, and the resolved YAML.
struct AttentionProbe {
  AttentionDims dims;
  std::string yaml;
};
AttentionProbe load_attention_probe(const ConfigTree& tree, int64_t d_model);

// Build the layer from the seed, run it and write the file above.
void run_attention_probe(const AttentionProbe& probe, const AttentionProbeOptions& o);

}  // namespace thx
