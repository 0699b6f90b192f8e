#include "training/optimizer.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "attention/attention.h"
#include "attention/registry.h"
#include "common/error.h"
#include "common/parallel.h"
#include "common/runtime.h"
#include "training/adafactor_grouped.h"
#include "training/adam_multi_tensor.h"

// Shapes: each state tensor has its parameter's view (OptimizedParam::view, optimizer.h), with
// the factored dims d0 (vr) or d1 (vc) kept as size 1; A, X, B, Y, C below are the sizes of a
// view split around d0 and d1 for the fused loops.
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

std::vector<int64_t> optimizer_view(const std::vector<int64_t>& shape, const VariantSpec* projection_of,
                                    const std::string& factor_attention) {
  if (projection_of && shape.size() == 3 &&
      (factor_attention == "combined" || (factor_attention == "mesh_tf" && projection_of->factor_combined)))
    return {shape[0], shape[1] * shape[2]};  // [d, d_k*h]
  return shape;
}

std::function<double(const std::vector<int64_t>&, const VariantSpec*)> optimizer_statistics(const OptimizerConfig& c) {
  if (c.name != "adafactor") return {};
  const std::string mode = c.factor_attention;
  return [mode](const std::vector<int64_t>& shape, const VariantSpec* projection_of) {
    const std::vector<int64_t> view = optimizer_view(shape, projection_of, mode);
    double n = 1;
    for (const int64_t s : view) n *= double(s);
    const auto dims = factored_dims(view, AdafactorOptions{}.min_dim_size_to_factor);
    return dims ? n / double(view[dims->first]) + n / double(view[dims->second]) : n;  // vr and vc, or v
  };
}

double learning_rate(const OptimizerConfig& c, int64_t t, int64_t T) {
  if (c.schedule == "constant") return c.learning_rate;
  if (c.schedule == "polynomial") {
    if (t < c.warmup_steps) return c.learning_rate * double(t) / double(c.warmup_steps);
    const double left = 1.0 - double(std::min(t, T)) / double(T);
    return (c.learning_rate - c.end_learning_rate) * std::pow(left, c.power) + c.end_learning_rate;
  }
  const double base = c.learning_rate / std::sqrt(double(std::max<int64_t>(t, c.warmup_steps)));
  const double tail = c.decay_fraction * double(T);
  const double decay = tail > 0 ? std::min(1.0, double(T - t) / tail) : 1.0;
  return base * std::max(decay, 0.0);
}

namespace {

Tensor rms(const Tensor& x) { return x.pow(2).mean().sqrt(); }  // scalar

class Adafactor : public Optimizer {
 public:
  Adafactor(std::vector<OptimizedParam> params, AdafactorOptions o)
      : params_(std::move(params)), o_(o) {
    for (auto& p : params_) {
      Slot s;
      const auto on = p.param.options().dtype(torch::kFloat32);  // fp32 state, on the parameter's device
      if (!p.never_factor) s.dims = factored_dims(p.view, o_.min_dim_size_to_factor);
      if (s.dims) {
        auto vr = p.view, vc = p.view;
        vr[s.dims->first] = 1, vc[s.dims->second] = 1;  // kept as size-1 dims while training
        s.vr = torch::zeros(vr, on), s.vc = torch::zeros(vc, on);  // view with d0 -> 1, view with d1 -> 1
      } else {
        s.v = torch::zeros(p.view, on);  // the view's shape
      }
      if (o_.beta1) s.m = torch::zeros(p.view, on);  // the view's shape
      slots_.push_back(std::move(s));
    }
    // Off the CPU, parameters of one view update together (adafactor_grouped.h); their slots
    // become views of the group's stacked state.
    std::vector<bool> eligible(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) eligible[i] = o_.group_on_cpu || !params_[i].param.device().is_cpu();
    groups_ = adafactor_groups(params_, eligible, o_);
    for (AdafactorGroup& g : groups_)
      for (size_t r = 0; r < g.members.size(); ++r) {
        Slot& s = slots_[g.members[r]];
        const int64_t row = int64_t(r);
        if (g.dims) s.vr = g.vr.select(0, row), s.vc = g.vc.select(0, row);
        else s.v = g.v.select(0, row);
        if (g.m.defined()) s.m = g.m.select(0, row);
      }
  }

