#include "training/adafactor_grouped.h"

#include <atomic>
#include <cmath>
#include <map>
#include <numeric>
#include <tuple>

namespace thx {

using torch::Tensor;

std::vector<AdafactorGroup> adafactor_groups(const std::vector<OptimizedParam>& params,
                                             const std::vector<bool>& eligible, const AdafactorOptions& o) {
  using Key = std::tuple<std::vector<int64_t>, bool, double, int, std::string>;
  std::map<Key, AdafactorGroup> by_key;
  std::vector<Key> order;  // first appearance, so that groups follow the parameters' order
  for (size_t i = 0; i < params.size(); ++i) {
    if (!eligible[i]) continue;
    const OptimizedParam& p = params[i];
    const auto dims = p.never_factor ? std::nullopt : factored_dims(p.view, o.min_dim_size_to_factor);
    const Key k{p.view, p.never_factor, p.lr_scale, int(p.param.scalar_type()), p.param.device().str()};
    auto [it, fresh] = by_key.try_emplace(k);
    if (fresh) order.push_back(k), it->second.view = p.view, it->second.dims = dims, it->second.lr_scale = p.lr_scale;
    it->second.members.push_back(i);
  }
  std::vector<AdafactorGroup> groups;
  for (const Key& k : order) {
    AdafactorGroup g = std::move(by_key.at(k));
    if (g.members.size() < 2) continue;
    const auto on = params[g.members[0]].param.options().dtype(torch::kFloat32);
    std::vector<int64_t> full = g.view;
    full.insert(full.begin(), int64_t(g.members.size()));
    if (g.dims) {
      auto vr = full, vc = full;
      vr[g.dims->first + 1] = 1, vc[g.dims->second + 1] = 1;
      g.vr = torch::zeros(vr, on), g.vc = torch::zeros(vc, on);
    } else {
      g.v = torch::zeros(full, on);
    }
    if (o.beta1) g.m = torch::zeros(full, on);
    groups.push_back(std::move(g));
  }
  return groups;
}

namespace {

std::atomic<cuda::adafactor::GroupRunner> g_cpu_runner{nullptr};

// The runner of thx's kernels for this group's tensors, or null: CUDA's for fp32 members on a GPU
// (where built), the tests' on the CPU; every weight, gradient and state tensor fp32 and contiguous.
cuda::adafactor::GroupRunner kernel_runner(const AdafactorGroup& group, const std::vector<OptimizedParam>& params) {
  const Tensor& first = params[group.members[0]].param;
  cuda::adafactor::GroupRunner runner = first.is_cpu() ? g_cpu_runner.load() : nullptr;
#ifdef THX_CUDA_KERNELS
  if (first.is_cuda()) runner = cuda::adafactor::group_step_cuda;
#endif
  if (!runner) return nullptr;
  auto fits = [&](const Tensor& t) {
    return t.scalar_type() == torch::kFloat32 && t.is_contiguous() && t.device() == first.device();
  };
  for (size_t i : group.members)
    if (!fits(params[i].param) || !fits(params[i].param.grad())) return nullptr;
  for (const Tensor* s : {&group.vr, &group.vc, &group.v, &group.m})
    if (s->defined() && !fits(*s)) return nullptr;
  return runner;
}

}  // namespace

void set_adafactor_kernels_on_cpu(cuda::adafactor::GroupRunner runner) { g_cpu_runner = runner; }

void adafactor_group_step(AdafactorGroup& group, std::vector<OptimizedParam>& params, const AdafactorOptions& o,
                          double decay, double lr, bool kernels) {
  if (const auto runner = kernels ? kernel_runner(group, params) : nullptr) {
    cuda::adafactor::GroupStep s;
    for (size_t i : group.members) {
      s.w.push_back(params[i].param.data_ptr<float>());
      s.g.push_back(params[i].param.grad().data_ptr<float>());
    }
    s.view = group.view, s.dims = group.dims, s.device = params[group.members[0]].param.device().index();
    auto ptr = [](Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; };
    s.vr = ptr(group.vr), s.vc = ptr(group.vc), s.v = ptr(group.v), s.m = ptr(group.m);
    s.h = {float(decay), float(o.epsilon1), float(o.epsilon2), float(o.clipping_threshold), float(lr * group.lr_scale),
           o.beta1 ? float(*o.beta1) : -1.f};
    runner(s);
    return;
  }
  std::vector<Tensor> w, g;
  w.reserve(group.members.size()), g.reserve(group.members.size());
  for (size_t i : group.members) {
    w.push_back(params[i].param.view(group.view));  // in place through the view
    g.push_back(params[i].param.grad().reshape(group.view));
  }
  const Tensor G = torch::stack(g);  // [G, view...]
  const Tensor g2 = G.pow(2) + o.epsilon1;
  Tensor x;
  if (group.dims) {
    const int64_t d0 = group.dims->first + 1, d1 = group.dims->second + 1;
    group.vr.mul_(decay).add_(g2.mean(d0, true), 1.0 - decay);
    group.vc.mul_(decay).add_(g2.mean(d1, true), 1.0 - decay);
    x = G * torch::rsqrt(group.vr / group.vr.mean(d1, true)) * torch::rsqrt(group.vc);
  } else {
    group.v.mul_(decay).add_(g2, 1.0 - decay);
    x = G * torch::rsqrt(group.v);
  }
  // Per member: rms over all but the first dim, kept as [G, 1, ...] to broadcast.
  std::vector<int64_t> rest(group.view.size());
  std::iota(rest.begin(), rest.end(), 1);
  std::vector<int64_t> per_member(group.view.size() + 1, 1);
  per_member[0] = int64_t(group.members.size());
  x.div_(torch::clamp_min(x.pow(2).mean(rest, true).sqrt() / o.clipping_threshold, 1.0));
  const double numel = double(params[group.members[0]].param.numel());
  const Tensor rms_w = torch::stack(at::_foreach_norm(w)).to(torch::kFloat32).div(std::sqrt(numel)).view(per_member);
  Tensor update = x.mul_(torch::clamp_min(rms_w, o.epsilon2) * (lr * group.lr_scale));
  if (o.beta1) {
    group.m.mul_(*o.beta1).add_(update, 1.0 - *o.beta1);
    update = group.m;
  }
  at::_foreach_sub_(w, update.unbind(0));
}

}  // namespace thx
