// bf16_bounds.h: tolerances of the bf16 paths, derived rather than fitted.
//
// A value of the bf16 computation is carried as Bounded{x, e}: x its exact value (float64,
// from the same bf16-exact inputs) and e a bound on |computed - x|, elementwise. Each step of
// the algorithm under test adds what its arithmetic can add:
//   - a bf16 rounding (round-to-nearest-even, 8 significant bits): u |v| with u = 2^-8;
//   - an fp32 reduction of length k (the GEMMs accumulate in fp32): gamma(k) sum |a||b|, with
//     gamma(k) = k 2^-24 / (1 - k 2^-24) (Higham, Accuracy and Stability, Lemma 3.1);
//   - linear maps propagate errors through their absolute values (first order, plus the
//     product of the two errors where two uncertain factors meet);
//   - the softmax: with |dL_j| <= e_j and E = max e over the row, every weight moves by at
//     most W_j (exp(e_j + E) - 1) (exact, not first order).
// A test then asserts |bf16 result - x| <= e, and that a planted wrong variant exceeds it.
#pragma once
#include <torch/torch.h>

#include <cmath>
#include <string>

namespace thx::test {

constexpr double kBf16U = 1.0 / 256;            // bf16 unit roundoff, 2^-8
constexpr double kFp32U = 1.0 / 16777216;       // fp32 unit roundoff, 2^-24
inline double gamma32(double k) { return k * kFp32U / (1 - k * kFp32U); }

struct Bounded {
  torch::Tensor x, e;  // float64: the exact value, and a bound on the bf16 path's error
};

inline Bounded exact(const torch::Tensor& t) {
  torch::Tensor x = t.to(torch::kFloat64);
  return {x, torch::zeros_like(x)};
}

// One rounding to bf16 of a value known to within e.
inline Bounded round_bf16(const Bounded& v) { return {v.x, v.e + kBf16U * (v.x.abs() + v.e)}; }

// einsum(eq, a, b) computed in fp32 arithmetic over reductions of length k.
inline Bounded product(const std::string& eq, const Bounded& a, const Bounded& b, double k) {
  const torch::Tensor ax = a.x.abs(), bx = b.x.abs();
  const torch::Tensor x = torch::einsum(eq, {a.x, b.x});
  const torch::Tensor e = torch::einsum(eq, {ax, b.e}) + torch::einsum(eq, {a.e, bx}) +
                          torch::einsum(eq, {a.e, b.e}) + gamma32(k) * torch::einsum(eq, {ax + a.e, bx + b.e});
  return {x, e};
}

// The softmax's backward dL = W (dW - D) in fp32, D [.., 1] = sum over the row of W dW, zero
// where `keep` is false (masked logits).
inline Bounded softmax_backward(const Bounded& W, const Bounded& dW, const Bounded& D, const torch::Tensor& keep) {
  Bounded dL;
  dL.x = (W.x * (dW.x - D.x)).masked_fill(keep.logical_not(), 0.0);
  dL.e = (W.e * (dW.x.abs() + D.x.abs() + dW.e + D.e) + W.x.abs() * (dW.e + D.e) +
          gamma32(3) * W.x.abs() * (dW.x.abs() + D.x.abs()))
             .masked_fill(keep.logical_not(), 0.0);
  return dL;
}

// |computed - x| <= e everywhere (plus a float64 hair), with the worst element's ratio.
inline ::testing::AssertionResult within(const torch::Tensor& computed, const Bounded& b) {
  const torch::Tensor err = (computed.to(torch::kFloat64) - b.x).abs();
  const torch::Tensor slack = b.e + 1e-12 * (1 + b.x.abs());
  const torch::Tensor ratio = err / slack;
  const int64_t at = ratio.flatten().argmax().item<int64_t>();
  const double worst = ratio.flatten()[at].item<double>();
  const double e_at = b.e.flatten()[at].item<double>(), x_at = b.x.flatten()[at].item<double>();
  if (std::isfinite(worst) && worst <= 1.0)
    return ::testing::AssertionSuccess() << "worst error / bound " << worst;
  return ::testing::AssertionFailure() << "error " << err.flatten()[at].item<double>() << " exceeds its bound " << e_at
                                       << " (value " << x_at << ") at flat index " << at << ": ratio " << worst;
}

}  // namespace thx::test
