// optimizer.h: Adafactor with Mesh TensorFlow's semantics, the Adam family (AdamW; BERT's
// AdamWeightDecay; LAMB as ALBERT's code), and the learning-rate schedules: the paper's
// (section 7.1) and BERT's/ALBERT's warmup + polynomial decay.
//
// Adafactor (Shazeer & Stern, 2018), as mesh_tensorflow/optimize.py applies it, step t from 1:
//   decay = 1 - t^-0.8            (so decay = 0 at t = 1)
//   g2 = g^2 + 1e-30
//   factored (the two largest dims d0 >= d1 of the variable's shape, both >= 128; ties keep
//   their order):  vr = decay vr + (1-decay) mean_{d0}(g2)   (shape without d0)
//                  vc = decay vc + (1-decay) mean_{d1}(g2)   (shape without d1)
//                  x = g * rsqrt(vr / mean_{d1}(vr)) * rsqrt(vc)
//   otherwise:     v = decay v + (1-decay) g2,  x = g * rsqrt(v)
//   x /= max(1, rms(x) / clipping_threshold)
//   u = lr * max(rms(W), 1e-3) * x   (the parameter scale of the value before the update)
//   with beta1: m = beta1 m + (1-beta1) u, u = m
//   W -= u
//
// Which shape decides factoring is the variable's "view": P_q, P_k, P_v and P_o are seen per
// head ([d, d_k, h], the paper's shape) or combined ([d, d_k*h]), as optimizer.factor_attention
// says; mesh_tf does what the paper's code did: combined for multi_head, per head for the
// talking-heads family. P_l and P_w are never factored.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "training/config.h"

namespace thx {

struct VariantSpec;  // attention/registry.h

struct OptimizedParam {
  std::string path;             // module path, "encoder/layers/0/self_attention/P_q"
  torch::Tensor param;
  std::vector<int64_t> view;    // the shape whose dims decide factoring (numel unchanged)
  bool never_factor = false;
  bool no_decay = false;        // Adam family: no weight decay and no LAMB trust ratio
  double lr_scale = 1.0;        // its learning rate is lr * lr_scale (optimizer.mixing_lr_multiplier)
};

// The parameters of `model` (as `params` lists them, by path) as the optimizer takes them: the
// rule of each attention layer's registry row (attention/registry.h's param_role) decides which
// are never factored and learn at optimizer.mixing_lr_multiplier (P_l, P_w), and which are
// factored as [d, d_k*h] (P_q..P_o under optimizer.factor_attention combined, or mesh_tf where
// the row says so); optimizer.no_decay names the ones without weight decay. A multiplier other
// than 1 on a model without P_l or P_w is an InputError.
std::vector<OptimizedParam> optimized_params(torch::nn::Module& model,
                                             const std::vector<std::pair<std::string, torch::Tensor>>& params,
                                             const OptimizerConfig& c);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update from the params' .grad(), at learning rate lr. Increments step().
  virtual void step(double lr) = 0;
  int64_t steps() const { return step_; }
  // State tensors by name ("<path>/vr", "<path>/v", "<path>/m", ...), for checkpoints and
  // probe files; load_state() restores exactly what state() returned.
  virtual std::map<std::string, torch::Tensor> state() const = 0;
  virtual void load_state(const std::map<std::string, torch::Tensor>& s, int64_t step) = 0;
  // Adafactor: use the fused loops (default) or the ATen composition (the reference).
  virtual void set_fused(bool) {}

 protected:
  int64_t step_ = 0;
};

// BERT's and ALBERT's tf.clip_by_global_norm, before the update: the norm of all gradients
// together, n = sqrt(Σ_t ||g_t||²) (each ||g_t|| in the gradient's dtype, their squares summed
// in float64); when max_norm > 0 and n > max_norm, every gradient is multiplied by
// max_norm / n. Returns n, measured before clipping. A non-finite n clips nothing (the loss
// check stops such a run). Data parallel: call it on the all-reduced gradients, which every
// rank holds alike.
double clip_grad_global_norm(const std::vector<torch::Tensor>& params, double max_norm);

struct AdafactorOptions {
  double decay_exponent = 0.8, epsilon1 = 1e-30, epsilon2 = 1e-3, clipping_threshold = 1.0;
  std::optional<double> beta1;
  int64_t min_dim_size_to_factor = 128;
  // Parameters off the CPU update in groups of equal views (adafactor_grouped.h); this does
  // the same on the CPU (the tests' way to check that path against the others).
  bool group_on_cpu = false;
};

std::unique_ptr<Optimizer> make_adafactor(std::vector<OptimizedParam> params, AdafactorOptions o);
// The Adam family (optimizer.cpp states the update). AdamW: bias_correction, no trust ratio.
// BERT's AdamWeightDecayOptimizer: neither. LAMB as ALBERT's lamb_optimizer.py: trust ratio
// |W|/|u| per tensor, no bias correction; no_decay parameters (layer norms, biases) get
// neither weight decay nor the trust ratio, as ALBERT excludes them from both.
struct AdamOptions {
  double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-6, weight_decay = 0.0;
  bool bias_correction = true, trust_ratio = false;
  // Parameters off the CPU update together (adam_multi_tensor.h); this does the same on the
  // CPU (the tests' way to check that path against the others).
  bool multi_tensor_on_cpu = false;
};
std::unique_ptr<Optimizer> make_adam(std::vector<OptimizedParam> params, AdamOptions o);
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& c, std::vector<OptimizedParam> params);
// The fp32 copies of its parameters `c`'s optimizer keeps, for the memory bound
// (models/spec.h's StepMemory): Adam's and LAMB's m and v, 2; Adafactor's momentum, 1 with beta1
// and else 0; its statistics are optimizer_statistics'.
double optimizer_state_copies(const OptimizerConfig& c);

// The two dims Adafactor reduces over for this view, {d0, d1}, or nullopt if not factored.
std::optional<std::pair<int64_t, int64_t>> factored_dims(const std::vector<int64_t>& view,
                                                         int64_t min_dim_size = 128);
// The view by which Adafactor factors a parameter of `shape` (optimized_params's rule): an
// attention projection (P_q, P_k, P_v or P_o of the variant `projection_of`) is seen combined,
// [d, d_k*h], under optimizer.factor_attention combined, or mesh_tf where the variant's row says
// so, else per head, [d, d_k, h]; any other parameter (nullptr) as it is.
std::vector<int64_t> optimizer_view(const std::vector<int64_t>& shape, const VariantSpec* projection_of,
                                    const std::string& factor_attention);
// For the memory bound (models/spec.h's StepMemory::statistics): the elements of the
// second-moment statistics `c`'s optimizer keeps for a parameter of `shape` beyond
// optimizer_state_copies: Adafactor's, a row and a column of its view where factored, else the
// whole view; none for the Adam family (an empty function).
std::function<double(const std::vector<int64_t>&, const VariantSpec*)> optimizer_statistics(const OptimizerConfig& c);

// lr_t for step t (from 1) of T:
//   inverse_sqrt: c * rsqrt(max(t, warmup)) * min(1, (T - t) / (fraction * T))  (the paper's T5)
//   constant:     c                                                          (fine-tuning)
//   polynomial:   c * t / warmup for t < warmup, else
//                 (c - end) * (1 - t/T)^power + end      (BERT and ALBERT: power 1, end 0;
//                 their global_step is t - 1, so their first update, at rate 0, is skipped)
double learning_rate(const OptimizerConfig& c, int64_t t, int64_t total_steps);

}  // namespace thx
