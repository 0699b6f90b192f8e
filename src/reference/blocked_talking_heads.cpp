#include "reference/blocked_talking_heads.h"

#include <limits>

// Shapes per tile: I query rows (of n), J keys (of m). Letters in the einsums: b batch, i
// query row, j key, k logits head (h_k), s softmax head (h), t weights head (h_v), d key dim,
// e value dim.
namespace thx::blocked {
namespace {

using torch::Tensor;
constexpr double kInf = std::numeric_limits<double>::infinity();

// The compute dtype: float64 stays, anything else computes in float32.
Tensor wide(const Tensor& t) {
  if (!t.defined() || t.scalar_type() == torch::kFloat64 || t.scalar_type() == torch::kBool) return t;
  return t.to(torch::kFloat32);
}

// t (broadcastable to [b,h,n,m]) as 4 dims.
Tensor four(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor r = t;
  while (r.dim() < 4) r = r.unsqueeze(0);
  return r;
}

// Rows [i0, i0+ni) and keys [j0, j0+nj) of a broadcastable [.,.,n or 1,m or 1] tensor.
Tensor tile(const Tensor& t, int64_t i0, int64_t ni, int64_t j0, int64_t nj) {
  if (!t.defined()) return t;
  Tensor r = t.size(2) == 1 ? t : t.narrow(2, i0, ni);
  return r.size(3) == 1 ? r : r.narrow(3, j0, nj);
}

// What one (query block, key block) tile recomputes: J [b,k,I,J], L and W [b,s,I,J].
struct Tile {
  Tensor J, L, W;
};

struct Problem {
  Tensor Q, K, V, P_l, P_w, bias, mask;  // compute dtype; bias and mask 4-d
  int64_t n, m;

