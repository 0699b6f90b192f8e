// config.h: the `attention:` block of a config, and its validation into resolved dimensions.
//
// AttentionConfig is what the user writes; AttentionDims is what a layer is built from: every
// head count and size resolved, every impossible combination rejected with a ConfigError that
// names the key (and, for a conflict, both keys). Defaults: h_k = h_v = h and
// d_k = d_model / h_k, d_v = d_model / h_v, as in the paper's tables.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace thx {

// "multi_head | talking_heads | ...": the registry's names, for the help of attention.variant.
const char* variant_help();

struct AttentionConfig {
  std::string variant = "multi_head";
  std::optional<int64_t> h_k;  // heads of queries and keys (default h)
  int64_t h = 12;              // softmax heads: of the logits and the weights
  std::optional<int64_t> h_v;  // heads of values (default h)
  std::optional<int64_t> d_k;  // query/key size per head (default d_model / h_k)
  std::optional<int64_t> d_v;  // value size per head (default d_model / h_v)
  std::vector<std::string> dynamic;  // Appendix A: any of X_l, M_l, X_w, M_w (talking_heads)
  double dropout = 0.0;              // on the weights that multiply the values
};

template <class V>
void visit(V& v, AttentionConfig& c) {
  v("variant", c.variant, variant_help());
  v("h_k", c.h_k, "query/key heads; default h");
  v("h", c.h, "softmax heads (the one head count of multi_head and general_bilinear)");
  v("h_v", c.h_v, "value heads; default h");
  v("d_k", c.d_k, "query/key size per head; default d_model / h_k");
  v("d_v", c.d_v, "value size per head; default d_model / h_v");
  v("dynamic", c.dynamic, "dynamic projections (Appendix A): subset of [X_l, M_l, X_w, M_w]");
  v("dropout", c.dropout, "dropout on the final attention weights (after P_w)");
}

struct VariantSpec;  // attention/registry.h: one row per variant

struct AttentionDims {
  const VariantSpec* variant = nullptr;  // its row in the registry (set by resolve())
  int64_t d_X = 0, d_M = 0, d_Y = 0;
  int64_t h_k = 0, h = 0, h_v = 0;
  int64_t d_k = 0, d_v = 0;  // 0 for general_bilinear
  bool X_l = false, M_l = false, X_w = false, M_w = false;
  double dropout = 0.0;
  // Dense-layer biases on Q, K, V and the output (BERT, ALBERT); set by the model, not the
  // attention block. general_bilinear has none.
  bool biases = false;

  bool has_P_l() const;  // the row's P_l, P_w
  bool has_P_w() const;
  bool any_dynamic() const { return X_l || M_l || X_w || M_w; }
  std::string name() const;  // "talking_heads", ...
  std::string summary() const;  // "talking_heads h_k=24 h=24 h_v=24 d_k=32 d_v=32 dynamic=[X_l]"
};

// Validate `c` for a layer with inputs X [.., d_X], M [.., d_M] and output [.., d_Y].
// `path` is the config path of the block ("attention", "attention_encoder_self", ...), used in
// the key of every ConfigError thrown.
AttentionDims resolve(const AttentionConfig& c, int64_t d_X, int64_t d_M, int64_t d_Y,
                      const std::string& path = "attention");
// How many times resolve() has run in this process: a run resolves each attention block once
// (tests/training/resolve_once_test.cpp counts them).
int64_t resolve_count();

}  // namespace thx
