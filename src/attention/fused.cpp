#include "attention/fused.h"

#include <ATen/Parallel.h>

#include <atomic>
#include <cstring>

#include "attention/attention.h"
#include "attention/blas.h"
#include "attention/kernels.h"

namespace thx {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::atomic<bool> g_fused{true};

// ---- operands ------------------------------------------------------------------------------

// A bias or mask as a [b,h,n,m] view with unit stride along m, or undefined when it cannot
// be read row by row.
Tensor rows_view(const Tensor& t, at::IntArrayRef shape) {
  if (!t.defined() || t.dim() > 4 || t.size(-1) != shape[3]) return {};
  Tensor v = t.expand(shape);
  return v.stride(3) == 1 ? v : Tensor();
}

template <class T>
struct Rows {  // row (b, h, i) of a [b,h,n,m] view
  const T* base = nullptr;
  int64_t sb = 0, sh = 0, sn = 0;
  Rows() = default;
  explicit Rows(const Tensor& v)
      : base(v.data_ptr<T>()), sb(v.stride(0)), sh(v.stride(1)), sn(v.stride(2)) {}
  const T* at(int64_t b, int64_t h, int64_t i) const {
    return base ? base + b * sb + h * sh + i * sn : nullptr;
  }
};

// LibTorch 1.13's Function::apply cannot take undefined tensors: absent operands travel as
// empty placeholders and turn back into undefined tensors inside.
Tensor placeholder(const Tensor& t) { return t.defined() ? t : torch::empty({0}); }
Tensor present(const Tensor& t) { return t.numel() > 0 ? t : Tensor(); }
const float* ptr(const Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

bool fusable(const Tensor& J, const Tensor& P_l, const Tensor& P_w, const Tensor& bias,
             const Tensor& mask, at::IntArrayRef shape) {
  auto fp32 = [](const Tensor& t) { return !t.defined() || t.scalar_type() == torch::kFloat32; };
  return g_fused && J.device().is_cpu() && fp32(J) && fp32(P_l) && fp32(P_w) && fp32(bias) &&
         (!bias.defined() || rows_view(bias, shape).defined()) &&
         (!mask.defined() || (mask.scalar_type() == torch::kBool && rows_view(mask, shape).defined()));
}

// Everything the row kernels need about one call. Shapes: b, n query rows, m memory
// positions, h_k -> h -> h_v heads.
struct RowProblem {
  int64_t b = 0, n = 0, m = 0, hk = 0, h = 0, hv = 0;
  Tensor P_l, P_w, mask;  // mask: uint8 [b,h,n,m] view
  Tensor bias;            // float [b,h,n,m] view

  RowProblem(int64_t b_, int64_t n_, int64_t m_, int64_t hk_, const Tensor& P_l_,
             const Tensor& P_w_, const Tensor& bias_, const Tensor& mask_)
      : b(b_), n(n_), m(m_), hk(hk_), P_l(P_l_), P_w(P_w_) {
    h = P_l.defined() ? P_l.size(1) : hk;
    hv = P_w.defined() ? P_w.size(1) : h;
    if (bias_.defined()) bias = rows_view(bias_, {b, h, n, m});
    if (mask_.defined()) mask = rows_view(mask_.to(torch::kUInt8), {b, h, n, m});
  }
};

// Forward over rows: J [b,n,h_k,m] -> W [b,n,h,m] -> U [b,n,h_v,m]. J may be W (no P_l),
// and U may be W (no P_w).
void rows_forward(const RowProblem& p, const float* J, float* W, float* U) {
  const kernels::Ops& k = kernels::best_ops();
  const Tensor Cl = p.P_l.defined() ? p.P_l.t().contiguous() : Tensor();  // [h,h_k]
  const Tensor Cw = p.P_w.defined() ? p.P_w.t().contiguous() : Tensor();  // [h_v,h]
  const Rows<float> B = p.bias.defined() ? Rows<float>(p.bias) : Rows<float>();
  const Rows<uint8_t> Mk = p.mask.defined() ? Rows<uint8_t>(p.mask) : Rows<uint8_t>();
  const int64_t m = p.m, h = p.h;
  at::parallel_for(0, p.n, 4, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t bb = 0; bb < p.b; ++bb) {
        const int64_t row = bb * p.n + i;
        const float* Jr = J + row * p.hk * m;  // [h_k, m]
        float* Wr = W + row * h * m;           // [h, m]
        if (Cl.defined()) k.mix(Wr, m, Jr, m, ptr(Cl), p.hk, 1, h, p.hk, m, false);
        else if (Wr != Jr) std::memcpy(Wr, Jr, sizeof(float) * h * m);
        for (int64_t hh = 0; hh < h; ++hh) k.softmax(Wr + hh * m, B.at(bb, hh, i), Mk.at(bb, hh, i), m);
        if (Cw.defined()) k.mix(U + row * p.hv * m, m, Wr, m, ptr(Cw), h, 1, p.hv, h, m, false);
      }
  });
}

