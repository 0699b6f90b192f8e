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

// One function per row, each field set by name; a field left out keeps VariantSpec's
// default (registry.h): no P_l or P_w, per-head sizes, head counts free, no dynamic
// projections, dense biases, per-head factoring.

// The projected family's common part: P_q, P_k, P_v, P_o, then the head projections it has
// (`mixing`: "P_l", "P_w" or both), and section 5's multiplies of a projected layer.
VariantSpec projected_row(const char* name, const char* paper, const std::vector<std::string>& mixing,
                          std::shared_ptr<Attention> (*make)(const AttentionDims&)) {
  VariantSpec v;
  v.name = name, v.paper = paper;
  v.params = {"P_q", "P_k", "P_v", "P_o"};
  for (const auto& p : mixing) {
    TORCH_CHECK(p == "P_l" || p == "P_w", "projected_row: ", name, ": ", p, " is not P_l or P_w");
    (p == "P_l" ? v.P_l : v.P_w) = true;
    v.params.push_back(p);
  }
  v.multiplies = projected_multiplies, v.create = make;
  return v;
}

VariantSpec multi_head_row() {
  VariantSpec v = projected_row("multi_head", "section 3.3", {}, create<MultiHeadAttention>);
  v.h_k_tied = v.h_v_tied = "multi_head has one head count";
  v.factor_combined = true;
  return v;
}

VariantSpec talking_heads_row() {
  VariantSpec v = projected_row("talking_heads", "section 4", {"P_l", "P_w"}, create<TalkingHeadsAttention>);
  v.dynamic = true;
  return v;
}

VariantSpec project_logits_row() {
  VariantSpec v = projected_row("project_logits", "Table 3", {"P_l"}, create<ProjectLogitsAttention>);
  v.h_v_tied = "project_logits has no P_w, so values use the softmax heads";
  return v;
}

VariantSpec project_weights_row() {
  VariantSpec v = projected_row("project_weights", "Table 3", {"P_w"}, create<ProjectWeightsAttention>);
  v.h_k_tied = "project_weights has no P_l, so keys use the softmax heads";
  return v;
}

VariantSpec general_bilinear_row() {
  VariantSpec v;
  v.name = "general_bilinear", v.paper = "section 6";
  v.per_head = false;
  v.dense_biases = false;
  v.params = {"P", "Q"};
  v.multiplies = general_bilinear_multiplies, v.create = create<GeneralBilinearAttention>;
  return v;
}

std::deque<VariantSpec>& rows() {
  static std::deque<VariantSpec> kVariants = {multi_head_row(), talking_heads_row(), project_logits_row(),
                                              project_weights_row(), general_bilinear_row()};
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

ParamRole param_role(const VariantSpec& v, const std::string& param) {
  if ((v.P_l && param == "P_l") || (v.P_w && param == "P_w")) return ParamRole::head_mixing;
  if (v.per_head && (param == "P_q" || param == "P_k" || param == "P_v" || param == "P_o"))
    return ParamRole::head_projection;
  return ParamRole::other;
}

}  // namespace thx
