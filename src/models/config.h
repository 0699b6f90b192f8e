// config.h: the `model:` block of a config.
#pragma once
#include <cstdint>

namespace thx {

struct ModelConfig {
  int64_t d_model = 768;
  int64_t d_ff = 3072;
  int64_t encoder_layers = 12;
  int64_t decoder_layers = 12;
  int64_t vocab_size = 0;  // 0: the tokenizer's S + 100
  int64_t relative_buckets = 32;
  int64_t relative_max_distance = 128;
  double dropout = 0.0;     // on layer outputs and embeddings
  double ff_dropout = 0.0;  // on feed-forward hidden units
  double z_loss = 1e-4;
};

template <class V>
void visit(V& v, ModelConfig& c) {
  v("d_model", c.d_model, "model width (T5 base: 768)");
  v("d_ff", c.d_ff, "feed-forward hidden units (T5 base: 3072)");
  v("encoder_layers", c.encoder_layers);
  v("decoder_layers", c.decoder_layers);
  v("vocab_size", c.vocab_size, "0: the tokenizer's pieces + 100 sentinels");
  v("relative_buckets", c.relative_buckets, "relative position buckets");
  v("relative_max_distance", c.relative_max_distance);
  v("dropout", c.dropout, "dropout on layer outputs (0 in pretraining, 0.1 fine-tuning)");
  v("ff_dropout", c.ff_dropout, "dropout on feed-forward hidden units");
  v("z_loss", c.z_loss, "coefficient of logsumexp(logits)^2 in the loss");
}

// Throws ConfigError for impossible values (path: "model").
void validate(const ModelConfig& c, const std::string& path = "model");

}  // namespace thx
