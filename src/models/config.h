// config.h: the `model:` block of a config: T5 (section 7.1), BERT (7.3) or ALBERT (7.2).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace thx {

struct ModelConfig {
  std::string type = "t5";  // t5 | bert | albert
  int64_t d_model = 768;
  int64_t d_ff = 3072;
  int64_t encoder_layers = 12;
  int64_t decoder_layers = 12;
  int64_t vocab_size = 0;  // 0: the tokenizer's S + 100
  int64_t relative_buckets = 32;
  int64_t relative_max_distance = 128;
  double dropout = 0.0;     // on layer outputs and embeddings
  double ff_dropout = 0.0;  // on feed-forward hidden units
  std::optional<double> z_loss;  // default: 1e-4 for t5, 0 for bert and albert
  // BERT and ALBERT (encoder_layers is their depth; decoder_layers is unused).
  int64_t embedding_size = 0;          // E; 0: d_model. ALBERT's own default 128, the paper's 768
  int64_t hidden_groups = 1;           // albert: groups of layers that share parameters
  std::string positions = "absolute";  // absolute (BERT, ALBERT) | relative (the paper's BERT)
  int64_t max_positions = 512;         // absolute position embeddings
  int64_t type_vocab_size = 2;         // token types (segments A and B)
  bool recompute = false;              // recompute each layer in the backward pass
  std::optional<double> init_std;      // default 0.02, BERT's initializer_range

  double z_loss_value() const { return z_loss.value_or(type == "t5" ? 1e-4 : 0.0); }
  bool encoder_only() const { return type != "t5"; }
  double init_std_value() const { return init_std.value_or(0.02); }
};

template <class V>
void visit(V& v, ModelConfig& c) {
  v("type", c.type, "t5 | bert | albert");
  v("d_model", c.d_model, "model width (T5 base: 768)");
  v("d_ff", c.d_ff, "feed-forward hidden units (T5 base: 3072)");
  v("encoder_layers", c.encoder_layers, "encoder depth (BERT/ALBERT: the depth)");
  v("decoder_layers", c.decoder_layers, "decoder depth (t5 only)");
  v("vocab_size", c.vocab_size, "0: the tokenizer's pieces + 100 sentinels");
  v("relative_buckets", c.relative_buckets, "relative position buckets");
  v("relative_max_distance", c.relative_max_distance);
  v("dropout", c.dropout, "dropout on layer outputs (0 in pretraining, 0.1 fine-tuning)");
  v("ff_dropout", c.ff_dropout, "dropout on feed-forward hidden units");
  v("z_loss", c.z_loss, "coefficient of logsumexp(logits)^2 in the loss (default: t5 1e-4, bert/albert 0)");
  v("embedding_size", c.embedding_size, "bert/albert: embedding size E (0: d_model; ALBERT-base 128, the paper 768)");
  v("hidden_groups", c.hidden_groups, "albert: groups of layers sharing parameters (ALBERT: 1)");
  v("positions", c.positions, "bert/albert: absolute (learned embeddings) | relative (T5's bucketed bias)");
  v("max_positions", c.max_positions, "bert/albert: absolute position embeddings");
  v("type_vocab_size", c.type_vocab_size, "bert/albert: token types");
  v("init_std", c.init_std, "bert/albert: std of the truncated-normal initializer of embeddings and dense weights, not of P_l/P_w (default 0.02, BERT's initializer_range)");
  v("recompute", c.recompute, "bert/albert: keep only layer inputs and recompute each layer in the backward pass (for many heads at long lengths)");
}

// Throws ConfigError for impossible values (path: "model").
void validate(const ModelConfig& c, const std::string& path = "model");

}  // namespace thx
