#include "attention/attention.h"

#include <algorithm>

namespace thx {

int64_t AttentionCache::length() const {
  return memory.empty() ? 0 : memory.begin()->second.size(1);  // every entry is [b,t,...]
}

void add_bias_and_mask(torch::Tensor& L, const torch::Tensor& bias, const torch::Tensor& mask) {
  if (bias.defined()) L.add_(bias);
  if (mask.defined()) {
    TORCH_CHECK(mask.scalar_type() == torch::kBool, "attention: mask must be bool, got ",
                mask.scalar_type());
    L.masked_fill_(mask.logical_not(), -1e9);
  }
}

void init_normal(torch::Tensor& p, double std) {
  torch::NoGradGuard no_grad;
  p.normal_(0.0, std);
}

std::string module_path(std::string key) {
  std::replace(key.begin(), key.end(), '.', '/');
  return key;
}

std::vector<std::pair<std::string, torch::Tensor>> parameters_by_path(const torch::nn::Module& m) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& kv : m.named_parameters()) out.emplace_back(module_path(kv.key()), kv.value());
  return out;
}

}  // namespace thx
