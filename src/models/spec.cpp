#include "models/spec.h"

#include "attention/registry.h"

namespace thx {

ModelSpec resolve_model_spec(const ModelConfig& model, const T5Attention& attention) {
  validate(model);
  ModelSpec s;
  s.model = model;
  const int64_t d = model.d_model;
  // BERT/ALBERT have one attention block: its errors name `attention`.
  s.encoder_self = resolve(attention.encoder_self, d, d, d, model.encoder_only() ? "attention" : "attention_encoder_self");
  if (model.encoder_only()) {
    s.encoder_self.biases = s.encoder_self.variant->dense_biases;  // BERT's dense-layer biases
    return s;
  }
  s.decoder_self = resolve(attention.decoder_self, d, d, d, "attention_decoder_self");
  s.encoder_decoder = resolve(attention.encoder_decoder, d, d, d, "attention_encoder_decoder");
  return s;
}

}  // namespace thx
