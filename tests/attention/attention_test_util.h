// attention_test_util.h: test cases for the attention family, and running a production
// layer and the paper reference on the same parameters.
#pragma once
#include <torch/torch.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "attention/factory.h"
#include "reference/paper_attention.h"

namespace thx::test {

// Small, deliberately unequal sizes: d_X != d_M != d_Y, h_k != h != h_v, d_k != d_v, n != m.
constexpr int64_t kDX = 10, kDM = 9, kDY = 11, kB = 2, kN = 7, kM = 5;

struct AttnCase {
  std::string name;
  AttentionConfig config;
};

inline void PrintTo(const AttnCase& c, std::ostream* os) { *os << c.name; }

inline AttentionConfig make_config(const std::string& variant, int64_t h_k, int64_t h,
                                   int64_t h_v, int64_t d_k, int64_t d_v,
                                   std::vector<std::string> dynamic = {}) {
  AttentionConfig c;
  c.variant = variant;
  c.h = h;
  if (variant != "general_bilinear") {
    if (variant != "multi_head" && variant != "project_weights") c.h_k = h_k;
    if (variant != "multi_head" && variant != "project_logits") c.h_v = h_v;
    c.d_k = d_k, c.d_v = d_v;
  }
  c.dynamic = std::move(dynamic);
  return c;
}

// Every variant, and every dynamic subset that matters (each alone, all four).
inline std::vector<AttnCase> all_cases() {
  return {
      {"multi_head", make_config("multi_head", 4, 4, 4, 3, 5)},
      {"talking_heads", make_config("talking_heads", 3, 5, 2, 4, 6)},
      {"talking_heads_equal", make_config("talking_heads", 4, 4, 4, 3, 3)},
      {"project_logits", make_config("project_logits", 3, 5, 5, 4, 6)},
      {"project_weights", make_config("project_weights", 5, 5, 2, 4, 6)},
      {"general_bilinear", make_config("general_bilinear", 3, 3, 3, 0, 0)},
      {"dynamic_X_l", make_config("talking_heads", 3, 5, 2, 4, 6, {"X_l"})},
      {"dynamic_M_l", make_config("talking_heads", 3, 5, 2, 4, 6, {"M_l"})},
      {"dynamic_X_w", make_config("talking_heads", 3, 5, 2, 4, 6, {"X_w"})},
      {"dynamic_M_w", make_config("talking_heads", 3, 5, 2, 4, 6, {"M_w"})},
      {"dynamic_all", make_config("talking_heads", 3, 5, 2, 4, 6, {"X_l", "M_l", "X_w", "M_w"})},
  };
}

inline paper::Params params_of(const torch::nn::Module& m) {
  paper::Params p;
  for (const auto& kv : m.named_parameters()) p[kv.key()] = kv.value();
  return p;
}

// The paper's pseudocode for this layer's variant, on the given parameters.
inline torch::Tensor reference_forward(const AttentionDims& d, const torch::Tensor& X,
                                       const torch::Tensor& M, const paper::Params& p,
                                       const torch::Tensor& bias, const torch::Tensor& mask) {
  if (d.name() == "multi_head") return paper::multi_head(X, M, p, bias, mask);
  if (d.name() == "general_bilinear") return paper::general_bilinear(X, M, p.at("P"), p.at("Q"), bias, mask);
  // The talking-heads family: paper::talking_heads with the P_l or P_w the layer has.
  if (d.name() == "talking_heads" || d.name() == "project_logits" || d.name() == "project_weights")
    return paper::talking_heads(X, M, p, bias, mask);
  // A new variant has no reference until one is written: never a silent stand-in.
  throw std::invalid_argument("reference_forward: no paper reference for variant '" + d.name() +
                              "'; add one here (tests/attention/attention_test_util.h)");
}

}  // namespace thx::test
