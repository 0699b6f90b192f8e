// registry.h: every attention variant is one row here, and one class file. Everything thx knows
// about a variant outside its class reads its row: config validation (head-count rules and
// their messages, which keys exist), `--help` and `--dump-config` (the allowed names), the
// costs (section 5's multiplies), the cost table's blank cells, the sweep's and tables' row
// signatures, the probe's parameter names, the optimizer's factoring rule, whether BERT's dense
// biases apply, and how to build the layer.
//
// Adding a variant (docs/DESIGN.md shows the diff): write its class (attention/<name>.h
// and .cpp, deriving Attention), then add its row (and the class's include) to registry.cpp. A test walks
// the registry and checks every row against the class it builds.
#pragma once
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "attention/config.h"
#include "attention/costs.h"

namespace thx {

class Attention;

struct VariantSpec {
  std::string name;   // the value of attention.variant
  std::string paper;  // where the paper defines it
  // The head-mixing projections: P_l [h_k,h] before the softmax, P_w [h,h_v] after it.
  bool P_l = false, P_w = false;
  // Per-head key and value sizes (d_k, d_v, and with them h_k, h_v) exist; false for the
  // general bilinear form (P [d_X,d_M,h], Q [d_M,d_Y,h]), which has only h.
  bool per_head = true;
  // Why h_k (h_v) must equal h, for the error when it is set otherwise; "" if it is free.
  std::string h_k_tied, h_v_tied;
  bool dynamic = false;        // accepts dynamic projections (Appendix A)
  bool dense_biases = true;    // takes BERT's/ALBERT's dense biases on Q, K, V and O
  // optimizer.factor_attention mesh_tf: P_q, P_k, P_v, P_o are factored as [d, d_k*h]
  // (combined, as Mesh TensorFlow's multi-head layer stores them) rather than per head.
  bool factor_combined = false;
  std::vector<std::string> params;  // a static layer's parameters, in registration order
  // Section 5's forward multiplies of one layer (costs.h's conventions).
  double (*multiplies)(const AttentionDims&, int64_t n, int64_t m, CostConvention) = nullptr;
  std::shared_ptr<Attention> (*create)(const AttentionDims&) = nullptr;
};

// Every row, in the order the paper introduces the variants (then any registered).
const std::deque<VariantSpec>& variant_registry();
// Add a row at run time (a variant defined outside attention/, as tests/attention/
// add_variant_test.cpp does); InputError if the name is taken. Rows never move, so resolved
// AttentionDims stay valid.
const VariantSpec& register_variant(VariantSpec row);
// The row of a name; nullptr if none.
const VariantSpec* find_variant(const std::string& name);
// "multi_head | talking_heads | ..." (help strings) and "multi_head, talking_heads, ..."
// (error messages).
std::string variant_choices(const char* separator = " | ");
// "talking_heads, project_logits, ...": the rows with P_l or P_w (what
// optimizer.mixing_lr_multiplier scales), for its error messages.
std::string mixing_variant_choices();

// What a parameter of a variant's layer does, for the optimizer's rules: a head-mixing
// projection (P_l, P_w: never factored, learning at optimizer.mixing_lr_multiplier), a per-head
// input or output projection (P_q, P_k, P_v, P_o: factored per head or as [d, d_k*h]), or
// anything else (biases, the dynamic projections, the general bilinear form's P and Q).
enum class ParamRole { other, head_projection, head_mixing };
ParamRole param_role(const VariantSpec& v, const std::string& param);

}  // namespace thx
