#include "attention/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "attention/general_bilinear.h"
#include "attention/multi_head.h"
#include "attention/project_logits.h"
#include "attention/project_weights.h"
#include "attention/talking_heads.h"
#include "common/error.h"

namespace thx {
namespace {

template <class T>
std::shared_ptr<Attention> create(const AttentionDims& d) {
  return std::make_shared<T>(d);
}

std::deque<VariantSpec>& rows() {
  static std::deque<VariantSpec> kVariants = {
    // name, paper, P_l, P_w, per_head, h_k_tied, h_v_tied, dynamic, dense_biases,
    // factor_combined, params, multiplies, create
    {"multi_head", "section 3.3", false, false, true, "multi_head has one head count",
     "multi_head has one head count", false, true, true, {"P_q", "P_k", "P_v", "P_o"},
     projected_multiplies, create<MultiHeadAttention>},
    {"talking_heads", "section 4", true, true, true, "", "", true, true, false,
     {"P_q", "P_k", "P_v", "P_o", "P_l", "P_w"}, projected_multiplies, create<TalkingHeadsAttention>},
    {"project_logits", "Table 3", true, false, true, "",
     "project_logits has no P_w, so values use the softmax heads", false, true, false,
     {"P_q", "P_k", "P_v", "P_o", "P_l"}, projected_multiplies, create<ProjectLogitsAttention>},
    {"project_weights", "Table 3", false, true, true,
     "project_weights has no P_l, so keys use the softmax heads", "", false, true, false,
     {"P_q", "P_k", "P_v", "P_o", "P_w"}, projected_multiplies, create<ProjectWeightsAttention>},
    {"general_bilinear", "section 6", false, false, false, "", "", false, false, false, {"P", "Q"},
     general_bilinear_multiplies, create<GeneralBilinearAttention>},
  };
  return kVariants;
}

}  // namespace

const std::deque<VariantSpec>& variant_registry() { return rows(); }

const VariantSpec& register_variant(VariantSpec row) {
  if (find_variant(row.name)) throw InputError(fmt::format("attention variant '{}' is already registered", row.name));
  TORCH_CHECK(row.create && row.multiplies, "register_variant: ", row.name, " needs create and multiplies");
  rows().push_back(std::move(row));
  return rows().back();
}

const VariantSpec* find_variant(const std::string& name) {
  for (const auto& v : rows())
    if (v.name == name) return &v;
  return nullptr;
}

std::string variant_choices(const char* separator) {
  std::vector<std::string> names;
  for (const auto& v : rows()) names.push_back(v.name);
  return fmt::format("{}", fmt::join(names, separator));
}

std::string mixing_variant_choices() {
  std::vector<std::string> names;
  for (const auto& v : rows())
    if (v.P_l || v.P_w) names.push_back(v.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace thx
