// th_problem.h: one talking-heads core call's sizes and fp32 (fp64) matrices, checked once, for
// the paths made of ATen's operations alone (folded.cpp, heads_gemm.cpp): P_l and P_w (the
// identity where absent), the bias and mask as 4 dims, [b,h,n,m] broadcastable; and the
// softmax those paths and the tiled path's ATen composition (tiled.cpp) share.
#pragma once
#include <torch/torch.h>

#include <limits>
#include <vector>

namespace thx {

// The weights from the logits L, in L's dtype, L modified in place (the caller's own): the bias
// added (broadcastable to L, either undefined), keys where the mask (bool, broadcastable) is false
// set to -inf, ATen's softmax over the keys (its statistics in fp32 for bf16), a row with no key 0
// (softmax: NaN). The bias and the mask in L's order of dims.
inline torch::Tensor masked_softmax_in_place(torch::Tensor L, const torch::Tensor& bias, const torch::Tensor& mask) {
  if (bias.defined()) L.add_(bias);
  if (mask.defined()) L.masked_fill_(mask.logical_not(), -std::numeric_limits<double>::infinity());
  torch::Tensor W = at::_softmax(L, -1, false);
  if (mask.defined()) W.masked_fill_(mask.any(-1, true).logical_not(), 0.);
  return W;
}

// Refuses, in one line naming `what`, a bias or mask (`name`) that does not broadcast to `sizes`
// ([b,h,n,m]): more dims than it, or a dim that is neither 1 nor its size. (A kernel reading
// through the tensor's strides would read past it, or silently misread it.)
inline void check_broadcasts(const char* what, const char* name, const torch::Tensor& t, at::IntArrayRef sizes) {
  if (!t.defined()) return;
  const int64_t dims = int64_t(sizes.size());
  bool ok = t.dim() <= dims;
  for (int64_t i = 1; ok && i <= t.dim(); ++i) ok = t.size(-i) == 1 || t.size(-i) == sizes[dims - i];
  TORCH_CHECK(ok, what, ": the ", name, " ", t.sizes(), " does not broadcast to [b,h,n,m] = ", sizes);
}

struct ThProblem {
  int64_t b, n, m, hk, dk, h, hv, dv;
  torch::ScalarType dt, ct;  // the operands' dtype; fp32 (fp64): the bias's and P_l's, P_w's sums
  torch::Tensor Pl, Pw, bias, mask;

  // `what` names the path in a refusal ("folded attention: ...").
  ThProblem(const char* what, const torch::Tensor& Q, const torch::Tensor& K, const torch::Tensor& V,
            const torch::Tensor& P_l, const torch::Tensor& P_w, const torch::Tensor& b4, const torch::Tensor& m4) {
    TORCH_CHECK(Q.dim() == 4 && K.dim() == 4 && V.dim() == 4, what, ": Q, K, V must be [b,n,heads,dim]");
    b = Q.size(0), n = Q.size(1), m = K.size(1), hk = Q.size(2), dk = Q.size(3), hv = V.size(2), dv = V.size(3);
    h = P_l.defined() ? P_l.size(1) : hk;
    TORCH_CHECK(K.size(0) == b && V.size(0) == b && V.size(1) == m && K.size(3) == dk, what, ": Q ", Q.sizes(),
                ", K ", K.sizes(), " and V ", V.sizes(), " do not fit");
    TORCH_CHECK(K.size(2) == hk && (!P_l.defined() || P_l.size(0) == hk) &&
                    (P_w.defined() ? P_w.size(0) == h && P_w.size(1) == hv : hv == h),
                what, ": heads of Q ", hk, ", K ", K.size(2), ", V ", hv, " do not fit P_l ",
                P_l.defined() ? P_l.sizes() : at::IntArrayRef{}, " and P_w ",
                P_w.defined() ? P_w.sizes() : at::IntArrayRef{}, " (without P_l, h = Q's heads; without P_w, V's = h)");
    dt = Q.scalar_type();
    TORCH_CHECK(K.scalar_type() == dt && V.scalar_type() == dt && at::isFloatingType(dt), what,
                ": Q, K and V must have one floating dtype");
    check_broadcasts(what, "bias", b4, {b, h, n, m});
    check_broadcasts(what, "mask", m4, {b, h, n, m});
    ct = dt == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
    const auto wide = Q.options().dtype(ct);
    Pl = P_l.defined() ? P_l.to(wide) : torch::eye(hk, wide);
    Pw = P_w.defined() ? P_w.to(wide) : torch::eye(h, wide);
    auto four = [](torch::Tensor t) {
      while (t.defined() && t.dim() < 4) t = t.unsqueeze(0);
      return t;
    };
    bias = b4.defined() ? four(b4.to(wide)) : b4;
    mask = four(m4);
    TORCH_CHECK(!mask.defined() || mask.scalar_type() == torch::kBool, what, ": the mask must be bool");
  }

  // The weights from the logits L (the operands' dtype, modified in place; `order`: L's dims as
  // [b,h,n,m]'s, {0, 1, 2, 3} heads-major, {0, 2, 1, 3} for [b,n,h,m]): masked_softmax_in_place.
  torch::Tensor weights_from(torch::Tensor L, at::IntArrayRef order) const {
    auto ordered = [&](const torch::Tensor& t) { return t.defined() ? t.permute(order) : t; };
    return masked_softmax_in_place(std::move(L), ordered(bias), ordered(mask));
  }

  // dL in [b,h,n,m] order (a view will do) summed to the bias's shape, in fp32 (fp64).
  torch::Tensor bias_grad(const torch::Tensor& d, at::IntArrayRef sizes) const {
    std::vector<int64_t> dims;
    for (int64_t i = 0; i < 4; ++i)
      if (bias.size(i) == 1 && d.size(i) != 1) dims.push_back(i);
    return (dims.empty() ? d.to(ct) : d.sum(dims, true, ct)).reshape(sizes);
  }
};

}  // namespace thx
