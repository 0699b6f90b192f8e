// run_config.h: the root of a thx YAML config. Each block is a typed struct owned by the
// module that uses it; each command validates the blocks it needs.
//
// attention_encoder_self, attention_decoder_self and attention_encoder_decoder override the
// top-level attention block key by key for one layer type (Tables 4 and 10): a key they do
// not set is inherited from `attention` (ConfigTree::inherit, before reading).
#pragma once
#include <optional>

#include "attention/config.h"
#include "common/config_tree.h"
#include "common/schema.h"
#include "models/config.h"
#include "training/config.h"

namespace thx {

struct RunConfig {
  ModelConfig model;
  AttentionConfig attention;
  std::optional<AttentionConfig> attention_encoder_self, attention_decoder_self,
      attention_encoder_decoder;
  DataConfig data;
  TrainConfig train;
  OptimizerConfig optimizer;
  CheckpointConfig checkpoint;
  EvalConfig eval;
};

template <class V>
void visit(V& v, RunConfig& c) {
  v("model", c.model, "T5 v1.0 (section 7.1), BERT (7.3) or ALBERT (7.2)");
  v("attention", c.attention, "attention of every layer (sections 3-6, Appendix A)");
  v("attention_encoder_self", c.attention_encoder_self, "overrides for encoder self-attention");
  v("attention_decoder_self", c.attention_decoder_self, "overrides for decoder self-attention");
  v("attention_encoder_decoder", c.attention_encoder_decoder, "overrides for encoder-decoder attention");
  v("data", c.data, "span corruption (t5) or masked LM + sentence task (bert, albert)");
  v("train", c.train);
  v("optimizer", c.optimizer);
  v("checkpoint", c.checkpoint);
  v("eval", c.eval, "held-out ln(PPL)");
}

inline const char* const kLayerTypes[] = {"attention_encoder_self", "attention_decoder_self",
                                          "attention_encoder_decoder"};

// Copy the keys of `attention` into each per-layer-type block the tree has.
inline void inherit_attention(ConfigTree& tree) {
  for (const char* k : kLayerTypes) tree.inherit(k, "attention");
}

// The pretraining config a tree resolves to (thx pretrain, thx sweep); `yaml_out` gets the
// resolved YAML. Throws InputError naming the file and line of a bad key or value.
struct PretrainConfig;
PretrainConfig load_pretrain_config(ConfigTree& tree, std::string* yaml_out);

}  // namespace thx
