#include "training/config.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/error.h"

namespace thx {
namespace {

void at_least(const char* key, int64_t v, int64_t lo) {
  if (v < lo) throw ConfigError(key, fmt::format("{} is invalid: must be >= {}", v, lo));
}

void one_of(const char* key, const std::string& v, std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (v == a) return;
    list += std::string(list.empty() ? "" : ", ") + a;
  }
  throw ConfigError(key, fmt::format("'{}' is not allowed; allowed: {}", v, list));
}

}  // namespace

RecallOptions recall_options(const DataConfig& d) {
  RecallOptions r = d.recall.value_or(RecallOptions{});
  r.length = d.inputs_length;
  return r;
}

void validate(const DataConfig& c) {
  if (!c.synthetic.empty() && c.synthetic != "associative_recall")
    throw ConfigError("data.synthetic", fmt::format("'{}' is not allowed; allowed: associative_recall (or unset: "
                                                    "data.prepared)", c.synthetic));
  if (c.prepared.empty() && c.synthetic.empty())
    throw ConfigError("data.prepared", "is required: the directory written by `thx prepare` (or data.synthetic)");
  at_least("data.inputs_length", c.inputs_length, 4);
  at_least("data.targets_length", c.targets_length, 2);
  if (!(c.noise_density > 0 && c.noise_density < 1))
    throw ConfigError("data.noise_density", fmt::format("{} is invalid: must be in (0, 1)", c.noise_density));
  if (!(c.masked_lm_prob > 0 && c.masked_lm_prob < 1))
    throw ConfigError("data.masked_lm_prob", fmt::format("{} is invalid: must be in (0, 1)", c.masked_lm_prob));
  at_least("data.max_predictions_per_seq", c.max_predictions_per_seq, 1);
  at_least("data.max_ngram", c.max_ngram, 1);
  if (!(c.short_seq_prob >= 0 && c.short_seq_prob <= 1))
    throw ConfigError("data.short_seq_prob", fmt::format("{} is invalid: must be in [0, 1]", c.short_seq_prob));
  one_of("data.sentence_task", c.sentence_task, {"sop", "nsp", "none"});
  if (!(c.mean_noise_span_length >= 1))
    throw ConfigError("data.mean_noise_span_length", fmt::format("{} is invalid: must be >= 1", c.mean_noise_span_length));
}

void validate(const TrainConfig& c) {
  at_least("train.steps", c.steps, 1);
  at_least("train.batch_size", c.batch_size, 1);
  at_least("train.grad_accum", c.grad_accum, 1);
  at_least("train.log_every", c.log_every, 1);
  if (c.batch_size % c.grad_accum)
    throw ConfigError("train.grad_accum", fmt::format("{} does not divide train.batch_size {}",
                                                      c.grad_accum, c.batch_size));
  if (!c.device.empty()) one_of("train.device", c.device, {"cpu", "cuda", "auto"});
  one_of("train.precision", c.precision, {"fp32", "bf16"});
}

void validate(const OptimizerConfig& c) {
  one_of("optimizer.name", c.name, {"adafactor", "adamw", "lamb"});
  one_of("optimizer.schedule", c.schedule, {"inverse_sqrt", "constant", "polynomial"});
  if (!(c.power > 0))
    throw ConfigError("optimizer.power", fmt::format("{} is invalid: must be > 0", c.power));
  // (learning_rate first: end_learning_rate is judged against it)
  if (!(c.learning_rate > 0))
    throw ConfigError("optimizer.learning_rate", fmt::format("{} is invalid: must be > 0", c.learning_rate));
  if (!(c.end_learning_rate >= 0 && c.end_learning_rate <= c.learning_rate))
    throw ConfigError("optimizer.end_learning_rate",
                      fmt::format("{} is invalid: must be in [0, learning_rate]", c.end_learning_rate));
  one_of("optimizer.factor_attention", c.factor_attention, {"mesh_tf", "combined", "per_head"});
  at_least("optimizer.warmup_steps", c.warmup_steps, 1);
  if (!(c.decay_fraction >= 0 && c.decay_fraction <= 1))
    throw ConfigError("optimizer.decay_fraction", fmt::format("{} is invalid: must be in [0, 1]", c.decay_fraction));
  if (c.beta1 && !(*c.beta1 >= 0 && *c.beta1 < 1))
    throw ConfigError("optimizer.beta1", fmt::format("{} is invalid: must be in [0, 1) or null", *c.beta1));
  if (!(c.clipping_threshold > 0))
    throw ConfigError("optimizer.clipping_threshold", fmt::format("{} is invalid: must be > 0", c.clipping_threshold));
  if (c.clip_global_norm && !(*c.clip_global_norm >= 0 && std::isfinite(*c.clip_global_norm)))
    throw ConfigError("optimizer.clip_global_norm",
                      fmt::format("{} is invalid: must be >= 0 (0: off), or null (1.0 for bert and albert, off for t5)",
                                  *c.clip_global_norm));
  if (!(c.weight_decay >= 0))
    throw ConfigError("optimizer.weight_decay", fmt::format("{} is invalid: must be >= 0", c.weight_decay));
  for (auto [k, v] : {std::pair{"optimizer.adam_beta1", c.adam_beta1}, std::pair{"optimizer.adam_beta2", c.adam_beta2}})
    if (!(v >= 0 && v < 1)) throw ConfigError(k, fmt::format("{} is invalid: must be in [0, 1)", v));
  if (!(c.adam_epsilon > 0))
    throw ConfigError("optimizer.adam_epsilon", fmt::format("{} is invalid: must be > 0", c.adam_epsilon));
  if (!(c.mixing_lr_multiplier >= 0 && c.mixing_lr_multiplier <= 1000))
    throw ConfigError("optimizer.mixing_lr_multiplier",
                      fmt::format("{} is invalid: must be in [0, 1000] (0 freezes P_l and P_w at their "
                                  "initialization)", c.mixing_lr_multiplier));
}

void validate(const CheckpointConfig& c) {
  at_least("checkpoint.every", c.every, 1);
  at_least("checkpoint.keep", c.keep, 1);
}

int64_t eval_batch_rows(const EvalConfig& e, const TrainConfig& t, int world_size) {
  if (e.batch_size > 0) return e.batch_size;
  return std::max<int64_t>(1, t.batch_size / std::max<int64_t>(1, t.grad_accum * world_size));
}

void validate(const EvalConfig& c) {
  at_least("eval.every", c.every, 1);
  at_least("eval.examples", c.examples, 1);
  at_least("eval.batch_size", c.batch_size, 0);
  if (!c.precision.empty()) one_of("eval.precision", c.precision, {"fp32", "bf16"});
}

}  // namespace thx