struct RowGrads {
  Tensor dP_l, dP_w, dbias;
};

// Backward over rows: dU [b,n,h_v,m] -> dJ [b,n,h_k,m] (dJ may alias dU when there is no
// P_l and no P_w), and the gradients of P_l, P_w and bias (shape bias_shape) if requested.
RowGrads rows_backward(const RowProblem& p, const float* dU, const float* W, const float* J,
                       float* dJ, const std::vector<int64_t>& bias_shape, bool bias_grad) {
  const kernels::Ops& k = kernels::best_ops();
  const int threads = at::get_num_threads();
  const int64_t m = p.m, h = p.h, hk = p.hk, hv = p.hv;
  const Rows<uint8_t> Mk = p.mask.defined() ? Rows<uint8_t>(p.mask) : Rows<uint8_t>();
  const Tensor Pl = p.P_l.defined() ? p.P_l.contiguous() : Tensor();  // dJ = P_l dL
  const Tensor Pw = p.P_w.defined() ? p.P_w.contiguous() : Tensor();  // dW = P_w dU
  Tensor gPl = Pl.defined() ? torch::zeros({threads, hk, h}) : Tensor();
  Tensor gPw = Pw.defined() ? torch::zeros({threads, h, hv}) : Tensor();
  // The bias gradient is dL summed to the bias's shape [B,H,N,m], B in {1,b}, H in {1,h},
  // N in {1,n}. Rows are split across threads, so N = 1 accumulates per thread.
  std::vector<int64_t> s4(4 - std::min<size_t>(4, bias_shape.size()), 1);
  s4.insert(s4.end(), bias_shape.begin(), bias_shape.end());
  const int64_t Bb = s4[0], Hb = s4[1], Nb = s4[2];
  Tensor gB = bias_grad ? torch::zeros({Nb == 1 ? threads : 1, Bb, Hb, Nb, m}) : Tensor();

  at::parallel_for(0, p.n, 4, [&](int64_t i0, int64_t i1) {
    const int t = at::get_thread_num();
    std::vector<float> dWbuf(Pw.defined() ? h * m : 0), dLbuf(Pl.defined() ? h * m : 0);
    float* gl = Pl.defined() ? gPl[t].data_ptr<float>() : nullptr;
    float* gw = Pw.defined() ? gPw[t].data_ptr<float>() : nullptr;
    float* db = bias_grad ? gB[Nb == 1 ? t : 0].data_ptr<float>() : nullptr;
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t bb = 0; bb < p.b; ++bb) {
        const int64_t row = bb * p.n + i;
        const float* Wr = W + row * h * m;
        const float* dUr = dU + row * hv * m;
        const float* dW = dUr;  // dW = P_w dU, and dP_w += W dU^T
        if (Pw.defined()) {
          k.mix(dWbuf.data(), m, dUr, m, ptr(Pw), hv, 1, h, hv, m, false);
          k.gram(gw, Wr, m, h, dUr, m, hv, m);
          dW = dWbuf.data();
        }
        // dL = W (dW - sum W dW), 0 where masked; straight into dJ when there is no P_l.
        float* dL = Pl.defined() ? dLbuf.data() : dJ + row * hk * m;
        for (int64_t hh = 0; hh < h; ++hh)
          k.softmax_backward(dL + hh * m, Wr + hh * m, dW + hh * m, Mk.at(bb, hh, i), m);
        if (db)
          for (int64_t hh = 0; hh < h; ++hh) {
            float* d = db + (((Bb == 1 ? 0 : bb) * Hb + (Hb == 1 ? 0 : hh)) * Nb +
                             (Nb == 1 ? 0 : i)) * m;
            const float* s = dL + hh * m;
            for (int64_t j = 0; j < m; ++j) d[j] += s[j];
          }
        if (Pl.defined()) {  // dP_l += J dL^T, dJ = P_l dL
          k.gram(gl, J + row * hk * m, m, hk, dL, m, h, m);
          k.mix(dJ + row * hk * m, m, dL, m, ptr(Pl), h, 1, hk, h, m, false);
        }
      }
  });
  RowGrads g;
  if (Pl.defined()) g.dP_l = gPl.sum(0);
  if (Pw.defined()) g.dP_w = gPw.sum(0);
  if (bias_grad) g.dbias = gB.sum(0).view(bias_shape);
  return g;
}

