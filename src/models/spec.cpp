#include "models/spec.h"

#include "attention/fused.h"
#include "attention/registry.h"
#include "common/error.h"
#include "common/log.h"
#include "common/runtime.h"

#include <algorithm>

namespace thx {

ModelSpec resolve_attention_spec(const ModelConfig& model, const T5Attention& attention, const AttentionPaths& paths) {
  ModelSpec s;
  s.model = model;
  const int64_t d = model.d_model;
  s.encoder_self = resolve(attention.encoder_self, d, d, d, paths.encoder_self);
  if (model.encoder_only()) {
    s.encoder_self.biases = s.encoder_self.variant->dense_biases;  // BERT's dense-layer biases
    return s;
  }
  s.decoder_self = resolve(attention.decoder_self, d, d, d, paths.decoder_self);
  s.encoder_decoder = resolve(attention.encoder_decoder, d, d, d, paths.encoder_decoder);
  return s;
}

ModelSpec resolve_model_spec(const ModelConfig& model, const T5Attention& attention) {
  validate(model);
  // BERT/ALBERT have one attention block: its errors name `attention`.
  return resolve_attention_spec(model, attention,
                                {model.encoder_only() ? "attention" : "attention_encoder_self",
                                 "attention_decoder_self", "attention_encoder_decoder"});
}

namespace {

// The sizes the bound depends on, each a config key; doubles, because absurd values overflow
// int64 when multiplied.
struct Sizes {
  double d, ff, vocab, rows, n_in, n_out, enc, dec, units, E;  // units: encoder layers with their own parameters
  double h_enc, h_dec, h_cross, att_enc, att_dec, att_cross;     // heads; projection size of a layer / d
  double qkvo_enc = 0, qkvo_dec = 0, qkvo_cross = 0;  // the widths of Q, K, V and O together (0: not counted)
  double keep_enc = 1, keep_dec = 1, keep_cross = 1;  // 1: the attention keeps its weights for backward
  double mixed_enc = 0, mixed_dec = 0, mixed_cross = 0;  // heads of the mixed weights kept beside them
  double qk_enc = 0, qk_dec = 0, qk_cross = 0;  // h_k d_k: Q's width, and K's
  // 1: bf16 on the fp32 core (attention/fused.h), which keeps Q, K, V and the weights in fp32:
  // each counted a second time at act_bytes
  double fp32_enc = 0, fp32_dec = 0, fp32_cross = 0;
  bool recompute = false;  // model.recompute: an encoder keeps its layers' inputs, and one layer at a time
  double act_bytes = 4;    // an activation's bytes: fp32, or (bf16 runs) 2
  StepMemory step;
};

// The bound's parts in bytes (the parameters, their gradients and state: fp32 in every precision).
MemoryBound bound(const Sizes& z) {
  const double f = 4.0;
  const double embedding = z.vocab * z.E;
  const double params = embedding + (z.units + z.dec) * 2 * z.d * z.ff +
                        z.d * (z.units * z.att_enc + z.dec * (z.att_dec + z.att_cross));
  const double trained = z.step.embedding_frozen ? params - embedding : params;
  const double positions = z.enc * z.n_in + z.dec * z.n_out;  // layer runs x positions
  const double enc_weights = z.keep_enc * (z.h_enc + z.mixed_enc) * z.n_in * z.n_in;  // a layer's, an example's
  const double dec_weights = z.keep_dec * (z.h_dec + z.mixed_dec) * z.n_out * z.n_out;
  const double cross_weights = z.keep_cross * (z.h_cross + z.mixed_cross) * z.n_out * z.n_in;
  const double weights = z.enc * enc_weights + z.dec * (dec_weights + cross_weights);
  // Q, K, V and O of each attention, which its backward pass needs on every path (the products'
  // inputs): an encoder layer's over its positions; encoder-decoder attention's Q and O over the
  // targets, K and V over the inputs (qkvo / 2 = h_k d_k + h_v d_v).
  // Where bf16 takes the fp32 core, Q, K, V (qkvo / 2 + h_k d_k wide) and the weights again.
  const double enc_qkvo = z.qkvo_enc * z.n_in + z.fp32_enc * ((z.qkvo_enc / 2 + z.qk_enc) * z.n_in + enc_weights);
  const double dec_qkvo = z.qkvo_dec * z.n_out + z.fp32_dec * ((z.qkvo_dec / 2 + z.qk_dec) * z.n_out + dec_weights);
  const double cross_qkvo = z.qkvo_cross / 2 * (z.n_out + z.n_in) +
                            z.fp32_cross * (z.qk_cross * z.n_out + z.qkvo_cross / 2 * z.n_in + cross_weights);
  const double qkvo = z.enc * enc_qkvo + z.dec * (dec_qkvo + cross_qkvo);
  const double kept =
      z.recompute  // the encoder's layer inputs, and one layer's own at a time
          ? z.enc * z.n_in * z.d + std::min(z.enc, 1.0) * (z.n_in * (z.d + z.ff) + enc_weights + enc_qkvo)
          : positions * (z.d + z.ff) + weights + qkvo;
  MemoryBound b;
  b.parameters = f * params, b.gradients = f * trained, b.optimizer = f * z.step.optimizer_copies * trained;
  b.buckets = z.step.data_parallel ? b.gradients : 0.0;
  b.activations = z.act_bytes * z.rows * (kept + z.n_out * z.vocab);
  b.accumulates = z.step.accumulates;
  return b;
}

// The elements of the optimizer's statistics (step.statistics) of the matrices the bound counts:
// the embedding (its rows padded to 128, as the models make it; none where frozen), each
// feed-forward's two, each attention's P_q, P_k, P_v and P_o (general bilinear's not counted).
double statistics_elements(const ModelSpec& spec, int64_t vocab, const StepMemory& step) {
  const ModelConfig& m = spec.model;
  const int64_t d = m.d_model, E = m.encoder_only() && m.embedding_size > 0 ? m.embedding_size : d;
  double n = step.embedding_frozen ? 0.0 : step.statistics({(vocab + 127) / 128 * 128, E}, nullptr);
  auto layer = [&](const AttentionDims& a, bool feed_forward) {
    if (feed_forward) n += step.statistics({d, m.d_ff}, nullptr) + step.statistics({m.d_ff, d}, nullptr);
    if (a.d_k == 0) return;
    n += 2 * step.statistics({d, a.d_k, a.h_k}, a.variant) + 2 * step.statistics({d, a.d_v, a.h_v}, a.variant);
  };
  const int64_t units = m.type == "albert" ? m.hidden_groups : m.encoder_layers;
  for (int64_t u = 0; u < units; ++u) layer(spec.encoder_self, true);
  if (!m.encoder_only())
    for (int64_t l = 0; l < m.decoder_layers; ++l) layer(spec.decoder_self, true), layer(spec.encoder_decoder, false);
  return n;
}

}  // namespace

MemoryBound training_memory_lower_bound(const ModelSpec& spec, int64_t vocab, int64_t rows, int64_t n_in,
                                        int64_t n_out, const MemoryKeys& names, bool recompute,
                                        const torch::Device& device, bool on_tiled_path, bool bf16,
                                        const StepMemory& step) {
  const ModelConfig& m = spec.model;
  auto per_d = [](const AttentionDims& a) {  // P_q, P_k, P_v, P_o (general bilinear: P, Q) / d
    if (a.d_k == 0) return 2.0 * double(a.d_M) * double(a.h);
    return 2.0 * double(a.d_k) * double(a.h_k) + 2.0 * double(a.d_v) * double(a.h_v);
  };
  Sizes z{};
  z.d = double(m.d_model), z.ff = double(m.d_ff), z.vocab = double(vocab), z.rows = double(rows);
  z.n_in = double(n_in), z.n_out = double(n_out);
  z.act_bytes = bf16 ? 2.0 : 4.0;
  z.step = step;
  z.enc = double(m.encoder_layers), z.dec = m.encoder_only() ? 0.0 : double(m.decoder_layers);
  z.units = m.type == "albert" ? double(m.hidden_groups) : z.enc;
  z.E = m.encoder_only() && m.embedding_size > 0 ? double(m.embedding_size) : z.d;
  // General bilinear attention (d_k 0) has no Q, K, V of this shape: none counted for it.
  auto qkvo = [&](const AttentionDims& a) { return a.d_k == 0 ? 0.0 : per_d(a); };
  z.h_enc = double(spec.encoder_self.h), z.att_enc = per_d(spec.encoder_self), z.qkvo_enc = qkvo(spec.encoder_self);
  auto keeps = [&](const AttentionDims& a) {
    return (on_tiled_path ? keeps_attention_weights_on_tiled_path(a, device) : keeps_attention_weights(a, device))
               ? 1.0
               : 0.0;
  };
  // On the CPU the weights after P_w, U [h_v, n, m], are kept too: the CPU's cores keep W and U
  // (attention/fused.cpp's save_core), ATen's composition W, U and more.
  auto mixed = [&](const AttentionDims& a) { return device.is_cpu() && a.has_P_w() ? double(a.h_v) : 0.0; };
  z.keep_enc = keeps(spec.encoder_self), z.mixed_enc = mixed(spec.encoder_self);
  auto fp32_core = [&](const AttentionDims& a, int64_t keys) {
    return bf16 && bf16_on_fp32_core(a, keys, device) ? 1.0 : 0.0;
  };
  auto qk = [](const AttentionDims& a) { return double(a.h_k) * double(a.d_k); };
  z.qk_enc = qk(spec.encoder_self), z.fp32_enc = fp32_core(spec.encoder_self, n_in);
  z.recompute = recompute && m.encoder_only();
  if (!m.encoder_only()) {
    z.h_dec = double(spec.decoder_self.h), z.att_dec = per_d(spec.decoder_self);
    z.h_cross = double(spec.encoder_decoder.h), z.att_cross = per_d(spec.encoder_decoder);
    z.qkvo_dec = qkvo(spec.decoder_self), z.qkvo_cross = qkvo(spec.encoder_decoder);
    z.keep_dec = keeps(spec.decoder_self), z.keep_cross = keeps(spec.encoder_decoder);
    z.mixed_dec = mixed(spec.decoder_self), z.mixed_cross = mixed(spec.encoder_decoder);
    z.qk_dec = qk(spec.decoder_self), z.qk_cross = qk(spec.encoder_decoder);
    z.fp32_dec = fp32_core(spec.decoder_self, n_out);
    z.fp32_cross = fp32_core(spec.encoder_decoder, n_in);  // (its keys are the inputs)
  }
  MemoryBound b = bound(z);
  // (A constant in the blame below: its reductions leave it out, and it adds to each alike.)
  if (step.statistics) b.optimizer += 4.0 * statistics_elements(spec, vocab, step);
  // The setting to blame: the one whose reduction to 1 takes the most off the bound.
  const std::vector<std::pair<std::string, double Sizes::*>> keys = {
      {"model.d_ff", &Sizes::ff},           {"model.vocab_size", &Sizes::vocab},  {"model.d_model", &Sizes::d},
      {names.batch, &Sizes::rows},           {names.inputs, &Sizes::n_in},         {names.outputs, &Sizes::n_out},
      {"model.encoder_layers", &Sizes::enc}, {"model.decoder_layers", &Sizes::dec}, {"attention.h", &Sizes::h_enc}};
  double best = -1;
  for (const auto& [key, field] : keys) {
    Sizes one = z;
    one.*field = std::min(one.*field, 1.0);
    if (field == &Sizes::d) one.E = std::min(one.E, 1.0);
    if (field == &Sizes::h_enc) one.mixed_enc = std::min(one.mixed_enc, 1.0);
    const double saved = b.total() - bound(one).total();
    if (saved > best) best = saved, b.key = key;
  }
  return b;
}

std::string th_path_memory_advice(const ModelSpec& spec, const torch::Device& device) {
  std::vector<const AttentionDims*> layers = {&spec.encoder_self};
  if (!spec.model.encoder_only()) layers.push_back(&spec.decoder_self), layers.push_back(&spec.encoder_decoder);
  for (const AttentionDims* a : layers)
    if (keeps_attention_weights(*a, device) && !keeps_attention_weights_on_tiled_path(*a, device))
      return fmt::format("take `--th-path tiled`, which keeps none of the talking-heads weights [b,h,n,m] for "
                         "backward (`--th-path {}` keeps them)", th_path());
  return "";
}

std::string with_th_path_advice(const std::string& hint, const ModelSpec& spec, const torch::Device& device) {
  const std::string advice = th_path_memory_advice(spec, device);
  return advice.empty() ? hint : hint + ", or " + advice;
}

std::string memory_parts(const MemoryBound& b) {
  std::string state =
      b.optimizer > 0 ? ", the optimizer's state " + format_gb(b.optimizer) : std::string();
  if (b.buckets > 0) state += ", c10d's gradient buckets " + format_gb(b.buckets);
  if (b.accumulates)
    return fmt::format("parameters {}{}, their gradients {} and the activations of a micro-batch {}, which "
                       "train.grad_accum keeps beside the gradients",
                       format_gb(b.parameters), state, format_gb(b.gradients), format_gb(b.activations));
  return fmt::format("parameters {}{}, and the larger of their gradients, {}, and the activations of a "
                     "micro-batch, {}",
                     format_gb(b.parameters), state, format_gb(b.gradients), format_gb(b.activations));
}

std::string memory_line(const MemoryBound& b, int64_t rows, const torch::Device& device) {
  return fmt::format("memory: at least {} a process while it trains ({}; micro-batches of {} examples), of {} {}",
                     format_gb(b.total()), memory_parts(b), rows, memory_owner(device),
                     format_gb(memory_bytes(device)));
}

std::string training_memory_refusal(const ModelSpec& spec, int64_t vocab, int64_t rows, int64_t n_in, int64_t n_out,
                                    const MemoryKeys& names, const std::map<std::string, int64_t>& values,
                                    const torch::Device& device, double have, bool bf16, const StepMemory& step) {
  // An encoder's model.recompute keeps less for backward: the bound of the run as configured.
  const bool recompute = spec.model.recompute && spec.model.encoder_only();
  auto bound_with = [&](bool recomputed, bool tiled) {
    return training_memory_lower_bound(spec, vocab, rows, n_in, n_out, names, recomputed, device, tiled, bf16, step);
  };
  const MemoryBound b = bound_with(recompute, false);
  if (have <= 0 || !(b.total() > have)) return "";
  const auto it = values.find(b.key);
  const std::string named = it == values.end() ? b.key : fmt::format("{} {}", b.key, it->second);
  std::string advice = th_path_memory_advice(spec, device);
  if (!advice.empty()) {
    const MemoryBound t = bound_with(recompute, true);
    advice = fmt::format("; {}: at least {} there{}", advice, format_gb(t.total()),
                         t.total() > have ? ", which does not fit either" : "");
  }
  if (spec.model.encoder_only() && !recompute) {  // the setting that trades compute for this memory
    const MemoryBound r = bound_with(true, false);
    if (r.total() <= have)
      advice += fmt::format("; with model.recompute: true (each layer recomputed in the backward pass) at least "
                            "{}, which fits", format_gb(r.total()));
  }
  return fmt::format("{}: training needs at least {} of memory ({}), more than {} {}{}; nothing was allocated",
                     named, format_gb(b.total()), memory_parts(b), memory_owner(device), format_gb(have), advice);
}

MemoryBound check_training_memory(const ModelSpec& spec, int64_t vocab, int64_t rows, int64_t n_in, int64_t n_out,
                                  const MemoryKeys& names, const std::map<std::string, int64_t>& values,
                                  const torch::Device& device, bool bf16, const StepMemory& step) {
  const bool recompute = spec.model.recompute && spec.model.encoder_only();
  const MemoryBound b =
      training_memory_lower_bound(spec, vocab, rows, n_in, n_out, names, recompute, device, false, bf16, step);
  const std::string refusal = training_memory_refusal(spec, vocab, rows, n_in, n_out, names, values, device,
                                                      memory_bytes(device), bf16, step);
  if (!refusal.empty()) throw ConfigError::leading(b.key, refusal);  // (the line names b.key first)
  return b;
}

}  // namespace thx
