#include "models/t5.h"

#include <ATen/record_function.h>

#include <cmath>

#include "attention/factory.h"
#include "attention/kernels.h"
#include "common/error.h"
#include "common/parallel.h"
#include "common/precision.h"
#include "common/runtime.h"
#include "models/loss.h"
#ifdef THX_CUDA_KERNELS
#include "models/rms_norm_cuda.h"
#endif

// Shapes: b examples, n input positions, t target positions, L positions of one stack, s the
// decoding step, d = d_model, d_ff, V vocabulary, h softmax heads, R relative buckets.
namespace thx {

using torch::Tensor;

void validate(const ModelConfig& c, const std::string& path) {
  auto positive = [&](const char* key, int64_t v) {
    if (v < 1) throw ConfigError(path + "." + key, fmt::format("{} is invalid: must be >= 1", v));
  };
  positive("d_model", c.d_model);
  positive("d_ff", c.d_ff);
  positive("encoder_layers", c.encoder_layers);
  positive("decoder_layers", c.decoder_layers);
  positive("relative_max_distance", c.relative_max_distance);
  if (c.relative_buckets < 4 || c.relative_buckets % 2)
    throw ConfigError(path + ".relative_buckets",
                      fmt::format("{} is invalid: must be an even number >= 4", c.relative_buckets));
  if (c.vocab_size < 0)
    throw ConfigError(path + ".vocab_size", fmt::format("{} is invalid: 0 (from the tokenizer) or >= 1", c.vocab_size));
  for (auto [key, v] : {std::pair{"dropout", c.dropout}, std::pair{"ff_dropout", c.ff_dropout}})
    if (!(v >= 0 && v < 1)) throw ConfigError(path + "." + key, fmt::format("{} is invalid: must be in [0, 1)", v));
  if (!(c.z_loss_value() >= 0))
    throw ConfigError(path + ".z_loss", fmt::format("{} is invalid: must be >= 0", c.z_loss_value()));
  if (c.type != "t5" && c.type != "bert" && c.type != "albert")
    throw ConfigError(path + ".type", fmt::format("'{}' is not allowed; allowed: t5, bert, albert", c.type));
  if (c.embedding_size < 0)
    throw ConfigError(path + ".embedding_size", fmt::format("{} is invalid: 0 (d_model) or >= 1", c.embedding_size));
  if (c.hidden_groups < 1 || c.hidden_groups > c.encoder_layers)
    throw ConfigError(path + ".hidden_groups", fmt::format("{} is invalid: must be in [1, encoder_layers = {}]",
                                                           c.hidden_groups, c.encoder_layers));
  if (c.type == "albert" && c.encoder_layers % c.hidden_groups)
    throw ConfigError(path + ".hidden_groups", fmt::format("{} does not divide encoder_layers {}",
                                                           c.hidden_groups, c.encoder_layers));
  if (c.positions != "absolute" && c.positions != "relative")
    throw ConfigError(path + ".positions", fmt::format("'{}' is not allowed; allowed: absolute, relative", c.positions));
  positive("max_positions", c.max_positions);
  positive("type_vocab_size", c.type_vocab_size);
  if (c.init_std && c.type == "t5")
    throw ConfigError(path + ".init_std", "is for bert and albert; t5 initializes as Mesh TensorFlow does (section 7.1)");
  if (c.init_std && !(*c.init_std > 0 && *c.init_std <= 10))
    throw ConfigError(path + ".init_std", fmt::format("{} is invalid: must be in (0, 10]", *c.init_std));

}

int64_t relative_position_bucket(int64_t relative_position, bool bidirectional,
                                 int64_t num_buckets, int64_t max_distance) {
  int64_t ret = 0, n = -relative_position;
  if (bidirectional) {
    num_buckets /= 2;
    if (n < 0) ret += num_buckets;
    n = std::abs(n);
  } else {
    n = std::max<int64_t>(n, 0);
  }
  const int64_t max_exact = num_buckets / 2;  // half the buckets are exact distances
  if (n < max_exact) return ret + n;
  // The rest grow logarithmically up to max_distance (float32 and truncation, as T5).
  const int64_t large = max_exact + int64_t(std::log(float(n) / max_exact) /
                                            std::log(float(max_distance) / max_exact) *
                                            (num_buckets - max_exact));
  return ret + std::min(large, num_buckets - 1);
}

Tensor relative_position_buckets(int64_t n, int64_t m, bool bidirectional, int64_t num_buckets,
                                 int64_t max_distance, int64_t query_offset) {
  Tensor b = torch::empty({n, m}, torch::kInt64);  // [n,m] bucket of (query i, memory j)
  auto a = b.accessor<int64_t, 2>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j)
      a[i][j] = relative_position_bucket(j - (query_offset + i), bidirectional, num_buckets, max_distance);
  return b;
}

