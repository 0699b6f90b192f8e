#include "training/optimizer.h"

#include <cmath>

#include "common/error.h"

namespace thx {

using torch::Tensor;

std::optional<std::pair<int64_t, int64_t>> factored_dims(const std::vector<int64_t>& view,
                                                         int64_t min_dim_size) {
  if (view.size() < 2) return std::nullopt;
  std::vector<int64_t> order(view.size());
  for (size_t i = 0; i < view.size(); ++i) order[i] = int64_t(i);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return view[a] > view[b]; });
  if (view[order[1]] < min_dim_size) return std::nullopt;
  return std::pair<int64_t, int64_t>{order[0], order[1]};
}

double learning_rate(const OptimizerConfig& c, int64_t t, int64_t T) {
  if (c.schedule == "constant") return c.learning_rate;
  const double base = c.learning_rate / std::sqrt(double(std::max<int64_t>(t, c.warmup_steps)));
  const double tail = c.decay_fraction * double(T);
  const double decay = tail > 0 ? std::min(1.0, double(T - t) / tail) : 1.0;
  return base * std::max(decay, 0.0);
}

namespace {

Tensor rms(const Tensor& x) { return x.pow(2).mean().sqrt(); }

class Adafactor : public Optimizer {
 public:
  Adafactor(std::vector<OptimizedParam> params, AdafactorOptions o)
      : params_(std::move(params)), o_(o) {
    for (auto& p : params_) {
      Slot s;
      if (!p.never_factor) s.dims = factored_dims(p.view, o_.min_dim_size_to_factor);
      if (s.dims) {
        auto vr = p.view, vc = p.view;
        vr[s.dims->first] = 1, vc[s.dims->second] = 1;  // kept as size-1 dims while training
        s.vr = torch::zeros(vr), s.vc = torch::zeros(vc);
      } else {
        s.v = torch::zeros(p.view);
      }
      if (o_.beta1) s.m = torch::zeros(p.view);
      slots_.push_back(std::move(s));
    }
  }

  void step(double lr) override {
    torch::NoGradGuard no_grad;
    ++step_;
    const double decay = 1.0 - std::pow(double(step_), -o_.decay_exponent);
    for (size_t i = 0; i < params_.size(); ++i) {
      OptimizedParam& p = params_[i];
      Slot& s = slots_[i];
      if (!p.param.grad().defined()) continue;
      const Tensor g = p.param.grad().reshape(p.view);
      const Tensor g2 = g.pow(2) + o_.epsilon1;
      Tensor x;
      if (s.dims) {
        const auto [d0, d1] = *s.dims;
        s.vr.mul_(decay).add_(g2.mean(d0, true), 1.0 - decay);
        s.vc.mul_(decay).add_(g2.mean(d1, true), 1.0 - decay);
        x = g * torch::rsqrt(s.vr / s.vr.mean(d1, true)) * torch::rsqrt(s.vc);
      } else {
        s.v.mul_(decay).add_(g2, 1.0 - decay);
        x = g * torch::rsqrt(s.v);
      }
      x.div_(torch::clamp_min(rms(x) / o_.clipping_threshold, 1.0));
      Tensor update = x.mul_(torch::clamp_min(rms(p.param), o_.epsilon2) * lr);
      if (o_.beta1) {
        s.m.mul_(*o_.beta1).add_(update, 1.0 - *o_.beta1);
        update = s.m;
      }
      p.param.sub_(update.view(p.param.sizes()));
    }
  }

  std::map<std::string, Tensor> state() const override {
    std::map<std::string, Tensor> out;
    for (size_t i = 0; i < params_.size(); ++i) {
      const Slot& s = slots_[i];
      const std::string& path = params_[i].path;
      if (s.dims) {  // stored as "the shape without d0" / "without d1"
        out[path + "/vr"] = s.vr.squeeze(s.dims->first);
        out[path + "/vc"] = s.vc.squeeze(s.dims->second);
      } else {
        out[path + "/v"] = s.v;
      }
      if (s.m.defined()) out[path + "/m"] = s.m;
    }
    return out;
  }

