#include "models/encoder.h"

#include <cmath>

#include "attention/factory.h"
#include "attention/projected.h"
#include "common/error.h"
#include "common/precision.h"
#include "models/loss.h"
#include "models/t5.h"

// Shapes: b examples, n positions, E embedding size, d = d_model, d_ff, V vocabulary, P masked
// positions per example, h softmax heads, R relative buckets. Parameter shapes are in the code.
namespace thx {

using torch::Tensor;

namespace {

constexpr double kLayerNormEps = 1e-12;

// N(0, std) truncated at 2 std (TensorFlow's truncated_normal): out-of-range draws are redrawn.
void init_truncated(Tensor& p, double std) {
  torch::NoGradGuard g;
  p.normal_(0, std);
  for (int i = 0; i < 100; ++i) {
    const Tensor bad = p.abs() > 2 * std;  // like p
    const int64_t k = bad.sum().item<int64_t>();
    if (k == 0) break;
    p.masked_scatter_(bad, torch::randn({k}) * std);  // [k] redrawn
  }
}

Tensor layer_norm(const Tensor& x, const Tensor& scale, const Tensor& bias) {
  return torch::layer_norm(x, {x.size(-1)}, scale, bias, kLayerNormEps);  // [..., d] over the last dim
}

}  // namespace

void init_truncated_normal(Tensor& p, double std) { init_truncated(p, std); }

EncoderLayerImpl::EncoderLayerImpl(const ModelConfig& c, const AttentionDims& dims) : dropout_(c.dropout) {
  const int64_t d = c.d_model;
  const double init = c.init_std_value();  // BERT's initializer_range
  attention = register_module("attention", make_attention(dims));
  if (auto* p = dynamic_cast<ProjectedAttention*>(attention.get())) {
    torch::NoGradGuard g;  // BERT's initializer, with P_q carrying 1/sqrt(d_k)
    init_truncated(p->P_q, init / std::sqrt(double(dims.d_k)));
    init_truncated(p->P_k, init);
    init_truncated(p->P_v, init);
    init_truncated(p->P_o, init);
  }
  attention_norm_scale = register_parameter("attention_norm/scale", torch::ones({d}));
  attention_norm_bias = register_parameter("attention_norm/bias", torch::zeros({d}));
  wi = register_parameter("ff/wi", torch::empty({d, c.d_ff}));
  bias_i = register_parameter("ff/bias_i", torch::zeros({c.d_ff}));
  wo = register_parameter("ff/wo", torch::empty({c.d_ff, d}));
  bias_o = register_parameter("ff/bias_o", torch::zeros({d}));
  init_truncated(wi, init);
  init_truncated(wo, init);
  ff_norm_scale = register_parameter("ff_norm/scale", torch::ones({d}));
  ff_norm_bias = register_parameter("ff_norm/bias", torch::zeros({d}));
}

Tensor EncoderLayerImpl::forward(Tensor x, const Tensor& bias, const Tensor& mask) {
  auto drop = [&](const Tensor& t) {
    return dropout_ > 0 && is_training() ? torch::dropout(t, dropout_, true) : t;
  };
  // x, the residual stream and the layer norms' input, stays fp32; the attention and the
  // feed-forward products run in the compute dtype (common/precision.h).
  x = layer_norm(plus(x, drop(attention->forward(x, x, bias, mask))), attention_norm_scale,
                 attention_norm_bias);                                           // [b,n,d] (post-LN)
  const Tensor h = torch::gelu(torch::addmm(to_compute(bias_i), to_compute(x.reshape({-1, x.size(-1)})),
                                            to_compute(wi)));                    // [b*n,d_ff]
  const Tensor f = torch::addmm(to_compute(bias_o), h, to_compute(wo)).view(x.sizes());  // [b,n,d]
  return layer_norm(plus(x, drop(f)), ff_norm_scale, ff_norm_bias);                   // [b,n,d]
}

namespace {

// Activation recomputation: the forward pass keeps only the layer's inputs; the backward pass
// runs the layer again with gradients on (restoring the RNG, so dropout draws the same mask)
// and back-propagates through that copy. Parameter gradients accumulate directly.
// A layer without a bias (absolute positions) gets an empty tensor in its place: LibTorch's
// Function::apply reads the device of every tensor argument, and an undefined one has none.
struct RecomputeFn : torch::autograd::Function<RecomputeFn> {
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& x, const Tensor& bias_or_empty,
                        const Tensor& mask, EncoderLayerImpl* layer) {
    const Tensor bias = bias_or_empty.numel() > 0 ? bias_or_empty : Tensor();
    ctx->saved_data["layer"] = reinterpret_cast<int64_t>(layer);
    ctx->saved_data["rng"] = at::detail::getDefaultCPUGenerator().get_state();
    ctx->saved_data["dtype"] = int64_t(compute_dtype());  // the recomputation runs at the same precision
    ctx->save_for_backward({x, bias, mask});
    return layer->forward(x, bias, mask);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* layer = reinterpret_cast<EncoderLayerImpl*>(ctx->saved_data["layer"].toInt());
    const auto saved = ctx->get_saved_variables();
    Tensor x = saved[0].detach().requires_grad_(true);  // [b,n,d]: the layer's input, a leaf
    Tensor bias = saved[1].defined() ? saved[1].detach().requires_grad_(saved[1].requires_grad()) : Tensor();  // [1,h,n,n]
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    const Tensor rng_now = gen.get_state();
    gen.set_state(ctx->saved_data["rng"].toTensor());
    Tensor y;
    {
      torch::AutoGradMode on(true);
      PrecisionScope precision(torch::ScalarType(ctx->saved_data["dtype"].toInt()));
      y = layer->forward(x, bias, saved[2]);  // [b,n,d], with a graph this time
    }
    gen.set_state(rng_now);
    torch::autograd::backward({y}, {grads[0]});
    return {x.grad(), bias.defined() && bias.requires_grad() ? bias.grad() : Tensor(), Tensor(),
            Tensor()};
  }
};

}  // namespace