  void step(double lr) override {
    torch::NoGradGuard no_grad;
    ++step_;
    const double decay = 1.0 - std::pow(double(step_), -o_.decay_exponent);
    std::vector<bool> done(params_.size(), false);
    const bool fused = fused_ && !aten_parts().adafactor;  // (THX_ATEN, bench train --aten: common/runtime.h)
    if (fused) {
      // Largest first into the least loaded of the threads' bins; one parallel region.
      const int threads = at::get_num_threads();
      std::vector<size_t> order;
      for (size_t i = 0; i < params_.size(); ++i)
        if (params_[i].param.grad().defined() && fusable(params_[i])) order.push_back(i), done[i] = true;
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return params_[a].param.numel() > params_[b].param.numel();
      });
      std::vector<std::vector<size_t>> bins(threads);
      std::vector<int64_t> load(threads, 0);
      for (size_t i : order) {
        const int t = int(std::min_element(load.begin(), load.end()) - load.begin());
        bins[t].push_back(i), load[t] += params_[i].param.numel();
      }
      thx::parallel_for(0, threads, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t t = lo; t < hi; ++t)
          for (size_t i : bins[t]) fused_update(params_[i], slots_[i], decay, lr * params_[i].lr_scale);
      });
    }
    for (AdafactorGroup& g : groups_) {
      const auto ready = [&](size_t i) { return !done[i] && params_[i].param.grad().defined(); };
      if (!std::all_of(g.members.begin(), g.members.end(), ready)) continue;  // each of them below
      adafactor_group_step(g, params_, o_, decay, lr, fused);
      for (size_t i : g.members) done[i] = true;
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      OptimizedParam& p = params_[i];
      Slot& s = slots_[i];
      if (done[i] || !p.param.grad().defined()) continue;
      const Tensor g = p.param.grad().reshape(p.view);  // the view's shape
      const Tensor g2 = g.pow(2) + o_.epsilon1;         // the view's shape
      Tensor x;
      if (s.dims) {
        const auto [d0, d1] = *s.dims;
        s.vr.mul_(decay).add_(g2.mean(d0, true), 1.0 - decay);
        s.vc.mul_(decay).add_(g2.mean(d1, true), 1.0 - decay);
        x = g * torch::rsqrt(s.vr / s.vr.mean(d1, true)) * torch::rsqrt(s.vc);  // vr, vc broadcast to g
      } else {
        s.v.mul_(decay).add_(g2, 1.0 - decay);
        x = g * torch::rsqrt(s.v);
      }
      x.div_(torch::clamp_min(rms(x) / o_.clipping_threshold, 1.0));
      Tensor update = x.mul_(torch::clamp_min(rms(p.param), o_.epsilon2) * (lr * p.lr_scale));  // the view's shape
      if (o_.beta1) {
        s.m.mul_(*o_.beta1).add_(update, 1.0 - *o_.beta1);
        update = s.m;
      }
      p.param.sub_(update.view(p.param.sizes()));
    }
  }

  void set_fused(bool on) override { fused_ = on; }

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

  // The same update in three passes of plain loops over raw fp32 memory, instead of ~30
  // ATen operations (each a pass, a dispatch and an allocation). Serial per variable: step()
  // spreads the variables over the threads, one parallel region per step. The view is seen
  // as [A, X, B, Y, C] with X and Y the two factored dims (A, B, C: the dims around them).
  static bool fusable(const OptimizedParam& p) {
    const Tensor& w = p.param;
    const Tensor& g = w.grad();
    return cpu_kernels_enabled() && w.scalar_type() == torch::kFloat32 && w.is_contiguous() && w.device().is_cpu() &&
           g.defined() && g.scalar_type() == torch::kFloat32 && g.is_contiguous();
  }

  // Sums of many floats in double, in 8 independent lanes (a single running sum is a chain of
  // dependent additions: latency-bound, ~4 cycles an element).
  static double lanes_total(const double (&acc)[8]) {
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  }
  static double sum_squares(const float* p, int64_t n) {
    double acc[8] = {};
    int64_t e = 0;
    for (; e + 8 <= n; e += 8)
      for (int j = 0; j < 8; ++j) acc[j] += double(p[e + j]) * p[e + j];
    for (; e < n; ++e) acc[0] += double(p[e]) * p[e];
    return lanes_total(acc);
  }

  // One run of len contiguous elements: x = g * r * c (r, c advancing by RS, CS: 0 or 1), or
  // with V, x = g / sqrt(v). sum_x2 adds sum x^2; apply subtracts u = x * scale (through the
  // momentum m if there is one).
  template <int RS, int CS, bool V>
  static float x_of(const float* g, const float* r, const float* c, int64_t k) {
    if constexpr (V) return g[k] / std::sqrt(r[k]);
    else return g[k] * r[k * RS] * c[k * CS];
  }
  template <int RS, int CS, bool V>
  static double run_sum_x2(const float* g, const float* r, const float* c, int64_t len) {
    double acc[8] = {};
    int64_t k = 0;
    for (; k + 8 <= len; k += 8)
      for (int j = 0; j < 8; ++j) {
        const float x = x_of<RS, CS, V>(g, r, c, k + j);
        acc[j] += double(x) * x;
      }
    for (; k < len; ++k) {
      const float x = x_of<RS, CS, V>(g, r, c, k);
      acc[0] += double(x) * x;
    }
    return lanes_total(acc);
  }
  template <int RS, int CS, bool V>
  static void run_apply(float* w, float* m, const float* g, const float* r, const float* c, int64_t len, float scale,
                        float b1) {
    if (m) {
      for (int64_t k = 0; k < len; ++k) w[k] -= m[k] = b1 * m[k] + (1 - b1) * (x_of<RS, CS, V>(g, r, c, k) * scale);
    } else {
      for (int64_t k = 0; k < len; ++k) w[k] -= x_of<RS, CS, V>(g, r, c, k) * scale;
    }
  }

  // The view as [A, X, B, Y, C] with X and Y the factored dims (d0, d1 in either order); an
  // unfactored tensor is [1, 1, 1, 1, n].
  struct Layout {
    int64_t A = 1, X = 1, B = 1, Y = 1, C = 1;
    bool d0_first = true;  // d0 is X (else Y)
  };
  static Layout layout_of(const OptimizedParam& p, const Slot& s) {
    Layout l;
    if (!s.dims) return l.C = p.param.numel(), l;
    const auto [d0, d1] = *s.dims;
    const int64_t i = std::min(d0, d1), j = std::max(d0, d1);
    l.d0_first = d0 == i;
    for (int64_t k = 0; k < int64_t(p.view.size()); ++k) {
      const int64_t e = p.view[k];
      if (k < i) l.A *= e; else if (k == i) l.X = e; else if (k < j) l.B *= e; else if (k == j) l.Y = e; else l.C *= e;
    }
    return l;
  }

  // Means of g^2 + eps1 over X ([A,B,Y,C]) and over Y ([A,X,B,C]).
  static void mean_squares(const Layout& l, const float* pg, float eps1, std::vector<float>& over_x,
                           std::vector<float>& over_y) {
    const int64_t A = l.A, X = l.X, B = l.B, Y = l.Y, C = l.C;
    over_x.assign(A * B * Y * C, 0.f), over_y.assign(A * X * B * C, 0.f);
    for (int64_t a = 0; a < A; ++a)
      for (int64_t x = 0; x < X; ++x)
        for (int64_t b = 0; b < B; ++b) {
          const float* gp = pg + ((a * X + x) * B + b) * Y * C;
          float* rx = over_y.data() + ((a * X + x) * B + b) * C;  // [C]
          float* ry = over_x.data() + (a * B + b) * Y * C;        // [Y, C]
          if (C == 1) {  // a row of Y: its sum in 8 lanes, each element into its column
            float acc[8] = {};
            int64_t y = 0;
            for (; y + 8 <= Y; y += 8)
              for (int k = 0; k < 8; ++k) {
                const float g2 = gp[y + k] * gp[y + k] + eps1;
                ry[y + k] += g2, acc[k] += g2;
              }
            for (; y < Y; ++y) {
              const float g2 = gp[y] * gp[y] + eps1;
              ry[y] += g2, acc[0] += g2;
            }
            rx[0] += ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
          } else {
            for (int64_t y = 0; y < Y; ++y)
              for (int64_t c = 0; c < C; ++c) {
                const float g2 = gp[y * C + c] * gp[y * C + c] + eps1;
                rx[c] += g2, ry[y * C + c] += g2;
              }
          }
        }
    for (auto& q : over_x) q /= float(X);
    for (auto& q : over_y) q /= float(Y);
  }

  // The factored second moments' decay step, and the scales the update multiplies g by:
  // r = rsqrt(vr / mean of vr over d1), c = rsqrt(vc).
  static void factor_scales(const Layout& l, const std::vector<float>& over_x, const std::vector<float>& over_y,
                            float keep, float mix, Slot& s, std::vector<float>& r_scale, std::vector<float>& c_scale) {
    // vr drops d0, vc drops d1; their keepdim layouts are these index spaces.
    float* vr = s.vr.data_ptr<float>();
    float* vc = s.vc.data_ptr<float>();
    const std::vector<float>& new_r = l.d0_first ? over_x : over_y;
    const std::vector<float>& new_c = l.d0_first ? over_y : over_x;
    for (size_t k = 0; k < new_r.size(); ++k) vr[k] = keep * vr[k] + mix * new_r[k];
    for (size_t k = 0; k < new_c.size(); ++k) vc[k] = keep * vc[k] + mix * new_c[k];
    // vr is [A,B,Y,C] (d1 = Y) or [A,X,B,C] (d1 = X).
    const bool f = l.d0_first;
    const int64_t R = f ? l.Y : l.X, B = l.B, C = l.C;
    r_scale.resize(new_r.size());
    for (int64_t a = 0; a < l.A; ++a)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t c = 0; c < C; ++c) {
          auto at = [&](int64_t k) { return ((a * (f ? B : R) + (f ? b : k)) * (f ? R : B) + (f ? k : b)) * C + c; };
          double mean = 0;
          for (int64_t k = 0; k < R; ++k) mean += vr[at(k)];
          mean /= double(R);
          for (int64_t k = 0; k < R; ++k) r_scale[at(k)] = float(1.0 / std::sqrt(vr[at(k)] / mean));
        }
    c_scale.resize(new_c.size());
    for (size_t k = 0; k < new_c.size(); ++k) c_scale[k] = 1.0f / std::sqrt(vc[k]);
  }

  // The runs: with C == 1, a row of Y along which one factor advances and the other is one
  // number; with C > 1, runs of C along which both advance; unfactored, the whole tensor.
  // fn(kind, first element, length, u, f). Kind 0: g * along[k] * fixed[0] (the factor order of
  // g * r * c kept); 1: g * r[k] * c[k]; 2: g / sqrt(v[k]).
  template <class F>
  static void for_each_run(const Layout& l, const Slot& s, int64_t n, const std::vector<float>& r_scale,
                           const std::vector<float>& c_scale, F&& fn) {
    if (!s.dims) return fn(std::integral_constant<int, 2>(), int64_t{0}, n, s.v.data_ptr<float>(), nullptr);
    const int64_t X = l.X, B = l.B, Y = l.Y, C = l.C;
    for (int64_t a = 0; a < l.A; ++a)
      for (int64_t x = 0; x < X; ++x)
        for (int64_t b = 0; b < B; ++b) {
          const int64_t ky = (a * X + x) * B + b;  // index of the (a, x, b) row in over_y's space
          if (C == 1) {
            const float* along = (l.d0_first ? r_scale : c_scale).data() + (a * B + b) * Y;
            const float* fixed = (l.d0_first ? c_scale : r_scale).data() + ky;
            fn(std::integral_constant<int, 0>(), ky * Y, Y, along, fixed);
          } else {
            for (int64_t y = 0; y < Y; ++y) {
              const int64_t kx = ((a * B + b) * Y + y) * C, kyc = ky * C;
              fn(std::integral_constant<int, 1>(), (ky * Y + y) * C, C,
                 r_scale.data() + (l.d0_first ? kx : kyc), c_scale.data() + (l.d0_first ? kyc : kx));
            }
          }
        }
  }

  void fused_update(OptimizedParam& p, Slot& s, double decay, double lr) const {
    const int64_t n = p.param.numel();
    float* pw = p.param.data_ptr<float>();
    const float* pg = p.param.grad().data_ptr<float>();
    const float mix = float(1.0 - decay), keep = float(decay), eps1 = float(o_.epsilon1);
    const double sum_w2 = sum_squares(pw, n);
    const Layout l = layout_of(p, s);
    std::vector<float> r_scale, c_scale;  // rsqrt(vr / mean_d1 vr) [A,?,B,?,C], rsqrt(vc)
    if (s.dims) {
      std::vector<float> over_x, over_y;
      mean_squares(l, pg, eps1, over_x, over_y);
      factor_scales(l, over_x, over_y, keep, mix, s, r_scale, c_scale);
    } else {
      float* vv = s.v.data_ptr<float>();
      for (int64_t e = 0; e < n; ++e) vv[e] = keep * vv[e] + mix * (pg[e] * pg[e] + eps1);
    }
    const bool d0_first = l.d0_first;
    double sum_x2 = 0;
    for_each_run(l, s, n, r_scale, c_scale, [&](auto kind, int64_t e0, int64_t len, const float* u, const float* f) {
      if constexpr (kind == 2) sum_x2 += run_sum_x2<1, 0, true>(pg + e0, u + e0, nullptr, len);
      else if constexpr (kind == 1) sum_x2 += run_sum_x2<1, 1, false>(pg + e0, u, f, len);
      else sum_x2 += d0_first ? run_sum_x2<1, 0, false>(pg + e0, u, f, len) : run_sum_x2<0, 1, false>(pg + e0, f, u, len);
    });
    const double rms_x = std::sqrt(sum_x2 / double(n)), rms_w = std::sqrt(sum_w2 / double(n));
    const float scale = float(lr * std::max(rms_w, o_.epsilon2) / std::max(1.0, rms_x / o_.clipping_threshold));
    float* m = s.m.defined() ? s.m.data_ptr<float>() : nullptr;
    const float b1 = o_.beta1 ? float(*o_.beta1) : 0.f;
    for_each_run(l, s, n, r_scale, c_scale, [&](auto kind, int64_t e0, int64_t len, const float* u, const float* f) {
      float* mm = m ? m + e0 : nullptr;
      if constexpr (kind == 2) run_apply<1, 0, true>(pw + e0, mm, pg + e0, u + e0, nullptr, len, scale, b1);
      else if constexpr (kind == 1) run_apply<1, 1, false>(pw + e0, mm, pg + e0, u, f, len, scale, b1);
      else if (d0_first) run_apply<1, 0, false>(pw + e0, mm, pg + e0, u, f, len, scale, b1);
      else run_apply<0, 1, false>(pw + e0, mm, pg + e0, f, u, len, scale, b1);
    });
  }

  bool fused_ = true;
  std::vector<OptimizedParam> params_;
  std::vector<Slot> slots_;
  std::vector<AdafactorGroup> groups_;
  AdafactorOptions o_;
};

