#include "attention/costs.h"

#include "attention/registry.h"

namespace thx {

double multiplies(const AttentionDims& d, int64_t n, int64_t m, CostConvention convention) {
  return d.variant->multiplies(d, n, m, convention);
}

double general_bilinear_multiplies(const AttentionDims& d, int64_t n_, int64_t m_, CostConvention convention) {
  const double n = n_, m = m_, dX = d.d_X, dM = d.d_M, dY = d.d_Y, h = d.h;
  // X·P, (XP)·M, W·M, (WM)·Q.
  return convention == CostConvention::Paper ? h * n * dX * dM + h * n * dM * dY + 2 * n * m * dM
                                             : h * n * dX * dM + 2 * h * n * m * dM + h * n * dM * dY;
}

double projected_multiplies(const AttentionDims& d, int64_t n_, int64_t m_, CostConvention convention) {
  const double n = n_, m = m_, dX = d.d_X, dM = d.d_M, dY = d.d_Y;
  const bool paper = convention == CostConvention::Paper;
  // Section 5: projections, dot products, weighted sums (with h_k, h_v heads).
  double c = d.d_k * d.h_k * (n * dX + m * dM + n * m) + d.d_v * d.h_v * (m * dM + n * m + n * dY);
  if (d.has_P_l()) c += n * m * d.h * d.h_k;
  if (d.has_P_w()) c += n * m * d.h * d.h_v;
  // Dynamic projections: generating each R costs rows·d·h_in·h_out ...
  if (d.X_l) c += n * dX * d.h_k * d.h;
  if (d.M_l) c += m * dM * d.h_k * d.h;
  if (d.X_w) c += n * dX * d.h * d.h_v;
  if (d.M_w) c += m * dM * d.h * d.h_v;
  // ... and applying it another n·m·h·h_in, which the paper's tables leave out.
  if (!paper) c += n * m * d.h * (d.h_k * (d.X_l + d.M_l) + d.h_v * (d.X_w + d.M_w));
  return c;
}

int64_t count_parameters(const torch::nn::Module& module) {
  int64_t total = 0;
  for (const auto& p : module.parameters()) total += p.numel();
  return total;
}

}  // namespace thx