void save_bias_info(AutogradContext* ctx, const Tensor& bias) {
  ctx->saved_data["bias_shape"] = c10::IValue(bias.defined() ? bias.sizes().vec() : std::vector<int64_t>{});
  ctx->saved_data["bias_grad"] = bias.defined() && bias.requires_grad();
}

// ---- heads_softmax -----------------------------------------------------------------------

struct HeadsSoftmaxFn : torch::autograd::Function<HeadsSoftmaxFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& J_in, const Tensor& P_l_in,
                        const Tensor& P_w_in, const Tensor& bias_in, const Tensor& mask_in) {
    const Tensor J = J_in.contiguous(), P_l = present(P_l_in), P_w = present(P_w_in);
    const RowProblem p(J.size(0), J.size(1), J.size(3), J.size(2), P_l, P_w, present(bias_in),
                       present(mask_in));
    Tensor W = torch::empty({p.b, p.n, p.h, p.m});
    Tensor U = P_w.defined() ? torch::empty({p.b, p.n, p.hv, p.m}) : W;
    rows_forward(p, J.data_ptr<float>(), W.data_ptr<float>(), U.data_ptr<float>());
    ctx->save_for_backward({placeholder(P_l.defined() ? J : Tensor()), W, placeholder(P_l),
                            placeholder(P_w), placeholder(p.mask)});
    save_bias_info(ctx, present(bias_in));
    return U;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const Tensor J = present(s[0]), W = s[1], P_l = present(s[2]), P_w = present(s[3]);
    RowProblem p(W.size(0), W.size(1), W.size(3), P_l.defined() ? P_l.size(0) : W.size(2), P_l,
                 P_w, Tensor(), Tensor());
    p.mask = present(s[4]);
    const Tensor dU = grads[0].contiguous();
    Tensor dJ = torch::empty({p.b, p.n, p.hk, p.m});
    RowGrads g = rows_backward(p, dU.data_ptr<float>(), W.data_ptr<float>(), ptr(J),
                               dJ.data_ptr<float>(), ctx->saved_data["bias_shape"].toIntVector(),
                               ctx->saved_data["bias_grad"].toBool());
    return {dJ, g.dP_l, g.dP_w, g.dbias, Tensor()};
  }
};

// ---- attention_core ----------------------------------------------------------------------

