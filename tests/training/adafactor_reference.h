// adafactor_reference.h: Adafactor straight from its formulas (training/optimizer.h states them),
// in double precision with plain loops and explicit index arithmetic: the reference the optimizer's
// tests (optimizer_test.cpp) and its kernels' (adafactor_emu_test.cpp) hold thx's fp32 updates to.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

namespace thx::test {

using Vec = std::vector<double>;

inline double rms(const Vec& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return std::sqrt(s / double(x.size()));
}

// Reference Adafactor for one variable of `shape` (row-major), straight from the formulas
// in optimizer.h, with explicit index arithmetic.
struct RefAdafactor {
  std::vector<int64_t> shape;
  bool factored = false;
  int d0 = 0, d1 = 0;
  Vec vr, vc, v, m;
  std::optional<double> beta1;
  int64_t t = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    return n;
  }
  // Index of element e with dimension d dropped.
  int64_t drop(int64_t e, int d) const {
    int64_t out = 0, stride = 1;
    for (int k = int(shape.size()) - 1; k >= 0; --k) {
      const int64_t ik = e % shape[k];
      e /= shape[k];
      if (k == d) continue;
      out += ik * stride;
      stride *= shape[k];
    }
    return out;
  }

  void step(Vec& w, const Vec& g, double lr) {
    ++t;
    const double decay = 1 - std::pow(double(t), -0.8);
    const int64_t n = numel();
    Vec x(n);
    if (factored) {
      const int64_t nr = n / shape[d0], nc = n / shape[d1];
      if (vr.empty()) vr.assign(nr, 0), vc.assign(nc, 0);
      Vec mr(nr, 0), mc(nc, 0);
      for (int64_t e = 0; e < n; ++e) {
        const double g2 = g[e] * g[e] + 1e-30;
        mr[drop(e, d0)] += g2 / shape[d0];
        mc[drop(e, d1)] += g2 / shape[d1];
      }
      for (int64_t i = 0; i < nr; ++i) vr[i] = decay * vr[i] + (1 - decay) * mr[i];
      for (int64_t i = 0; i < nc; ++i) vc[i] = decay * vc[i] + (1 - decay) * mc[i];
      // long-term mean of vr over d1: vr's index space is the shape without d0.
      std::vector<int64_t> rshape;
      for (int k = 0; k < int(shape.size()); ++k)
        if (k != d0) rshape.push_back(shape[k]);
      const int d1r = d1 < d0 ? d1 : d1 - 1;
      RefAdafactor rs;
      rs.shape = rshape;
      Vec ltm(nr / rshape[d1r], 0);
      for (int64_t i = 0; i < nr; ++i) ltm[rs.drop(i, d1r)] += vr[i] / rshape[d1r];
      for (int64_t e = 0; e < n; ++e) {
        const int64_t r = drop(e, d0);
        x[e] = g[e] / std::sqrt(vr[r] / ltm[rs.drop(r, d1r)]) / std::sqrt(vc[drop(e, d1)]);
      }
    } else {
      if (v.empty()) v.assign(n, 0);
      for (int64_t e = 0; e < n; ++e) {
        v[e] = decay * v[e] + (1 - decay) * (g[e] * g[e] + 1e-30);
        x[e] = g[e] / std::sqrt(v[e]);
      }
    }
    const double clip = std::max(1.0, rms(x) / 1.0);
    const double scale = std::max(rms(w), 1e-3) * lr;
    if (beta1 && m.empty()) m.assign(n, 0);
    for (int64_t e = 0; e < n; ++e) {
      double u = x[e] / clip * scale;
      if (beta1) u = m[e] = *beta1 * m[e] + (1 - *beta1) * u;
      w[e] -= u;
    }
  }
};

}  // namespace thx::test