EncoderModelImpl::EncoderModelImpl(const ModelSpec& spec, int64_t vocab_size, bool sentence_head)
    : config_(spec.model), vocab_size_(vocab_size) {
  const ModelConfig& c = spec.model;
  validate(c);
  THX_CHECK(c.encoder_only(), "model.type '{}' is not an encoder-only model", c.type);
  THX_CHECK(vocab_size >= 8, "{}: vocabulary size {} is too small", c.type, vocab_size);
  const int64_t d = c.d_model;
  E_ = c.embedding_size > 0 ? c.embedding_size : d;
  const AttentionDims& dims = spec.encoder_self;  // dense biases as the variant's row says
  heads_ = dims.h;
  auto param = [&](const std::string& name, std::vector<int64_t> shape) {
    Tensor p = register_parameter(name, torch::empty(shape));
    init_truncated(p, c.init_std_value());
    return p;
  };
  word = param("embeddings/word", {(vocab_size + 127) / 128 * 128, E_});
  if (c.positions == "absolute") position_ = param("embeddings/position", {c.max_positions, E_});
  type_ = param("embeddings/type", {c.type_vocab_size, E_});
  emb_norm_scale_ = register_parameter("embeddings/norm/scale", torch::ones({E_}));
  emb_norm_bias_ = register_parameter("embeddings/norm/bias", torch::zeros({E_}));
  if (c.type == "albert" || E_ != d) {  // ALBERT's embedding_hidden_mapping_in
    emb_w_ = param("embeddings/projection/w", {E_, d});
    emb_b_ = register_parameter("embeddings/projection/bias", torch::zeros({d}));
  }
  if (c.positions == "relative") {  // Glorot uniform, as t5.h
    relative_attention_bias_ = register_parameter("encoder/relative_attention_bias",
                                                  torch::empty({dims.h, c.relative_buckets}));
    const double limit = std::sqrt(6.0 / double(dims.h + c.relative_buckets));
    torch::NoGradGuard g;
    relative_attention_bias_.uniform_(-limit, limit);
  }
  const bool shared = c.type == "albert";
  const int64_t units = shared ? c.hidden_groups : c.encoder_layers;
  for (int64_t u = 0; u < units; ++u)
    units_.push_back(register_module(fmt::format("encoder/{}/{}", shared ? "groups" : "layers", u),
                                     std::make_shared<EncoderLayerImpl>(c, dims)));
  pool_w_ = param("pooler/w", {d, d});
  pool_b_ = register_parameter("pooler/bias", torch::zeros({d}));
  mlm_w_ = param("mlm/w", {d, E_});
  mlm_b_ = register_parameter("mlm/bias", torch::zeros({E_}));
  mlm_norm_scale_ = register_parameter("mlm/norm/scale", torch::ones({E_}));
  mlm_norm_bias_ = register_parameter("mlm/norm/bias", torch::zeros({E_}));
  mlm_output_bias_ = register_parameter("mlm/output_bias", torch::zeros({vocab_size}));
  if (sentence_head) {
    sent_w_ = param("sentence/w", {d, 2});
    sent_b_ = register_parameter("sentence/bias", torch::zeros({2}));
  }
}

int64_t EncoderModelImpl::group_of(int64_t l) const {
  if (config_.type != "albert") return l;
  return l * config_.hidden_groups / config_.encoder_layers;  // ALBERT: int(l / L * G)
}

EncoderLayerImpl& EncoderModelImpl::layer(int64_t l) { return *units_.at(size_t(group_of(l))); }