// ---- layers ------------------------------------------------------------------------------

RMSNormImpl::RMSNormImpl(int64_t d) { scale = register_parameter("scale", torch::ones({d})); }  // [d]

namespace {

// A row of d values of an fp32 or bf16 tensor, as fp32: the tensor's own memory when it is
// fp32, else converted into buf (bf16 paths compute on fp32 rows).
const float* fp32_row(const kernels::Ops& k, const Tensor& t, int64_t i, int64_t d, std::vector<float>& buf) {
  if (t.scalar_type() == torch::kFloat32) return t.data_ptr<float>() + i * d;
  k.bf16_to_float(reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>()) + i * d, buf.data(), d);
  return buf.data();
}
// Where to write row i as fp32: t's memory, or buf (then store_row converts it into t).
float* out_row(const Tensor& t, int64_t i, int64_t d, std::vector<float>& buf) {
  return t.scalar_type() == torch::kFloat32 ? t.data_ptr<float>() + i * d : buf.data();
}
void store_row(const kernels::Ops& k, const Tensor& t, int64_t i, int64_t d, const std::vector<float>& buf) {
  if (t.scalar_type() != torch::kFloat32)
    k.float_to_bf16(buf.data(), reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>()) + i * d, d);
}

// y = x * r * scale with r = rsqrt(mean(x^2) + 1e-6) per row; one pass forward, one backward:
//   dx = r * (dy*scale - x * r^2 * mean(dy*scale*x)),  dscale = sum over rows of dy * x * r.
// x and y are fp32 or bf16 (y in the dtype asked for); r, the sums and scale are fp32.
struct RMSNormFn : torch::autograd::Function<RMSNormFn> {
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& x_in, const Tensor& scale,
                        int64_t out_dtype) {
    const Tensor x = x_in.contiguous();  // [rows,d] as rows of the last dim
    const int64_t d = x.size(-1), rows = x.numel() / d;
    Tensor y = torch::empty(x.sizes(), x.options().dtype(torch::ScalarType(out_dtype)));  // like x
    Tensor r = torch::empty({rows}, x.options().dtype(torch::kFloat32));                   // [rows]
    const float* ps = scale.data_ptr<float>();
    float* pr = r.data_ptr<float>();
    const kernels::Ops& k = kernels::best_ops();
    thx::parallel_for(0, rows, 64, [&](int64_t a, int64_t b) {
      std::vector<float> xbuf(d), ybuf(d);
      for (int64_t i = a; i < b; ++i) {
        const float* xi = fp32_row(k, x, i, d, xbuf);
        float ss = 0;
        for (int64_t j = 0; j < d; ++j) ss += xi[j] * xi[j];
        const float ri = 1.0f / std::sqrt(ss / float(d) + 1e-6f);
        pr[i] = ri;
        float* yi = out_row(y, i, d, ybuf);
        for (int64_t j = 0; j < d; ++j) yi[j] = xi[j] * ri * ps[j];
        store_row(k, y, i, d, ybuf);
      }
    });
    ctx->save_for_backward({x, scale, r});
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const Tensor &x = s[0], &scale = s[1], &r = s[2];
    const Tensor dy = grads[0].contiguous();  // in y's dtype
    const int64_t d = x.size(-1), rows = x.numel() / d;
    const int threads = at::get_num_threads();
    Tensor dx = torch::empty_like(x);                                                   // x's dtype
    Tensor dscale = torch::zeros({threads, d}, x.options().dtype(torch::kFloat32));  // [threads,d] partial sums
    const float *ps = scale.data_ptr<float>(), *pr = r.data_ptr<float>();
    const kernels::Ops& k = kernels::best_ops();
    thx::parallel_for(0, rows, 64, [&](int64_t a, int64_t b) {
      float* ds = dscale[at::get_thread_num()].data_ptr<float>();
      std::vector<float> xbuf(d), gbuf(d), obuf(d);
      for (int64_t i = a; i < b; ++i) {
        const float *xi = fp32_row(k, x, i, d, xbuf), *gi = fp32_row(k, dy, i, d, gbuf);
        const float ri = pr[i];
        float dot = 0;
        for (int64_t j = 0; j < d; ++j) dot += gi[j] * ps[j] * xi[j], ds[j] += gi[j] * xi[j] * ri;
        const float kk = ri * ri * dot / float(d);
        float* o = out_row(dx, i, d, obuf);
        for (int64_t j = 0; j < d; ++j) o[j] = ri * (gi[j] * ps[j] - xi[j] * kk);
        store_row(k, dx, i, d, obuf);
      }
    });
    return {dx, dscale.sum(0), Tensor()};
  }
};