struct AttentionCoreFn : torch::autograd::Function<AttentionCoreFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& Q_in, const Tensor& K_in,
                        const Tensor& V_in, const Tensor& P_l_in, const Tensor& P_w_in,
                        const Tensor& bias_in, const Tensor& mask_in) {
    const Tensor Q = Q_in.contiguous(), K = K_in.contiguous(), V = V_in.contiguous();
    const Tensor P_l = present(P_l_in), P_w = present(P_w_in);
    const int64_t b = Q.size(0), n = Q.size(1), hk = Q.size(2), dk = Q.size(3), m = K.size(1);
    const int64_t dv = V.size(3);
    const RowProblem p(b, n, m, hk, P_l, P_w, present(bias_in), present(mask_in));
    const int64_t h = p.h, hv = p.hv;
    Tensor W = torch::empty({b, n, h, m});                                   // [b,n,h,m]
    Tensor J = P_l.defined() ? torch::empty({b, n, hk, m}) : W;              // [b,n,h_k,m]
    Tensor U = P_w.defined() ? torch::empty({b, n, hv, m}) : W;              // [b,n,h_v,m]
    Tensor O = torch::empty({b, n, hv, dv});                                 // [b,n,h_v,d_v]
    const float *q = Q.data_ptr<float>(), *kk = K.data_ptr<float>(), *v = V.data_ptr<float>();
    float *j = J.data_ptr<float>(), *u = U.data_ptr<float>(), *o = O.data_ptr<float>();
    for (int64_t bb = 0; bb < b; ++bb)
      for (int64_t g = 0; g < hk; ++g)  // J_g = Q_g K_g^T
        blas::sgemm(false, true, n, m, dk, 1.0f, q + (bb * n * hk + g) * dk, hk * dk,
                    kk + (bb * m * hk + g) * dk, hk * dk, 0.0f, j + (bb * n * hk + g) * m, hk * m);
    rows_forward(p, j, W.data_ptr<float>(), u);
    for (int64_t bb = 0; bb < b; ++bb)
      for (int64_t g = 0; g < hv; ++g)  // O_g = U_g V_g
        blas::sgemm(false, false, n, dv, m, 1.0f, u + (bb * n * hv + g) * m, hv * m,
                    v + (bb * m * hv + g) * dv, hv * dv, 0.0f, o + (bb * n * hv + g) * dv, hv * dv);
    ctx->save_for_backward({Q, K, V, placeholder(P_l.defined() ? J : Tensor()), W,
                            placeholder(P_w.defined() ? U : Tensor()), placeholder(P_l),
                            placeholder(P_w), placeholder(p.mask)});
    save_bias_info(ctx, present(bias_in));
    return O;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const Tensor Q = s[0], K = s[1], V = s[2], J = present(s[3]), W = s[4];
    const Tensor U = present(s[5]).defined() ? s[5] : W;
    const Tensor P_l = present(s[6]), P_w = present(s[7]);
    const int64_t b = Q.size(0), n = Q.size(1), hk = Q.size(2), dk = Q.size(3), m = K.size(1);
    const int64_t dv = V.size(3);
    RowProblem p(b, n, m, hk, P_l, P_w, Tensor(), Tensor());
    p.mask = present(s[8]);
    const int64_t hv = p.hv;
    const Tensor dO = grads[0].contiguous();
    Tensor dU = torch::empty({b, n, hv, m}), dV = torch::empty({b, m, hv, dv});
    const float *q = Q.data_ptr<float>(), *kk = K.data_ptr<float>(), *v = V.data_ptr<float>();
    const float *u = U.data_ptr<float>(), *go = dO.data_ptr<float>();
    float *du = dU.data_ptr<float>(), *dvp = dV.data_ptr<float>();
    for (int64_t bb = 0; bb < b; ++bb)
      for (int64_t g = 0; g < hv; ++g) {
        // dU_g = dO_g V_g^T, dV_g = U_g^T dO_g
        blas::sgemm(false, true, n, m, dv, 1.0f, go + (bb * n * hv + g) * dv, hv * dv,
                    v + (bb * m * hv + g) * dv, hv * dv, 0.0f, du + (bb * n * hv + g) * m, hv * m);
        blas::sgemm(true, false, m, dv, n, 1.0f, u + (bb * n * hv + g) * m, hv * m,
                    go + (bb * n * hv + g) * dv, hv * dv, 0.0f, dvp + (bb * m * hv + g) * dv, hv * dv);
      }
    // Without head projections dJ = dL is computed in place over dU.
    Tensor dJ = (P_l.defined() || P_w.defined()) ? torch::empty({b, n, hk, m}) : dU;
    RowGrads gr = rows_backward(p, du, W.data_ptr<float>(), ptr(J), dJ.data_ptr<float>(),
                                ctx->saved_data["bias_shape"].toIntVector(),
                                ctx->saved_data["bias_grad"].toBool());
    Tensor dQ = torch::empty({b, n, hk, dk}), dK = torch::empty({b, m, hk, dk});
    const float* dj = dJ.data_ptr<float>();
    float *dq = dQ.data_ptr<float>(), *dkp = dK.data_ptr<float>();
    for (int64_t bb = 0; bb < b; ++bb)
      for (int64_t g = 0; g < hk; ++g) {
        // dQ_g = dJ_g K_g, dK_g = dJ_g^T Q_g
        blas::sgemm(false, false, n, dk, m, 1.0f, dj + (bb * n * hk + g) * m, hk * m,
                    kk + (bb * m * hk + g) * dk, hk * dk, 0.0f, dq + (bb * n * hk + g) * dk, hk * dk);
        blas::sgemm(true, false, m, dk, n, 1.0f, dj + (bb * n * hk + g) * m, hk * m,
                    q + (bb * n * hk + g) * dk, hk * dk, 0.0f, dkp + (bb * m * hk + g) * dk, hk * dk);
      }
    return {dQ, dK, dV, gr.dP_l, gr.dP_w, gr.dbias, Tensor()};
  }
};