Tensor EncoderModelImpl::encode(const Tensor& ids, const Tensor& types) {
  const int64_t B = ids.size(0), n = ids.size(1);
  TORCH_CHECK(!position_.defined() || n <= position_.size(0), "encoder: ", n,
              " positions, but model.max_positions is ", position_.size(0));
  Tensor x = torch::embedding(word, ids) + torch::embedding(type_, types);  // [b,n,E]
  if (position_.defined()) x = x + position_.narrow(0, 0, n);               // + [n,E]
  x = layer_norm(x, emb_norm_scale_, emb_norm_bias_);                        // [b,n,E]
  if (config_.dropout > 0 && is_training()) x = torch::dropout(x, config_.dropout, true);
  if (emb_w_.defined()) x = to_fp32(torch::matmul(to_compute(x), to_compute(emb_w_))) + emb_b_;  // [b,n,d]
  Tensor bias;
  if (relative_attention_bias_.defined()) {
    const Tensor buckets = relative_position_buckets(n, n, true, config_.relative_buckets,
                                                     config_.relative_max_distance)
                                 .to(relative_attention_bias_.device());  // [n,n]
    bias = relative_attention_bias_.index_select(1, buckets.flatten()).view({1, -1, n, n});  // [1,h,n,n]
  }
  const Tensor mask = (ids != 0).view({B, 1, 1, n});  // [b,1,1,n]
  for (int64_t l = 0; l < config_.encoder_layers; ++l) {
    EncoderLayerImpl& unit = layer(l);
    x = config_.recompute && is_training() && torch::GradMode::is_enabled()
            ? RecomputeFn::apply(x, bias.defined() ? bias : torch::empty({0}, x.options()), mask, &unit)
            : unit.forward(x, bias, mask);  // [b,n,d]
  }
  return x;
}

Tensor EncoderModelImpl::pooled(const Tensor& hidden) {
  return torch::tanh(torch::addmm(to_compute(pool_b_), to_compute(hidden.select(1, 0)), to_compute(pool_w_)));  // [b,d] from [CLS]
}

EncoderModelImpl::Output EncoderModelImpl::forward(const Tensor& ids, const Tensor& types,
                                                   const Tensor& positions, const Tensor& targets,
                                                   const Tensor& labels) {
  Output out;
  const Tensor x = encode(ids, types);                                           // [b,n,d]
  const int64_t B = x.size(0), P = positions.size(1), d = x.size(2);
  const Tensor picked = x.gather(1, positions.unsqueeze(-1).expand({B, P, d}));  // [b,P,d]
  Tensor h = torch::gelu(to_fp32(torch::matmul(to_compute(picked), to_compute(mlm_w_))) + mlm_b_);  // [b,P,E]
  h = layer_norm(h, mlm_norm_scale_, mlm_norm_bias_);                             // [b,P,E]
  const Tensor logits = torch::matmul(to_compute(h), to_compute(word.narrow(0, 0, vocab_size_).t())) +
                        to_compute(mlm_output_bias_);                             // [b,P,V]: the loss is fp32 inside
  const Tensor flat_targets = targets.reshape({-1});                                              // [b*P]
  const LossSums s = cross_entropy_z_loss(logits.view({-1, vocab_size_}), flat_targets,
                                          config_.z_loss_value());                                // [b*P,V]
  const Tensor real = flat_targets != 0;                                                          // [b*P]
  out.mlm_tokens = real.sum().item<int64_t>();
  out.mlm_nll_sum = s.nll_sum;
  {
    torch::NoGradGuard g;
    out.mlm_correct =
        ((logits.view({-1, vocab_size_}).argmax(-1) == flat_targets) & real).sum().item<int64_t>();
  }
  out.loss = out.mlm_loss = s.loss_sum / double(std::max<int64_t>(out.mlm_tokens, 1));
  out.sentence_nll_sum = torch::zeros({}, x.options().dtype(torch::kFloat32));
  if (sent_w_.defined() && labels.defined()) {
    const Tensor has = labels >= 0;  // [b]
    out.sentence_count = has.sum().item<int64_t>();
    if (out.sentence_count > 0) {
      const Tensor sl = to_fp32(torch::addmm(to_compute(sent_b_), pooled(x), to_compute(sent_w_)));  // [b,2]
      const Tensor nll = -torch::log_softmax(sl, -1).gather(1, labels.clamp_min(0).unsqueeze(1)).squeeze(1);  // [b]
      out.sentence_nll_sum = (nll * has).sum();
      out.sentence_loss = out.sentence_nll_sum / double(out.sentence_count);
      out.loss = out.loss + out.sentence_loss;
      torch::NoGradGuard g;
      out.sentence_correct = ((sl.argmax(-1) == labels) & has).sum().item<int64_t>();
    }
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> EncoderModelImpl::named_parameters_by_path() const {
  return parameters_by_path(*this);
}


}  // namespace thx
