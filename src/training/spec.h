// spec.h: a pretraining config, read and validated once, here in training/: `cli/` only calls
// it, and so do the sweep runner (every run is validated before any starts) and fine-tuning
// (which rebuilds a pretrained model from the YAML stored in its checkpoint).
//
// RunConfig is the root of the YAML: one typed block per module. attention_encoder_self,
// attention_decoder_self and attention_encoder_decoder override the top-level attention block
// key by key for one layer type (Tables 4 and 10): a key they do not set is inherited from
// `attention` (ConfigTree::inherit, once, before reading).
//
// The models are built from a ModelSpec (models/spec.h): loading a config resolves each layer
// type's attention once into PretrainConfig::spec, and the builders (T5, EncoderModel), the
// memory bound, the sweep's costs and, through the built layers, the optimizer's factoring
// rule read those. Reading a stored config back only to compare it (--resume, a sweep's run
// directory) resolves nothing (normalize_pretrain_yaml).
//
// Keys that moved: checkpoints written before attention dropout became attention.dropout
// (9692936) carry model.attention_dropout; pretrain_config_from_checkpoint maps it.
#pragma once
#include <optional>
#include <string>

#include "attention/config.h"
#include "common/config_tree.h"
#include "common/schema.h"
#include "models/config.h"
#include "models/t5.h"
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

// Everything pretraining needs, validated.
struct PretrainConfig {
  ModelConfig model;
  T5Attention attention;  // per layer type, after inheritance (encoder-only models: encoder_self)
  DataConfig data;
  TrainConfig train;
  OptimizerConfig optimizer;
  CheckpointConfig checkpoint;
  EvalConfig eval;
  std::string yaml;  // the resolved config, stored in the run directory and checkpoints
  ModelSpec spec;    // model and attention, validated and resolved once, when the config was read
  std::string spec_of;  // the model and attention blocks the spec was resolved from (check_spec)
};

// Inherit, read and validate a tree; an InputError names the file and line of a bad key or
// value. `yaml_out` gets the resolved YAML (also in the result's .yaml).
PretrainConfig load_pretrain_config(ConfigTree& tree, std::string* yaml_out = nullptr);
// The same without the blocks that need data or a run (data, checkpoint, eval are read but not
// validated): what `thx bench train` times on random tokens.
PretrainConfig load_model_config(ConfigTree& tree);
// The same from YAML text (a run's config.yaml, a checkpoint's stored config); `origin` names
// it in messages. Old keys are migrated (above).
PretrainConfig pretrain_config_from_text(const std::string& yaml, const std::string& origin);
// A stored config's YAML as this code writes it (old keys migrated, keys added since at their
// defaults), read and written back without validating or resolving anything: what --resume and
// a sweep compare with the config they are given.
std::string normalize_pretrain_yaml(const std::string& yaml, const std::string& origin);
// The YAML of a PretrainConfig built in code (tests, probes): every layer type's attention
// block written out, so that reading it back gives the same config.
std::string to_yaml(const PretrainConfig& c);
// A PretrainConfig built or changed in code (tests, tools) made whole as loading makes one: its
// yaml written (to_yaml) and its spec resolved (errors naming the blocks to_yaml writes).
PretrainConfig& finish(PretrainConfig& c);
// c with model.dropout and ff_dropout `p` and every layer type's attention dropout `a` (in
// [0, 1), checked by the caller), its spec changed the same way: dropout changes no size.
PretrainConfig with_dropouts(PretrainConfig c, double p, double a);
// Throws std::logic_error (an internal error) when c.model or c.attention changed after c.spec
// was resolved: a model built from a stale spec would silently differ from its config.
void check_spec(const PretrainConfig& c);

// The outputs an example trains on, as the memory bound counts them (models/spec.h): T5's
// target tokens, BERT/ALBERT's masked positions, a generated task's queries. One definition
// for the run's own check and the sweep's admission.
int64_t trained_outputs(const PretrainConfig& c);
// What a pretraining step keeps beside the model and its activations, for the same bound: the
// optimizer's state (optimizer_state_copies, optimizer_statistics) and whether
// train.grad_accum accumulates.
StepMemory step_memory(const PretrainConfig& c);
// What a run checks of its prepared data's tokenizer (data_vocab ids, `convention`) once it has
// read the manifest, and a sweep before it starts anything: model.vocab_size, where set, at least
// the data's vocabulary; the id convention the model needs. ConfigError naming the key.
void check_data_tokenizer(const PretrainConfig& c, int64_t data_vocab, const std::string& convention);

}  // namespace thx