bool float_or_bf16(const Tensor& t) {
  return t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kBFloat16;
}

#ifdef THX_CUDA_KERNELS
// The same on a GPU: thx's own CUDA kernels (rms_norm_cuda.h).
struct RMSNormCudaFn : torch::autograd::Function<RMSNormCudaFn> {
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& x_in, const Tensor& scale,
                        int64_t out_dtype) {
    const Tensor x = x_in.contiguous();
    Tensor y = torch::empty(x.sizes(), x.options().dtype(torch::ScalarType(out_dtype)));
    Tensor r = torch::empty({x.numel() / x.size(-1)}, x.options().dtype(torch::kFloat32));
    thx::cuda::rms_norm_forward(x, scale.contiguous(), y, r);
    ctx->save_for_backward({x, scale, r});
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto s = ctx->get_saved_variables();
    Tensor dx = torch::empty_like(s[0]), dscale;
    thx::cuda::rms_norm_backward(s[0], s[1].contiguous(), s[2], grads[0].contiguous(), dx, dscale);
    return {dx, dscale, Tensor()};
  }
};
#endif

}  // namespace

// The output is bf16 in a bf16 scope (common/precision.h; a norm's output is always a matmul's
// operand), else x's dtype. The statistics are fp32 (float64 for a float64 x) either way.
Tensor RMSNormImpl::forward(const Tensor& x) {
  RECORD_USER_SCOPE("thx::rms_norm");  // (a profile's phase: experiments/step_profile.h)
  const torch::ScalarType out = output_dtype(x);
  const bool kernels = float_or_bf16(x) && scale.scalar_type() == torch::kFloat32 && cpu_kernels_enabled() &&
                       !aten_parts().rms_norm;
  if (kernels && x.device().is_cpu()) return RMSNormFn::apply(x, scale, int64_t(out));
#ifdef THX_CUDA_KERNELS
  if (kernels && x.is_cuda() && x.size(-1) <= 12288) return RMSNormCudaFn::apply(x, scale, int64_t(out));
#endif
  const Tensor x32 = to_fp32(x);
  return (x32 * torch::rsqrt(x32.pow(2).mean(-1, true) + 1e-6) * scale).to(out);  // [..., d]
}

FeedForwardImpl::FeedForwardImpl(int64_t d, int64_t d_ff, double dropout_) : dropout(dropout_) {
  wi = register_parameter("wi", torch::empty({d, d_ff}));  // [d,d_ff]
  wo = register_parameter("wo", torch::empty({d_ff, d}));  // [d_ff,d]
  init_normal(wi, 1.0 / std::sqrt(double(d)));     // fan-in variance scaling
  init_normal(wo, 1.0 / std::sqrt(double(d_ff)));
}

Tensor FeedForwardImpl::forward(const Tensor& x) {
  Tensor h = torch::relu(torch::matmul(to_compute(x), to_compute(wi)));  // [..., d_ff]
  if (dropout > 0 && is_training()) h = torch::dropout(h, dropout, true);
  return torch::matmul(h, to_compute(wo));                               // [..., d]
}

struct LayerImpl : torch::nn::Module {
  RMSNorm norm_self{nullptr}, norm_cross{nullptr}, norm_ff{nullptr};
  std::shared_ptr<Attention> self_attention, cross_attention;
  FeedForward ff{nullptr};
};

// One stack: the encoder (bidirectional bias, no cross-attention) or the decoder.
class StackImpl : public torch::nn::Module {
 public:
  // Self-attention of self_dims in every layer; cross-attention of *cross_dims (decoder).
  StackImpl(const ModelConfig& c, const AttentionDims& self_dims, const AttentionDims* cross_dims, bool decoder)
      : config_(c), decoder_(decoder) {
    const int64_t d = c.d_model;
    layers_ = register_module("layers", torch::nn::ModuleList());
    const int64_t count = decoder ? c.decoder_layers : c.encoder_layers;
    for (int64_t i = 0; i < count; ++i) {
      auto l = std::make_shared<LayerImpl>();
      l->norm_self = l->register_module("norm_self", RMSNorm(d));
      l->self_attention = l->register_module("self_attention", make_attention(self_dims));
      if (cross_dims) {
        l->norm_cross = l->register_module("norm_cross", RMSNorm(d));
        l->cross_attention = l->register_module("cross_attention", make_attention(*cross_dims));
      }
      l->norm_ff = l->register_module("norm_ff", RMSNorm(d));
      l->ff = l->register_module("ff", FeedForward(d, c.d_ff, c.ff_dropout));
      layers_->push_back(l);
      raw_.push_back(l.get());
    }
    final_norm_ = register_module("final_norm", RMSNorm(d));
    // One row per softmax head of this stack's self-attention; Glorot uniform (see t5.h).
    const int64_t h = self_dims.h;
    relative_attention_bias = register_parameter("relative_attention_bias",
                                                 torch::empty({h, c.relative_buckets}));  // [h,R]
    const double limit = std::sqrt(6.0 / double(h + c.relative_buckets));
    torch::NoGradGuard g;
    relative_attention_bias.uniform_(-limit, limit);
  }

