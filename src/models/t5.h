// t5.h: the T5 v1.0 encoder-decoder of the paper's section 7.1, with any attention variant
// in each of its three layer types.
//
// Shape letters: b batch, n input positions, t target positions, d d_model, V vocabulary.
//
//   encoder: x = E[inputs]; per layer: x += Attn(RMS(x), RMS(x), bias_enc, pad mask);
//            x += FF(RMS(x)); then RMS, dropout
//   decoder: y = E[decoder_inputs]; per layer: y += Attn(RMS(y), RMS(y), bias_dec, causal);
//            y += Attn(RMS(y), enc, -, pad mask); y += FF(RMS(y)); then RMS, dropout
//   logits = (y · d^-1/2) E[:V]^T                            [b,t,V]
//   loss   = mean over target tokens of  CE + z_loss · logsumexp(logits)^2
//
// RMS norm: x · rsqrt(mean(x^2) + 1e-6) · scale, no bias, no mean subtraction. FF:
// relu(x wi) wo, no biases anywhere. The relative position bias is one table [h, buckets]
// per stack, shared by its layers, added to the logits after the logits projection; none in
// encoder-decoder attention. The embedding E [V_pad, d] is tied to the output projection;
// rows beyond V (padding to a multiple of 128) are never produced.
//
// Initialization, as Mesh TensorFlow's T5: E ~ N(0, 1); wi, wo: fan-in variance scaling,
// N(0, 1/fan_in); relative_attention_bias [heads, buckets] is created by Mesh TF with
// tf.get_variable's default initializer, Glorot uniform, U(+-sqrt(6 / (h + buckets)));
// RMS scales 1; attention as in attention/.
#pragma once
#include <torch/torch.h>

#include <functional>

#include "attention/attention.h"
#include "models/config.h"
#include "models/spec.h"

namespace thx {


// T5's _relative_position_bucket for relative_position = memory - query.
int64_t relative_position_bucket(int64_t relative_position, bool bidirectional,
                                 int64_t num_buckets = 32, int64_t max_distance = 128);
// [n, m] int64 buckets: query i sits at position query_offset + i, memory j at position j.
torch::Tensor relative_position_buckets(int64_t n, int64_t m, bool bidirectional,
                                        int64_t num_buckets, int64_t max_distance,
                                        int64_t query_offset = 0);

class RMSNormImpl : public torch::nn::Module {
 public:
  explicit RMSNormImpl(int64_t d);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor scale;  // [d]
};
TORCH_MODULE(RMSNorm);

class FeedForwardImpl : public torch::nn::Module {
 public:
  FeedForwardImpl(int64_t d, int64_t d_ff, double dropout);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor wi, wo;  // [d, d_ff], [d_ff, d]
  double dropout;
};
TORCH_MODULE(FeedForward);

class StackImpl;  // the encoder or the decoder

class T5Impl : public torch::nn::Module {
 public:
  // vocab_size: V (S + 100); the embedding is padded to a multiple of 128.
  T5Impl(const ModelSpec& spec, int64_t vocab_size);
  // Resolves the attention blocks with resolve_model_spec first (tests, tools).
  T5Impl(const ModelConfig& config, const T5Attention& attention, int64_t vocab_size)
      : T5Impl(resolve_model_spec(config, attention), vocab_size) {}

  struct Output {
    torch::Tensor logits;  // [b,t,V]
    torch::Tensor loss;    // scalar: mean over target tokens of CE + z_loss * lse^2
    torch::Tensor nll;     // scalar: mean CE per target token (ln PPL)
    torch::Tensor nll_sum; // scalar: summed CE (for exact averages over several batches)
    int64_t tokens = 0;    // non-padding target tokens
  };
  // inputs [b,n], decoder_inputs [b,t], targets [b,t], int64, 0 = padding.
  Output forward(const torch::Tensor& inputs, const torch::Tensor& decoder_inputs,
                 const torch::Tensor& targets);
  torch::Tensor logits(const torch::Tensor& inputs, const torch::Tensor& decoder_inputs);
  // The encoder's output [b,n,d] for inputs [b,n].
  torch::Tensor encode(const torch::Tensor& inputs);
  // Greedy decoding with the incremental cache (attention.h's forward_cached: each step
  // projects only the new position; encoder-decoder keys and values are projected once).
  // Returns [b, t] ids, t <= max_length the steps taken (it stops when every row has its
  // `eos`): each row's tokens up to and including its first `eos`, then 0. Nothing of size
  // max_length is allocated ahead. on_step(s), if given, is called after each step s (0-based).
  // Runs without gradients; call eval() first for dropout-free decoding.
  torch::Tensor greedy_decode(const torch::Tensor& inputs, int64_t max_length, int64_t eos = 1,
                              const std::function<void(int64_t)>& on_step = {});

  // Module paths with '/' separators ("encoder/layers/0/self_attention/P_q"), in a fixed
  // order: the names used by checkpoints and probe files.
  std::vector<std::pair<std::string, torch::Tensor>> named_parameters_by_path() const;

  const ModelConfig& config() const { return config_; }
  int64_t vocab_size() const { return vocab_size_; }

  torch::Tensor shared;  // [V_pad, d]

 private:
  ModelConfig config_;
  int64_t vocab_size_;
  std::shared_ptr<StackImpl> encoder_, decoder_;
};
TORCH_MODULE(T5);

}  // namespace thx
