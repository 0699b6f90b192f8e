// attention.h: the one interface of every attention variant of the paper.
//
// Shape letters, used in every file of this module:
//   b batch, n query positions, m memory positions, t cached memory positions,
//   d_X query-input size, d_M memory-input size, d_Y output size,
//   h_k query/key heads, h softmax heads (logits and weights), h_v value heads,
//   d_k query/key size per head, d_v value size per head.
//
// forward(X [b,n,d_X], M [b,m,d_M], bias?, mask?) -> Y [b,n,d_Y]
//   bias: additive, broadcastable to [b,h,n,m], added to the logits after the logits
//         projection (T5's relative position bias rides here).
//   mask: bool, broadcastable to [b,h,n,m]; true = the query may attend to that position.
//         Padding over keys is [b,1,1,m]; causal is [1,1,n,m]. A masked logit becomes -1e9
//         (as in Mesh TensorFlow), so a fully masked row gives uniform weights, never NaN.
//
// forward_cached() is incremental decoding: the memory side of past positions (keys, values,
// dynamic-projection terms) lives in an AttentionCache and only new positions are projected.
//
// Parameters are registered under the paper's names and stored in the paper's shapes
// (P_q [d_X,d_k,h_k], ...), so code, checkpoints, probe files and the paper read alike.
// Layers know nothing of models: they take tensors and return tensors.
#pragma once
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>

#include "attention/config.h"

namespace thx {

// Memory-side state of one attention layer during incremental decoding.
struct AttentionCache {
  // Tensors per memory position, concatenated along the position dimension as positions
  // arrive: "K" [b,t,h_k,d_k], "V" [b,t,h_v,d_v], "R_Ml" [b,t,h_k,h], "R_Mw" [b,t,h,h_v], or
  // "M" [b,t,d_M] for general_bilinear.
  std::map<std::string, torch::Tensor> memory;
  // false: each call appends its M (decoder self-attention, M = the new positions).
  // true:  the first call projects M and later calls reuse it (encoder-decoder attention).
  bool fixed = false;

  int64_t length() const;  // t, the number of cached memory positions
  void clear() { memory.clear(); }
};

class Attention : public torch::nn::Module {
 public:
  explicit Attention(AttentionDims dims) : dims_(std::move(dims)) {}

  virtual torch::Tensor forward(const torch::Tensor& X, const torch::Tensor& M,
                                const torch::Tensor& bias = {}, const torch::Tensor& mask = {}) = 0;

  // X [b,n,d_X] new queries; M [b,m,d_M] new memory positions (ignored once a fixed cache is
  // filled). bias and mask broadcast to [b,h,n,t] over all cached positions.
  virtual torch::Tensor forward_cached(const torch::Tensor& X, const torch::Tensor& M,
                                       AttentionCache& cache, const torch::Tensor& bias = {},
                                       const torch::Tensor& mask = {}) = 0;

  const AttentionDims& dims() const { return dims_; }

 protected:
  AttentionDims dims_;
};

// Apply bias and mask to logits L [b,h,n,m] in place (L must not be needed by autograd).
void add_bias_and_mask(torch::Tensor& L, const torch::Tensor& bias, const torch::Tensor& mask);

// Every parameter of a module under its module path with '/' separators
// ("encoder/layers/0/self_attention/P_q"), in registration order: the names of checkpoints and
// probe files.
std::vector<std::pair<std::string, torch::Tensor>> parameters_by_path(const torch::nn::Module& m);
// A module key with '.' separators as such a path.
std::string module_path(std::string key);

// Normal(0, std) initialization of a freshly registered parameter.
void init_normal(torch::Tensor& p, double std);

}  // namespace thx