  // x [b,L,d]; memory/memory_mask only for the decoder. Returns the normalized output.
  Tensor forward(Tensor x, const Tensor& mask, const Tensor& memory, const Tensor& memory_mask) {
    const int64_t L = x.size(1);
    const Tensor buckets = relative_position_buckets(L, L, !decoder_, config_.relative_buckets,
                                                     config_.relative_max_distance)
                                 .to(relative_attention_bias.device());  // [L,L]
    const Tensor bias = relative_attention_bias.index_select(1, buckets.flatten())  // [h, L*L]
                            .view({1, -1, L, L});                                   // [1,h,L,L]
    auto drop = [&](const Tensor& t) {
      return config_.dropout > 0 && is_training() ? torch::dropout(t, config_.dropout, true) : t;
    };
    // x, the residual stream, stays fp32; norms hand the layers their input in the compute
    // dtype, and the layers' outputs are added back in fp32 (common/precision.h).
    x = drop(x);
    for (LayerImpl* l : raw_) {
      Tensor h = l->norm_self->forward(x);                                  // [b,L,d]
      x = plus(x, drop(l->self_attention->forward(h, h, bias, mask)));      // [b,L,d]
      if (l->cross_attention) {
        h = l->norm_cross->forward(x);
        x = plus(x, drop(l->cross_attention->forward(h, memory, {}, memory_mask)));  // memory [b,n,d]
      }
      x = plus(x, drop(l->ff->forward(l->norm_ff->forward(x))));            // [b,L,d]
    }
    return drop(final_norm_->forward(x));                                   // [b,L,d]
  }

  // Decoder only: one new position (at `position`) of x [b,1,d] through every layer, with the
  // per-layer caches (self: appended; cross: the encoder output, projected once).
  Tensor decode_step(Tensor x, int64_t position, const Tensor& memory, const Tensor& memory_mask,
                     std::vector<AttentionCache>& self_caches, std::vector<AttentionCache>& cross_caches) {
    const Tensor buckets = relative_position_buckets(1, position + 1, false, config_.relative_buckets,
                                                     config_.relative_max_distance, position)
                                 .to(relative_attention_bias.device());  // [1,s+1]
    const Tensor bias = relative_attention_bias.index_select(1, buckets.flatten())  // [h, s+1]
                            .view({1, -1, 1, position + 1});                        // [1,h,1,s+1]
    for (size_t i = 0; i < raw_.size(); ++i) {
      LayerImpl* l = raw_[i];
      Tensor h = l->norm_self->forward(x);                                            // [b,1,d]
      x = plus(x, l->self_attention->forward_cached(h, h, self_caches[i], bias, {}));  // [b,1,d]
      h = l->norm_cross->forward(x);
      x = plus(x, l->cross_attention->forward_cached(h, memory, cross_caches[i], {}, memory_mask));  // [b,1,d]
      x = plus(x, l->ff->forward(l->norm_ff->forward(x)));                            // [b,1,d]
    }
    return final_norm_->forward(x);                                                    // [b,1,d]
  }
  int64_t layer_count() const { return int64_t(raw_.size()); }

  Tensor relative_attention_bias;  // [h, buckets]

 private:
  ModelConfig config_;
  bool decoder_;
  torch::nn::ModuleList layers_{nullptr};
  std::vector<LayerImpl*> raw_;
  RMSNorm final_norm_{nullptr};
};

// ---- T5 ----------------------------------------------------------------------------------