// The Adam family, one loop. Per parameter, step t from 1:
//   m = b1 m + (1-b1) g,  v = b2 v + (1-b2) g^2
//   u = m' / (sqrt(v') + eps)      m' = m/(1-b1^t), v' = v/(1-b2^t) with bias correction
//                                   (AdamW, Loshchilov & Hutter); m, v without (BERT, ALBERT)
//   u += wd W                       decoupled decay, unless the parameter is no_decay
//   r = |W| / |u| (LAMB, per tensor; 1 if either norm is 0 or the parameter is no_decay)
//   W -= lr r u
class Adam : public Optimizer {
 public:
  Adam(std::vector<OptimizedParam> params, AdamOptions o) : params_(std::move(params)), o_(o) {
    for (auto& p : params_) m_.push_back(torch::zeros_like(p.param)), v_.push_back(torch::zeros_like(p.param));
  }

  void step(double lr) override {
    torch::NoGradGuard no_grad;
    ++step_;
    const double c1 = o_.bias_correction ? 1.0 - std::pow(o_.beta1, double(step_)) : 1.0;
    const double c2 = o_.bias_correction ? 1.0 - std::pow(o_.beta2, double(step_)) : 1.0;
    // Off the CPU, all at once (adam_multi_tensor.h).
    std::vector<size_t> together;
    for (size_t i = 0; i < params_.size(); ++i)
      if (params_[i].param.grad().defined() && (o_.multi_tensor_on_cpu || !params_[i].param.device().is_cpu()))
        together.push_back(i);
    adam_multi_tensor_step(params_, m_, v_, together, o_, lr, c1, c2);
    for (size_t i = 0; i < params_.size(); ++i) {
      Tensor& w = params_[i].param;
      if (!w.grad().defined() || std::binary_search(together.begin(), together.end(), i)) continue;
      const Tensor& g = w.grad();
      m_[i].mul_(o_.beta1).add_(g, 1.0 - o_.beta1);
      v_[i].mul_(o_.beta2).addcmul_(g, g, 1.0 - o_.beta2);
      Tensor u = (m_[i] / c1).div_((v_[i] / c2).sqrt_().add_(o_.epsilon));  // like w
      const bool decays = o_.weight_decay > 0 && !params_[i].no_decay;
      if (decays) u.add_(w, o_.weight_decay);
      const double step_size = lr * params_[i].lr_scale;
      double ratio = 1.0;
      if (o_.trust_ratio && !params_[i].no_decay) {
        const double wn = w.norm().item<double>(), un = u.norm().item<double>();
        if (wn > 0 && un > 0) ratio = wn / un;
      }
      w.add_(u, -step_size * ratio);
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
  AdamOptions o_;
};

}  // namespace

std::unique_ptr<Optimizer> make_adam(std::vector<OptimizedParam> params, AdamOptions o) {
  return std::make_unique<Adam>(std::move(params), o);
}

std::unique_ptr<Optimizer> make_adafactor(std::vector<OptimizedParam> params, AdafactorOptions o) {
  return std::make_unique<Adafactor>(std::move(params), o);
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& c, std::vector<OptimizedParam> params) {
  if (c.name == "adamw" || c.name == "lamb") {
    AdamOptions o;
    o.beta1 = c.adam_beta1, o.beta2 = c.adam_beta2, o.epsilon = c.adam_epsilon;
    o.weight_decay = c.weight_decay;
    o.bias_correction = c.name == "adamw" && c.adam_bias_correction;
    o.trust_ratio = c.name == "lamb";
    return make_adam(std::move(params), o);
  }
  AdafactorOptions o;
  o.beta1 = c.beta1;
  o.clipping_threshold = c.clipping_threshold;
  return make_adafactor(std::move(params), o);
}

double optimizer_state_copies(const OptimizerConfig& c) {
  if (c.name == "adamw" || c.name == "lamb") return 2;
  return c.beta1 ? 1 : 0;
}

std::vector<OptimizedParam> optimized_params(torch::nn::Module& model,
                                             const std::vector<std::pair<std::string, torch::Tensor>>& params,
                                             const OptimizerConfig& c) {
  const std::string& mode = c.factor_attention;
  std::map<std::string, const VariantSpec*> variants;  // attention module path -> its variant
  for (const auto& item : model.named_modules()) {
    if (auto a = std::dynamic_pointer_cast<Attention>(item.value()))
      variants[module_path(item.key())] = a->dims().variant;
  }
  std::vector<OptimizedParam> out;
  for (const auto& [path, p] : params) {
    OptimizedParam op{path, p, p.sizes().vec(), false};
    const auto slash = path.find_last_of('/');
    const std::string name = path.substr(slash + 1), owner = path.substr(0, slash);
    auto it = variants.find(owner);
    const ParamRole role = it == variants.end() ? ParamRole::other : param_role(*it->second, name);
    if (role == ParamRole::head_mixing) op.never_factor = true, op.lr_scale = c.mixing_lr_multiplier;
    op.view = optimizer_view(op.view, role == ParamRole::head_projection ? it->second : nullptr, mode);
    for (const auto& key : c.no_decay)
      if (!key.empty() && path.find(key) != std::string::npos) op.no_decay = true;
    out.push_back(op);
  }
  // Pretraining refuses this at its config (spec.cpp, with the file and line); fine-tuning learns
  // the model's attention only from its checkpoint.
  if (c.mixing_lr_multiplier != 1.0 &&
      std::none_of(out.begin(), out.end(), [](const OptimizedParam& p) { return p.lr_scale != 1.0; }))
    throw ConfigError("optimizer.mixing_lr_multiplier",
                      fmt::format("{} has no effect: the model has no P_l or P_w ({} have them)",
                                  c.mixing_lr_multiplier, mixing_variant_choices()));
  return out;
}

double clip_grad_global_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> norms;  // [] each
  for (const auto& p : params)
    if (p.grad().defined()) norms.push_back(p.grad().norm().to(torch::kFloat64));
  if (norms.empty()) return 0.0;
  const double n = torch::stack(norms).square().sum().sqrt().item<double>();
  if (max_norm > 0 && n > max_norm && std::isfinite(n)) {
    const double scale = max_norm / n;
    for (const auto& p : params)
      if (p.grad().defined()) p.grad().mul_(scale);
  }
  return n;
}

}  // namespace thx
