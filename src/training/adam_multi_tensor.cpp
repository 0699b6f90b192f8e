#include "training/adam_multi_tensor.h"

namespace thx {

using torch::Tensor;

void adam_multi_tensor_step(std::vector<OptimizedParam>& params, std::vector<Tensor>& m, std::vector<Tensor>& v,
                            const std::vector<size_t>& which, const AdamOptions& o, double lr, double c1, double c2) {
  if (which.empty()) return;
  std::vector<Tensor> W, G, M, V, W_decay, U_decay, W_ratio, U_ratio;
  std::vector<at::Scalar> steps;
  for (size_t i : which) {
    W.push_back(params[i].param), G.push_back(params[i].param.grad()), M.push_back(m[i]), V.push_back(v[i]);
    steps.emplace_back(-(lr * params[i].lr_scale));
  }
  at::_foreach_mul_(M, o.beta1);
  at::_foreach_add_(M, G, 1.0 - o.beta1);
  at::_foreach_mul_(V, o.beta2);
  at::_foreach_addcmul_(V, G, G, 1.0 - o.beta2);
  std::vector<Tensor> U = at::_foreach_div(M, c1), D = at::_foreach_div(V, c2);  // u = m' / (sqrt(v') + eps)
  at::_foreach_sqrt_(D);
  at::_foreach_add_(D, o.epsilon);
  at::_foreach_div_(U, D);
  for (size_t k = 0; k < which.size(); ++k) {
    if (params[which[k]].no_decay) continue;
    if (o.weight_decay > 0) W_decay.push_back(W[k]), U_decay.push_back(U[k]);
    if (o.trust_ratio) W_ratio.push_back(W[k]), U_ratio.push_back(U[k]);
  }
  if (!W_decay.empty()) at::_foreach_add_(U_decay, W_decay, o.weight_decay);  // u += wd W
  if (!W_ratio.empty()) {  // u *= |W| / |u|, or 1 where either norm is 0
    const Tensor wn = torch::stack(at::_foreach_norm(W_ratio)), un = torch::stack(at::_foreach_norm(U_ratio));
    const Tensor ratio = torch::where(wn.gt(0).logical_and(un.gt(0)), wn / un, torch::ones_like(wn));
    for (size_t k = 0; k < U_ratio.size(); ++k) U_ratio[k].mul_(ratio[int64_t(k)]);
  }
  at::_foreach_mul_(U, steps);  // u *= -lr * lr_scale
  at::_foreach_add_(W, U);
}

}  // namespace thx