T5Impl::T5Impl(const ModelSpec& spec, int64_t vocab_size) : config_(spec.model), vocab_size_(vocab_size) {
  const ModelConfig& config = spec.model;  // validated when the spec was resolved
  THX_CHECK(vocab_size >= 2, "T5: vocabulary size {} is too small", vocab_size);
  const int64_t padded = (vocab_size + 127) / 128 * 128;
  shared = register_parameter("shared", torch::empty({padded, config.d_model}));  // [V padded to 128,d]
  init_normal(shared, 1.0);
  encoder_ = register_module("encoder", std::make_shared<StackImpl>(config, spec.encoder_self, nullptr, false));
  decoder_ = register_module("decoder",
                             std::make_shared<StackImpl>(config, spec.decoder_self, &spec.encoder_decoder, true));
}

Tensor T5Impl::logits(const Tensor& inputs, const Tensor& decoder_inputs) {
  const int64_t t = decoder_inputs.size(1);
  const Tensor enc_mask = (inputs != 0).view({inputs.size(0), 1, 1, inputs.size(1)});   // [b,1,1,n]
  const Tensor enc = encoder_->forward(torch::embedding(shared, inputs), enc_mask, {}, {});  // [b,n,d]
  const Tensor causal = torch::ones({t, t}, decoder_inputs.options().dtype(torch::kBool)).tril().view({1, 1, t, t});     // [1,1,t,t]
  const Tensor dec = decoder_->forward(torch::embedding(shared, decoder_inputs), causal, enc, enc_mask);  // [b,t,d]
  // Tied output projection, scaled by d^-1/2; only the V real rows of the embedding.
  return torch::matmul(dec * (1.0 / std::sqrt(double(config_.d_model))),
                       to_compute(shared.narrow(0, 0, vocab_size_).t()));                // [b,t,V]
}

T5Impl::Output T5Impl::forward(const Tensor& inputs, const Tensor& decoder_inputs,
                               const Tensor& targets) {
  Output out;
  out.logits = logits(inputs, decoder_inputs);                                          // [b,t,V]
  out.tokens = (targets != 0).sum().item<int64_t>();
  const double denom = std::max<int64_t>(out.tokens, 1);
  const LossSums s = cross_entropy_z_loss(out.logits.view({-1, vocab_size_}), targets.reshape({-1}),
                                          config_.z_loss_value());  // [b*t,V], [b*t]: fused (loss.h)
  out.nll_sum = s.nll_sum;
  out.nll = s.nll_sum / denom;
  out.loss = s.loss_sum / denom;
  return out;
}

Tensor T5Impl::encode(const Tensor& inputs) {
  const Tensor enc_mask = (inputs != 0).view({inputs.size(0), 1, 1, inputs.size(1)});  // [b,1,1,n]
  return encoder_->forward(torch::embedding(shared, inputs), enc_mask, {}, {});        // [b,n,d]
}

Tensor T5Impl::greedy_decode(const Tensor& inputs, int64_t max_length, int64_t eos,
                             const std::function<void(int64_t)>& on_step) {
  torch::NoGradGuard no_grad;
  const int64_t batch = inputs.size(0);
  const Tensor enc_mask = (inputs != 0).view({batch, 1, 1, inputs.size(1)});  // [b,1,1,n]
  const Tensor enc = encode(inputs);                                      // [b,n,d]
  std::vector<AttentionCache> self_caches(decoder_->layer_count()), cross_caches(decoder_->layer_count());
  for (auto& c : cross_caches) c.fixed = true;
  const auto on = inputs.options();
  std::vector<Tensor> out;  // [b,1] each step's
  Tensor token = torch::zeros({batch, 1}, on.dtype(torch::kInt64));  // [b,1]: the decoder starts from padding (id 0)
  Tensor done = torch::zeros({batch}, on.dtype(torch::kBool));       // [b]
  const Tensor output_rows = to_compute(shared.narrow(0, 0, vocab_size_).t());  // [d,V]
  const double scale = 1.0 / std::sqrt(double(config_.d_model));
  for (int64_t s = 0; s < max_length; ++s) {
    const Tensor y = decoder_->decode_step(torch::embedding(shared, token), s, enc, enc_mask, self_caches,
                                           cross_caches);                       // [b,1,d]
    const Tensor next = torch::matmul(y.squeeze(1) * scale, output_rows).argmax(-1);  // [b]
    const Tensor kept = next.masked_fill(done, 0);  // [b]
    out.push_back(kept.view({batch, 1}));
    done = done | (next == eos);
    if (on_step) on_step(s);
    if (done.all().item<bool>()) break;
    token = next.view({batch, 1});
  }
  if (out.empty()) return torch::zeros({batch, 0}, on.dtype(torch::kInt64));  // [b,0]: max_length 0
  return torch::cat(out, 1);                                                 // [b,t]
}

std::vector<std::pair<std::string, Tensor>> T5Impl::named_parameters_by_path() const {
  return parameters_by_path(*this);
}

}  // namespace thx
