#include "training/spec.h"

#include <yaml-cpp/yaml.h>

#include "attention/registry.h"
#include "data/prepare.h"
#include "training/optimizer.h"

namespace thx {

namespace {

std::string spec_source(const ModelConfig& model, const T5Attention& a) {
  return cfg::to_yaml(model) + cfg::to_yaml(a.encoder_self) + cfg::to_yaml(a.decoder_self) +
         cfg::to_yaml(a.encoder_decoder);
}

PretrainConfig load(ConfigTree& tree, bool run_blocks) {
  inherit_attention(tree);
  tree.resolve_paths({"data.prepared"});  // relative to the file that wrote it (config_tree.h)
  PretrainConfig pc;
  const RunConfig rc = load_config<RunConfig>(tree, [&](const RunConfig& c) {
    validate(c.model);
    if (c.model.encoder_only()) {
      if (c.attention_decoder_self)
        throw ConfigError("attention_decoder_self", fmt::format("model.type {} has no decoder", c.model.type));
      if (c.attention_encoder_decoder)
        throw ConfigError("attention_encoder_decoder", fmt::format("model.type {} has no decoder", c.model.type));
      if (run_blocks && c.data.synthetic.empty() && c.data.inputs_length < 8)  // (data/mlm.cpp's examples)
        throw ConfigError("data.inputs_length", fmt::format("{} is too short for model.type {}'s [CLS] A [SEP] B "
                                                            "[SEP]: at least 8", c.data.inputs_length, c.model.type));
      // A BERT/ALBERT setting: T5 inputs may be shorter than its default.
      if (run_blocks && c.data.synthetic.empty() && c.data.max_predictions_per_seq > c.data.inputs_length)
        throw ConfigError("data.max_predictions_per_seq", fmt::format("{} is invalid: more than data.inputs_length {}",
                                                                      c.data.max_predictions_per_seq, c.data.inputs_length));
      if (c.model.positions == "absolute" && c.data.inputs_length > c.model.max_positions)
        throw ConfigError("data.inputs_length", fmt::format("{} is more than model.max_positions {}",
                                                            c.data.inputs_length, c.model.max_positions));
    }
    const AttentionConfig& a = c.attention;
    pc.attention.encoder_self = c.attention_encoder_self.value_or(a);
    pc.attention.decoder_self = c.attention_decoder_self.value_or(a);
    pc.attention.encoder_decoder = c.attention_encoder_decoder.value_or(a);
    // Each layer type's attention, resolved once; errors name the block it was written in.
    AttentionPaths paths;
    if (c.attention_encoder_self) paths.encoder_self = "attention_encoder_self";
    if (c.attention_decoder_self) paths.decoder_self = "attention_decoder_self";
    if (c.attention_encoder_decoder) paths.encoder_decoder = "attention_encoder_decoder";
    pc.spec = resolve_attention_spec(c.model, pc.attention, paths);
    pc.spec_of = spec_source(c.model, pc.attention);
    // The top-level block when every layer type overrides it: checked all the same.
    const bool used = !c.attention_encoder_self ||
                      (!c.model.encoder_only() && (!c.attention_decoder_self || !c.attention_encoder_decoder));
    if (!used) resolve(a, c.model.d_model, c.model.d_model, c.model.d_model, "attention");
    validate(c.train);
    validate(c.optimizer);
    if (c.optimizer.mixing_lr_multiplier != 1.0) {  // a multiplier on nothing is a mistake, not a no-op
      bool mixes = false;
      for (const AttentionDims* l : {&pc.spec.encoder_self, &pc.spec.decoder_self, &pc.spec.encoder_decoder}) {
        if (c.model.encoder_only() && l != &pc.spec.encoder_self) continue;
        mixes = mixes || l->has_P_l() || l->has_P_w();
      }
      if (!mixes)
        throw ConfigError("optimizer.mixing_lr_multiplier",
                          fmt::format("{} has no effect: attention.variant {} has no P_l or P_w; allowed with {}",
                                      c.optimizer.mixing_lr_multiplier, a.variant, mixing_variant_choices()));
    }
    if (!run_blocks) return;
    validate(c.data);
    if (!c.data.synthetic.empty()) {
      if (!c.model.encoder_only())
        throw ConfigError("data.synthetic", fmt::format("{} trains an encoder: model.type bert or albert, not {}",
                                                        c.data.synthetic, c.model.type));
      if (c.data.sentence_task != "none")
        throw ConfigError("data.sentence_task", fmt::format("'{}' is not allowed with data.synthetic {}; allowed: none",
                                                            c.data.sentence_task, c.data.synthetic));
      const RecallOptions r = recall_options(c.data);
      if (const RecallProblem p = recall_options_problem(r); !p.key.empty()) throw ConfigError(p.key, p.message);
      if (c.model.vocab_size > 0 && c.model.vocab_size < r.vocab_size)
        throw ConfigError("model.vocab_size", fmt::format("{} is smaller than data.recall.vocab_size {}",
                                                          c.model.vocab_size, r.vocab_size));
    }
    validate(c.checkpoint);
    validate(c.eval);
  });
  pc.model = rc.model;
  pc.data = rc.data;
  pc.train = rc.train;
  pc.optimizer = rc.optimizer;
  pc.checkpoint = rc.checkpoint;
  pc.eval = rc.eval;
  pc.yaml = cfg::to_yaml(rc);
  return pc;
}

}  // namespace

PretrainConfig load_pretrain_config(ConfigTree& tree, std::string* yaml_out) {
  PretrainConfig pc = load(tree, true);
  if (yaml_out) *yaml_out = pc.yaml;
  return pc;
}

PretrainConfig load_model_config(ConfigTree& tree) { return load(tree, false); }

namespace {

// The text as a tree, old keys migrated.
ConfigTree stored_tree(const std::string& yaml, const std::string& origin) {
  YAML::Node stored;
  try {
    stored = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    throw InputError(fmt::format("{}: not valid YAML ({})", origin, e.what()));
  }
  if (stored.IsMap() && stored["model"] && stored["model"]["attention_dropout"]) {
    const YAML::Node v = stored["model"]["attention_dropout"];
    stored["model"].remove("attention_dropout");
    if (!stored["attention"]["dropout"]) stored["attention"]["dropout"] = v;
  }
  YAML::Emitter emit;
  emit << stored;
  ConfigTree tree;
  tree.merge_text(emit.c_str(), origin);
  return tree;
}

}  // namespace

PretrainConfig pretrain_config_from_text(const std::string& yaml, const std::string& origin) {
  ConfigTree tree = stored_tree(yaml, origin);
  return load_pretrain_config(tree);
}

std::string normalize_pretrain_yaml(const std::string& yaml, const std::string& origin) {
  ConfigTree tree = stored_tree(yaml, origin);
  inherit_attention(tree);
  return cfg::to_yaml(load_config<RunConfig>(tree, [](const RunConfig&) {}));
}

std::string to_yaml(const PretrainConfig& c) {
  RunConfig rc;
  rc.model = c.model;
  rc.attention = c.attention.encoder_self;
  if (!c.model.encoder_only()) {
    rc.attention_encoder_self = c.attention.encoder_self;
    rc.attention_decoder_self = c.attention.decoder_self;
    rc.attention_encoder_decoder = c.attention.encoder_decoder;
  }
  rc.data = c.data, rc.train = c.train, rc.optimizer = c.optimizer;
  rc.checkpoint = c.checkpoint, rc.eval = c.eval;
  return cfg::to_yaml(rc);
}

PretrainConfig& finish(PretrainConfig& c) {
  c.yaml = to_yaml(c);
  validate(c.model);
  c.spec = resolve_attention_spec(c.model, c.attention,
                                  c.model.encoder_only() ? AttentionPaths{}
                                                         : AttentionPaths{"attention_encoder_self", "attention_decoder_self",
                                                                          "attention_encoder_decoder"});
  c.spec_of = spec_source(c.model, c.attention);
  return c;
}

PretrainConfig with_dropouts(PretrainConfig c, double p, double a) {
  c.model.dropout = p, c.model.ff_dropout = p;
  c.attention.encoder_self.dropout = a, c.attention.decoder_self.dropout = a, c.attention.encoder_decoder.dropout = a;
  c.spec.model = c.model;
  c.spec.encoder_self.dropout = a, c.spec.decoder_self.dropout = a, c.spec.encoder_decoder.dropout = a;
  if (!c.spec_of.empty()) c.spec_of = spec_source(c.model, c.attention);  // (an unresolved one stays so)
  return c;
}

void check_spec(const PretrainConfig& c) {
  if (c.spec_of.empty() || c.spec_of != spec_source(c.model, c.attention))
    throw std::logic_error("PretrainConfig: the model or attention changed after its spec was resolved (or it "
                           "was never resolved); load it, or call finish() after changing it");
}

int64_t trained_outputs(const PretrainConfig& c) {
  if (!c.data.synthetic.empty()) return recall_options(c.data).queries;
  return c.model.encoder_only() ? c.data.max_predictions_per_seq : c.data.targets_length;
}

StepMemory step_memory(const PretrainConfig& c) {
  StepMemory s;
  s.optimizer_copies = optimizer_state_copies(c.optimizer), s.accumulates = c.train.grad_accum > 1;
  s.statistics = optimizer_statistics(c.optimizer);
  return s;
}

void check_data_tokenizer(const PretrainConfig& c, int64_t data_vocab, const std::string& convention) {
  if (c.model.vocab_size > 0 && c.model.vocab_size < data_vocab)
    throw ConfigError("model.vocab_size", fmt::format("{} is smaller than the vocabulary of data.prepared {} ({} ids); "
                                                      "set it to 0 (the data's) or at least {}",
                                                      c.model.vocab_size, c.data.prepared, data_vocab, data_vocab));
  require_prepared_convention(c.data.prepared, convention, c.model.encoder_only() ? "albert" : "t5");
}

}  // namespace thx