  Tensor logits(int64_t i0, int64_t ni, int64_t j0, int64_t nj, Tensor* J_out) const {
    const Tensor J = torch::einsum("bikd,bjkd->bkij", {Q.narrow(1, i0, ni), K.narrow(1, j0, nj)});  // [b,k,I,J]
    if (J_out) *J_out = J;
    Tensor L = P_l.defined() ? torch::einsum("bkij,ks->bsij", {J, P_l}) : J;  // [b,s,I,J]
    if (bias.defined()) L = L + tile(bias, i0, ni, j0, nj);
    if (mask.defined()) L = L.masked_fill(tile(mask, i0, ni, j0, nj).logical_not(), -kInf);
    return L;
  }
  // W from L and the rows' logsumexp (a row with every key masked: 0, not NaN).
  static Tensor weights(const Tensor& L, const Tensor& lse_rows) {
    const Tensor safe = torch::where(torch::isinf(lse_rows), torch::zeros_like(lse_rows), lse_rows);  // [b,s,I]
    return torch::exp(L - safe.unsqueeze(-1));  // [b,s,I,J]
  }
  Tile recompute(int64_t i0, int64_t ni, int64_t j0, int64_t nj, const Tensor& lse) const {
    Tile t;
    t.L = logits(i0, ni, j0, nj, &t.J);
    t.W = weights(t.L, lse.narrow(2, i0, ni));
    return t;
  }
  Tensor mix_weights(const Tensor& W) const {  // U [b,t,I,J]
    return P_w.defined() ? torch::einsum("bsij,st->btij", {W, P_w}) : W;
  }
};

Problem problem(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l, const Tensor& P_w,
                const Tensor& bias, const Tensor& mask) {
  TORCH_CHECK(Q.dim() == 4 && K.dim() == 4 && V.dim() == 4, "blocked: Q, K, V must be [b,n,heads,dim]");
  TORCH_CHECK(!mask.defined() || mask.scalar_type() == torch::kBool, "blocked: the mask must be bool");
  Problem p{wide(Q), wide(K), wide(V), wide(P_l), wide(P_w), four(wide(bias)), four(mask), Q.size(1), K.size(1)};
  return p;
}

}  // namespace

Forward forward(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l, const Tensor& P_w,
                const Tensor& bias, const Tensor& mask, int64_t block_n, int64_t block_m) {
  TORCH_CHECK(block_n > 0 && block_m > 0, "blocked: block sizes must be positive");
  torch::NoGradGuard no_grad;
  const Problem p = problem(Q, K, V, P_l, P_w, bias, mask);
  const int64_t b = p.Q.size(0), h = P_l.defined() ? P_l.size(1) : p.Q.size(2);
  const auto opt = p.Q.options();
  Forward f;
  f.O = torch::zeros({b, p.n, p.V.size(2), p.V.size(3)}, opt);  // [b,n,t,e]
  f.lse = torch::empty({b, h, p.n}, opt);                        // [b,s,n]
  for (int64_t i0 = 0; i0 < p.n; i0 += block_n) {
    const int64_t ni = std::min(block_n, p.n - i0);
    // Pass 1: the online max and sum of exp over the key blocks, per (row, softmax head).
    Tensor run_max = torch::full({b, h, ni}, -kInf, opt), run_sum = torch::zeros({b, h, ni}, opt);  // [b,s,I]
    for (int64_t j0 = 0; j0 < p.m; j0 += block_m) {
      const int64_t nj = std::min(block_m, p.m - j0);
      const Tensor L = p.logits(i0, ni, j0, nj, nullptr);                  // [b,s,I,J]
      const Tensor new_max = torch::maximum(run_max, std::get<0>(L.max(-1)));  // [b,s,I]
      // Rows still without an unmasked key keep max -inf: shift by 0 there (exp(-inf) = 0).
      const Tensor shift = torch::where(torch::isinf(new_max), torch::zeros_like(new_max), new_max);
      run_sum = run_sum * torch::exp(run_max - shift) + torch::exp(L - shift.unsqueeze(-1)).sum(-1);
      run_max = new_max;
    }
    const Tensor lse = run_max + torch::log(run_sum);  // [b,s,I]; -inf where every key is masked
    f.lse.narrow(2, i0, ni).copy_(lse);
    // Pass 2: the normalized weights, mixed, against V.
    Tensor O = f.O.narrow(1, i0, ni);  // [b,I,t,e]
    for (int64_t j0 = 0; j0 < p.m; j0 += block_m) {
      const int64_t nj = std::min(block_m, p.m - j0);
      const Tensor W = Problem::weights(p.logits(i0, ni, j0, nj, nullptr), lse);       // [b,s,I,J]
      O.add_(torch::einsum("btij,bjte->bite", {p.mix_weights(W), p.V.narrow(1, j0, nj)}));  // [b,I,t,e]
    }
  }
  return f;
}

Grads backward(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l, const Tensor& P_w,
               const Tensor& bias, const Tensor& mask, const Tensor& lse, const Tensor& dO_in, int64_t block_n,
               int64_t block_m) {
  TORCH_CHECK(block_n > 0 && block_m > 0, "blocked: block sizes must be positive");
  torch::NoGradGuard no_grad;
  const Problem p = problem(Q, K, V, P_l, P_w, bias, mask);
  const Tensor dO = wide(dO_in), LSE = wide(lse);
  Grads g;
  g.dQ = torch::zeros_like(p.Q), g.dK = torch::zeros_like(p.K), g.dV = torch::zeros_like(p.V);
  if (p.P_l.defined()) g.dP_l = torch::zeros_like(p.P_l);
  if (p.P_w.defined()) g.dP_w = torch::zeros_like(p.P_w);
  if (p.bias.defined()) g.dbias = torch::zeros_like(p.bias);
  for (int64_t i0 = 0; i0 < p.n; i0 += block_n) {
    const int64_t ni = std::min(block_n, p.n - i0);
    const Tensor dOi = dO.narrow(1, i0, ni), Qi = p.Q.narrow(1, i0, ni);  // [b,I,t,e], [b,I,k,d]
    auto dW_of = [&](int64_t j0, int64_t nj, Tensor* dU_out) {
      const Tensor dU = torch::einsum("bite,bjte->btij", {dOi, p.V.narrow(1, j0, nj)});  // [b,t,I,J]
      if (dU_out) *dU_out = dU;
      return p.P_w.defined() ? torch::einsum("st,btij->bsij", {p.P_w, dU}) : dU;  // [b,s,I,J]
    };
    // Pass A: the softmax's row term D = sum_j W dW.
    Tensor D;  // [b,s,I]
    for (int64_t j0 = 0; j0 < p.m; j0 += block_m) {
      const int64_t nj = std::min(block_m, p.m - j0);
      const Tile t = p.recompute(i0, ni, j0, nj, LSE);
      const Tensor part = (t.W * dW_of(j0, nj, nullptr)).sum(-1);
      D = D.defined() ? D + part : part;
    }
    // Pass B: every gradient, tile by tile.
    for (int64_t j0 = 0; j0 < p.m; j0 += block_m) {
      const int64_t nj = std::min(block_m, p.m - j0);
      const Tile t = p.recompute(i0, ni, j0, nj, LSE);
      Tensor dU;
      const Tensor dW = dW_of(j0, nj, &dU);                                   // [b,s,I,J]
      const Tensor dL = t.W * (dW - D.unsqueeze(-1));                         // [b,s,I,J]
      g.dV.narrow(1, j0, nj).add_(torch::einsum("btij,bite->bjte", {p.mix_weights(t.W), dOi}));
      if (g.dP_w.defined()) g.dP_w += torch::einsum("bsij,btij->st", {t.W, dU});
      if (g.dbias.defined()) {
        Tensor share = dL;  // summed over the dims the bias broadcasts along
        for (int64_t d = 0; d < 4; ++d)
          if (p.bias.size(d) == 1) share = share.sum(d, /*keepdim=*/true);
        tile(g.dbias, i0, ni, j0, nj).add_(share);
      }
      if (g.dP_l.defined()) g.dP_l += torch::einsum("bkij,bsij->ks", {t.J, dL});
      const Tensor dJ = p.P_l.defined() ? torch::einsum("ks,bsij->bkij", {p.P_l, dL}) : dL;  // [b,k,I,J]
      g.dQ.narrow(1, i0, ni).add_(torch::einsum("bkij,bjkd->bikd", {dJ, p.K.narrow(1, j0, nj)}));
      g.dK.narrow(1, j0, nj).add_(torch::einsum("bkij,bikd->bjkd", {dJ, Qi}));
    }
  }
  if (g.dbias.defined() && bias.dim() < 4) g.dbias = g.dbias.reshape(bias.sizes());
  return g;
}

}  // namespace thx::blocked