  void load_state(const std::map<std::string, Tensor>& st, int64_t step) override {
    torch::NoGradGuard no_grad;
    auto take = [&](const std::string& key, Tensor& into, int64_t unsqueeze_dim) {
      auto it = st.find(key);
      if (it == st.end()) throw InputError(fmt::format("optimizer state: missing {}", key));
      Tensor t = unsqueeze_dim >= 0 ? it->second.unsqueeze(unsqueeze_dim) : it->second;
      if (t.sizes() != into.sizes())
        throw InputError(fmt::format("optimizer state: {} has shape {}, expected {}", key,
                                     c10::str(t.sizes()), c10::str(into.sizes())));
      into.copy_(t);
    };
    for (size_t i = 0; i < params_.size(); ++i) {
      Slot& s = slots_[i];
      const std::string& path = params_[i].path;
      if (s.dims) {
        take(path + "/vr", s.vr, s.dims->first);
        take(path + "/vc", s.vc, s.dims->second);
      } else {
        take(path + "/v", s.v, -1);
      }
      if (s.m.defined()) take(path + "/m", s.m, -1);
    }
    step_ = step;
  }

 private:
  struct Slot {
    std::optional<std::pair<int64_t, int64_t>> dims;
    Tensor vr, vc, v, m;
  };
  std::vector<OptimizedParam> params_;
  std::vector<Slot> slots_;
  AdafactorOptions o_;
};

// AdamW (Loshchilov & Hutter): bias-corrected moments, decoupled weight decay lr * wd * W.
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<OptimizedParam> params, double b1, double b2, double eps, double wd)
      : params_(std::move(params)), b1_(b1), b2_(b2), eps_(eps), wd_(wd) {
    for (auto& p : params_) m_.push_back(torch::zeros_like(p.param)), v_.push_back(torch::zeros_like(p.param));
  }

  void step(double lr) override {
    torch::NoGradGuard no_grad;
    ++step_;
    const double c1 = 1.0 - std::pow(b1_, double(step_)), c2 = 1.0 - std::pow(b2_, double(step_));
    for (size_t i = 0; i < params_.size(); ++i) {
      Tensor& w = params_[i].param;
      if (!w.grad().defined()) continue;
      const Tensor& g = w.grad();
      m_[i].mul_(b1_).add_(g, 1.0 - b1_);
      v_[i].mul_(b2_).addcmul_(g, g, 1.0 - b2_);
      if (wd_ > 0) w.mul_(1.0 - lr * wd_);
      w.addcdiv_(m_[i] / c1, (v_[i] / c2).sqrt_().add_(eps_), -lr);
    }
  }

  std::map<std::string, Tensor> state() const override {
    std::map<std::string, Tensor> out;
    for (size_t i = 0; i < params_.size(); ++i) {
      out[params_[i].path + "/m"] = m_[i];
      out[params_[i].path + "/v"] = v_[i];
    }
    return out;
  }

  void load_state(const std::map<std::string, Tensor>& st, int64_t step) override {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i)
      for (auto [suffix, t] : {std::pair<const char*, Tensor*>{"/m", &m_[i]}, {"/v", &v_[i]}}) {
        auto it = st.find(params_[i].path + suffix);
        if (it == st.end() || it->second.sizes() != t->sizes())
          throw InputError(fmt::format("optimizer state: missing or misshapen {}{}", params_[i].path, suffix));
        t->copy_(it->second);
      }
    step_ = step;
  }

 private:
  std::vector<OptimizedParam> params_;
  std::vector<Tensor> m_, v_;
  double b1_, b2_, eps_, wd_;
};

}  // namespace

std::unique_ptr<Optimizer> make_adafactor(std::vector<OptimizedParam> params, AdafactorOptions o) {
  return std::make_unique<Adafactor>(std::move(params), o);
}

std::unique_ptr<Optimizer> make_adamw(std::vector<OptimizedParam> params, double beta1,
                                      double beta2, double epsilon, double weight_decay) {
  return std::make_unique<AdamW>(std::move(params), beta1, beta2, epsilon, weight_decay);
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& c, std::vector<OptimizedParam> params) {
  if (c.name == "adamw")
    return make_adamw(std::move(params), c.adam_beta1, c.adam_beta2, c.adam_epsilon, c.weight_decay);
  AdafactorOptions o;
  o.beta1 = c.beta1;
  o.clipping_threshold = c.clipping_threshold;
  return make_adafactor(std::move(params), o);
}

}  // namespace thx