// [b,g,n,m] mixed across heads by P [g,g2] -> [b,g2,n,m].
Tensor mix_heads_aten(const Tensor& T, const Tensor& P) {
  return torch::einsum("bgnm,gh->bhnm", {T, P});
}

// Heads-major J [b,h_k,n,m] -> U [b,h_v,n,m], in ATen.
Tensor heads_softmax_heads_major(const Tensor& J, const Tensor& P_l, const Tensor& P_w,
                                 const Tensor& bias, const Tensor& mask) {
  Tensor L = P_l.defined() ? mix_heads_aten(J, P_l) : J.clone();
  add_bias_and_mask(L, bias, mask);
  Tensor W = torch::softmax(L, -1);
  return P_w.defined() ? mix_heads_aten(W, P_w) : W;
}

}  // namespace

void set_fused_attention(bool enabled) { g_fused = enabled; }
bool fused_attention_enabled() { return g_fused; }

Tensor heads_softmax_reference(const Tensor& J, const Tensor& P_l, const Tensor& P_w,
                               const Tensor& bias, const Tensor& mask) {
  return heads_softmax_heads_major(J.transpose(1, 2), P_l, P_w, bias, mask).transpose(1, 2);
}

Tensor attention_core_reference(const Tensor& Q, const Tensor& K, const Tensor& V,
                                const Tensor& P_l, const Tensor& P_w, const Tensor& bias,
                                const Tensor& mask) {
  Tensor J = torch::matmul(Q.transpose(1, 2), K.permute({0, 2, 3, 1}));    // [b,h_k,n,m]
  Tensor U = heads_softmax_heads_major(J, P_l, P_w, bias, mask);          // [b,h_v,n,m]
  return torch::matmul(U, V.transpose(1, 2)).transpose(1, 2);             // [b,n,h_v,d_v]
}

Tensor heads_softmax(const Tensor& J, const Tensor& P_l, const Tensor& P_w, const Tensor& bias,
                     const Tensor& mask) {
  const int64_t h = P_l.defined() ? P_l.size(1) : J.size(2);
  if (!fusable(J, P_l, P_w, bias, mask, {J.size(0), h, J.size(1), J.size(3)}))
    return heads_softmax_reference(J, P_l, P_w, bias, mask);
  return HeadsSoftmaxFn::apply(J, placeholder(P_l), placeholder(P_w), placeholder(bias),
                               placeholder(mask));
}

Tensor attention_core(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l,
                      const Tensor& P_w, const Tensor& bias, const Tensor& mask) {
  const int64_t h = P_l.defined() ? P_l.size(1) : Q.size(2);
  const bool fp32 = K.scalar_type() == torch::kFloat32 && V.scalar_type() == torch::kFloat32;
  if (!fp32 || !fusable(Q, P_l, P_w, bias, mask, {Q.size(0), h, Q.size(1), K.size(1)}))
    return attention_core_reference(Q, K, V, P_l, P_w, bias, mask);
  return AttentionCoreFn::apply(Q, K, V, placeholder(P_l), placeholder(P_w), placeholder(bias),
                                placeholder(mask));
}

}  // namespace thx
