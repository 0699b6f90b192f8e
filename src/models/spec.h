// spec.h: what a model is built from, resolved once: the model block and the attention of
// each layer type as validated AttentionDims (head counts and sizes resolved, BERT/ALBERT's
// dense biases decided by the variant's registry row). The builders (T5, EncoderModel) read it
// and resolve nothing themselves; training/spec.h makes it from a config.
#pragma once
#include "attention/config.h"
#include "models/config.h"

namespace thx {

// The attention blocks of the three layer types, as written (after inheritance).
struct T5Attention {
  AttentionConfig encoder_self, decoder_self, encoder_decoder;
};

struct ModelSpec {
  ModelConfig model;
  // T5: all three. BERT/ALBERT: encoder_self only (decoder_self, encoder_decoder unresolved).
  AttentionDims encoder_self, decoder_self, encoder_decoder;
};

// Validate and resolve; a ConfigError names the block (attention_encoder_self, ...) and key.
ModelSpec resolve_model_spec(const ModelConfig& model, const T5Attention& attention);

}  // namespace thx
