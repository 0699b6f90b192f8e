#include "attention/projected.h"

#include <cmath>

#include "attention/fused.h"
#include "common/precision.h"

namespace thx {
namespace {

using torch::Tensor;

// x [b,n,d] times P [d,e,g] -> [b,n,g,e], the layout a GEMM produces. The weight is permuted
// (a copy of the small parameter); the activations never are. Every product here takes its
// operands in the compute dtype (common/precision.h) and returns it.
Tensor project(const Tensor& x, const Tensor& P) {
  const int64_t d = P.size(0), e = P.size(1), g = P.size(2);
  return torch::matmul(to_compute(x), to_compute(P).permute({0, 2, 1}).reshape({d, g * e}))
      .view({x.size(0), x.size(1), g, e});
}

// O [b,n,g,e] times P [d_Y,e,g] -> [b,n,d_Y].
Tensor project_out(const Tensor& O, const Tensor& P) {
  const int64_t dY = P.size(0), e = P.size(1), g = P.size(2);
  return torch::matmul(to_compute(O).reshape({O.size(0), O.size(1), g * e}),
                       to_compute(P).permute({2, 1, 0}).reshape({g * e, dY}));
}

// x [b,n,d] times P [d,g,g2] -> [b,n,g,g2]: a dynamic projection's per-position matrices.
Tensor generate(const Tensor& x, const Tensor& P) {
  return torch::matmul(to_compute(x), to_compute(P).reshape({P.size(0), P.size(1) * P.size(2)}))
      .view({x.size(0), x.size(1), P.size(1), P.size(2)});
}

// T [b,g,n,m] mixed across heads by P [g,g2] -> [b,g2,n,m] (one batched GEMM).
Tensor mix_heads(const Tensor& T, const Tensor& P) {
  const int64_t b = T.size(0), g = T.size(1), n = T.size(2), m = T.size(3), g2 = P.size(1);
  Tensor out = torch::bmm(P.t().expand({b, g2, g}), T.reshape({b, g, n * m}));  // [b,g2,n*m]
  return at::_unsafe_view(out, {b, g2, n, m});
}

// Dynamic terms (Appendix A): sum_g T[b,g,n,m] R[b,n,g,g2] and sum_g T[b,g,n,m] R[b,m,g,g2].
Tensor mix_heads_per_query(const Tensor& T, const Tensor& R) {
  return torch::matmul(R.transpose(2, 3), T.permute({0, 2, 1, 3})).permute({0, 2, 1, 3});
}
Tensor mix_heads_per_memory(const Tensor& T, const Tensor& R) {
  return torch::matmul(R.transpose(2, 3), T.permute({0, 3, 1, 2})).permute({0, 2, 3, 1});
}

}  // namespace

ProjectedAttention::ProjectedAttention(const AttentionDims& dims) : Attention(dims) {
  const auto& d = dims_;
  auto param = [&](const char* name, std::vector<int64_t> shape, double std) {
    Tensor p = register_parameter(name, torch::empty(shape));
    init_normal(p, std);
    return p;
  };
  // Mesh TensorFlow's initializers; P_q's std carries the folded 1/sqrt(d_k).
  P_q = param("P_q", {d.d_X, d.d_k, d.h_k}, 1.0 / std::sqrt(double(d.d_X) * d.d_k));
  P_k = param("P_k", {d.d_M, d.d_k, d.h_k}, 1.0 / std::sqrt(double(d.d_M)));
  P_v = param("P_v", {d.d_M, d.d_v, d.h_v}, 1.0 / std::sqrt(double(d.d_M)));
  P_o = param("P_o", {d.d_Y, d.d_v, d.h_v}, 1.0 / std::sqrt(double(d.h_v) * d.d_v));
  if (d.has_P_l()) P_l = param("P_l", {d.h_k, d.h}, 1.0 / std::sqrt(double(d.h_k)));
  if (d.has_P_w()) P_w = param("P_w", {d.h, d.h_v}, 1.0 / std::sqrt(double(d.h)));
  // Appendix A: the generators must start small, 0.1 / sqrt(d * h_in).
  if (d.X_l) P_Xl = param("P_Xl", {d.d_X, d.h_k, d.h}, 0.1 / std::sqrt(double(d.d_X) * d.h_k));
  if (d.M_l) P_Ml = param("P_Ml", {d.d_M, d.h_k, d.h}, 0.1 / std::sqrt(double(d.d_M) * d.h_k));
  if (d.X_w) P_Xw = param("P_Xw", {d.d_X, d.h, d.h_v}, 0.1 / std::sqrt(double(d.d_X) * d.h));
  if (d.M_w) P_Mw = param("P_Mw", {d.d_M, d.h, d.h_v}, 0.1 / std::sqrt(double(d.d_M) * d.h));
  if (d.biases) {  // BERT's dense-layer biases, zero at the start
    bias_q = register_parameter("bias_q", torch::zeros({d.d_k, d.h_k}));
    bias_k = register_parameter("bias_k", torch::zeros({d.d_k, d.h_k}));
    bias_v = register_parameter("bias_v", torch::zeros({d.d_v, d.h_v}));
    bias_o = register_parameter("bias_o", torch::zeros({d.d_Y}));
  }
}

ProjectedAttention::Memory ProjectedAttention::project_memory(const Tensor& M) {
  TORCH_CHECK(M.dim() == 3 && M.size(2) == dims_.d_M, "attention: M must be [b,m,", dims_.d_M,
              "], got ", M.sizes());
  Memory mem;
  mem.K = project(M, P_k);                           // [b,m,h_k,d_k]
  mem.V = project(M, P_v);                           // [b,m,h_v,d_v]
  if (bias_k.defined()) mem.K = mem.K + to_compute(bias_k).t(), mem.V = mem.V + to_compute(bias_v).t();
  if (P_Ml.defined()) mem.R_Ml = generate(M, P_Ml);  // [b,m,h_k,h]
  if (P_Mw.defined()) mem.R_Mw = generate(M, P_Mw);  // [b,m,h,h_v]
  return mem;
}

Tensor ProjectedAttention::attend(const Tensor& X, const Memory& mem, const Tensor& bias,
                                  const Tensor& mask) {
  TORCH_CHECK(X.dim() == 3 && X.size(2) == dims_.d_X, "attention: X must be [b,n,", dims_.d_X,
              "], got ", X.sizes());
  Tensor Q = project(X, P_q);  // [b,n,h_k,d_k]
  if (bias_q.defined()) Q = Q + to_compute(bias_q).t();
  auto out = [&](const Tensor& O) {  // O [b,n,h_v,d_v] -> Y [b,n,d_Y]
    Tensor Y = project_out(O, P_o);
    return bias_o.defined() ? Y + to_compute(bias_o) : Y;
  };
  const bool dropout = dims_.dropout > 0 && is_training();
  if (!dims_.any_dynamic() && !dropout)  // the fused core (fused.h)
    return out(attention_core(Q, mem.K, mem.V, P_l, P_w, bias, mask));

  // ATen path, heads-major [b,heads,n,m]: dynamic projections, attention dropout. J and O
  // are products in the compute dtype; from the logits to the weights everything is fp32
  // (the head mixings as in the fused core, the softmax because it normalizes).
  const Tensor J = to_fp32(torch::matmul(Q.transpose(1, 2), mem.K.permute({0, 2, 3, 1})));  // [b,h_k,n,m]
  Tensor L = P_l.defined() ? mix_heads(J, P_l) : J;                          // [b,h,n,m]
  if (P_Xl.defined()) L = L + mix_heads_per_query(J, to_fp32(generate(X, P_Xl)));
  if (P_Ml.defined()) L = L + mix_heads_per_memory(J, to_fp32(mem.R_Ml));
  add_bias_and_mask(L, bias, mask);
  Tensor W = torch::softmax(L, -1);                                          // [b,h,n,m]
  Tensor U = P_w.defined() ? mix_heads(W, P_w) : W;                          // [b,h_v,n,m]
  if (P_Xw.defined()) U = U + mix_heads_per_query(W, to_fp32(generate(X, P_Xw)));
  if (P_Mw.defined()) U = U + mix_heads_per_memory(W, to_fp32(mem.R_Mw));
  if (dropout) U = torch::dropout(U, dims_.dropout, true);
  Tensor O = torch::matmul(U.to(mem.V.scalar_type()), mem.V.transpose(1, 2));  // [b,h_v,n,d_v]
  return out(O.transpose(1, 2));                                             // [b,n,d_Y]
}

Tensor ProjectedAttention::forward(const Tensor& X, const Tensor& M, const Tensor& bias,
                                   const Tensor& mask) {
  return attend(X, project_memory(M), bias, mask);
}

Tensor ProjectedAttention::forward_cached(const Tensor& X, const Tensor& M, AttentionCache& cache,
                                          const Tensor& bias, const Tensor& mask) {
  auto& c = cache.memory;
  if (!(cache.fixed && c.count("K"))) {
    Memory add = project_memory(M);
    auto append = [&](const char* key, const Tensor& t) {  // along the position dimension
      if (t.defined()) c[key] = c.count(key) ? torch::cat({c[key], t}, 1) : t;
    };
    append("K", add.K);
    append("V", add.V);
    append("R_Ml", add.R_Ml);
    append("R_Mw", add.R_Mw);
  }
  Memory mem{c["K"], c["V"], c.count("R_Ml") ? c["R_Ml"] : Tensor(),
             c.count("R_Mw") ? c["R_Mw"] : Tensor()};
  return attend(X, mem, bias, mask);
}

}  // namespace thx
