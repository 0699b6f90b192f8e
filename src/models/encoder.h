// encoder.h: BERT (Devlin et al., 2018; the paper's section 7.3) and ALBERT (Lan et al., 2019;
// section 7.2), encoder-only, with any attention variant.
//
// Shape letters: b batch, n positions, P masked positions per example, d d_model, E the
// embedding size, V vocabulary, G hidden groups.
//
//   x = LN(word[ids] + position[0..n) + type[types])             [b,n,E]  (position: absolute)
//   x = x W_e + b_e                                              [b,n,d]  (albert: E -> d)
//   per layer l (post-layer-norm, as BERT):
//     x = LN(x + dropout(Attn_l(x, x, bias, pad mask)))           attention with Q/K/V/O biases
//     x = LN(x + dropout(gelu(x wi + bias_i) wo + bias_o))
//   MLM:    h = LN(gelu(x[positions] W + b))                     [b,P,E]
//           logits = h word[:V]^T + output_bias                  [b,P,V]  (tied embedding)
//   pooled = tanh(x[:,0] W_p + b_p)                              [b,d]    ([CLS])
//   sentence logits = pooled W_s + b_s                           [b,2]    (SOP or NSP)
//   loss = mean CE over masked tokens + mean CE over sentence labels
//
// bias: positions "relative" adds T5's bucketed relative position bias (one table [h, 32]
// for the stack, as the paper's "simplified relative position embeddings") to the logits
// after the logits projection, and there is no position embedding.
//
// ALBERT shares parameters across layers: layer l runs group floor(l * G / L) (ALBERT's
// rule), and each group's parameters exist once, under encoder/groups/g/...; BERT's layers
// are encoder/layers/l/.... Checkpoints and probe files therefore hold a shared parameter
// once, under its group's path.
//
// Initialization, as BERT and ALBERT: weights N(0, 0.02) truncated at 2 sigma, biases 0,
// layer norms 1 and 0. P_q folds 1/sqrt(d_k) (attention/projected.h), so its std is
// 0.02/sqrt(d_k): at the start, the logits equal BERT's q.k/sqrt(d_k). P_l and P_w keep the
// attention module's initializers.
#pragma once
#include <torch/torch.h>

#include "attention/attention.h"
#include "models/config.h"
#include "models/spec.h"

namespace thx {

// One post-layer-norm transformer layer; ALBERT runs one object for every layer of a group.
// Parameters: attention/{P_q,...,bias_q,...}, attention_norm/{scale,bias},
// ff/{wi,bias_i,wo,bias_o}, ff_norm/{scale,bias}.
class EncoderLayerImpl : public torch::nn::Module {
 public:
  EncoderLayerImpl(const ModelConfig& config, const AttentionDims& dims);
  // x [b,n,d]; bias broadcastable to [b,h,n,n] (or undefined); mask [b,1,1,n].
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& bias, const torch::Tensor& mask);

  std::shared_ptr<Attention> attention;
  torch::Tensor attention_norm_scale, attention_norm_bias, wi, bias_i, wo, bias_o, ff_norm_scale,
      ff_norm_bias;

 private:
  double dropout_;
};

class EncoderModelImpl : public torch::nn::Module {
 public:
  // vocab_size: V; the word embedding is padded to a multiple of 128. sentence_head: build
  // the SOP/NSP classifier.
  EncoderModelImpl(const ModelSpec& spec, int64_t vocab_size, bool sentence_head = true);
  // Resolves the attention block with resolve_model_spec first (tests, tools).
  EncoderModelImpl(const ModelConfig& config, const AttentionConfig& attention, int64_t vocab_size,
                   bool sentence_head = true)
      : EncoderModelImpl(resolve_model_spec(config, {attention, attention, attention}), vocab_size, sentence_head) {}

  // ids, types [b,n] int64 (0 = padding) -> the final hidden states [b,n,d].
  torch::Tensor encode(const torch::Tensor& ids, const torch::Tensor& types);
  torch::Tensor pooled(const torch::Tensor& hidden);  // [b,d]

  struct Output {
    torch::Tensor loss;          // scalar: MLM mean CE + sentence mean CE
    torch::Tensor mlm_loss;      // scalar: the MLM term of loss (mean CE, with the z-loss)
    torch::Tensor sentence_loss; // scalar: the sentence term (mean CE), undefined without one
    torch::Tensor mlm_nll_sum;   // scalar: summed CE over masked tokens
    int64_t mlm_tokens = 0;      // masked tokens (targets != 0)
    int64_t mlm_correct = 0;     // argmax == target
    torch::Tensor sentence_nll_sum;
    int64_t sentence_count = 0;  // examples with a sentence label (>= 0)
    int64_t sentence_correct = 0;
  };
  // ids, types [b,n]; positions, targets [b,P] (targets 0 = no prediction); labels [b]
  // (-1 = none).
  Output forward(const torch::Tensor& ids, const torch::Tensor& types,
                 const torch::Tensor& positions, const torch::Tensor& targets,
                 const torch::Tensor& labels);

  // Module paths with '/' separators, each parameter once (shared ones under their group).
  std::vector<std::pair<std::string, torch::Tensor>> named_parameters_by_path() const;

  const ModelConfig& config() const { return config_; }
  int64_t vocab_size() const { return vocab_size_; }
  int64_t layers() const { return config_.encoder_layers; }
  // The module that layer l runs (the same object for every layer of an ALBERT group).
  EncoderLayerImpl& layer(int64_t l);
  int64_t group_of(int64_t l) const;

  torch::Tensor word;  // [V_pad, E]

 private:
  ModelConfig config_;
  int64_t vocab_size_, E_;
  int64_t heads_ = 0;
  torch::Tensor position_, type_, emb_norm_scale_, emb_norm_bias_, emb_w_, emb_b_;
  torch::Tensor relative_attention_bias_;  // [h, buckets], positions: relative
  std::vector<std::shared_ptr<EncoderLayerImpl>> units_;  // BERT: one per layer; ALBERT: per group
  torch::Tensor pool_w_, pool_b_, mlm_w_, mlm_b_, mlm_norm_scale_, mlm_norm_bias_, mlm_output_bias_;
  torch::Tensor sent_w_, sent_b_;
};
TORCH_MODULE(EncoderModel);

// N(0, std) truncated at 2 std, as TensorFlow's truncated_normal (BERT's initializer; task
// heads use it too).
void init_truncated_normal(torch::Tensor& p, double std);

}  // namespace thx
