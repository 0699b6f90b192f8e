#include "attention/fused.h"

#include <atomic>
#include <cstring>

#include "attention/attention.h"
#include "attention/blas.h"
#include "attention/optional_tensor.h"
#include "attention/kernels.h"
#include "attention/tiled.h"
#include "common/parallel.h"
#include "common/precision.h"
#include "common/runtime.h"
#include "common/torch_compat.h"

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
const float* ptr(const Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

bool is(const Tensor& t, torch::ScalarType dtype) { return t.defined() && t.scalar_type() == dtype; }

// Whether the row kernels can run this call: on the CPU, with fp32 head projections and bias
// (whatever the products' dtype) and a bias and mask readable row by row.
bool fusable(const Tensor& J, const Tensor& P_l, const Tensor& P_w, const Tensor& bias,
             const Tensor& mask, at::IntArrayRef shape) {
  auto fp32 = [](const Tensor& t) { return !t.defined() || t.scalar_type() == torch::kFloat32; };
  return g_fused && cpu_kernels_enabled() && J.device().is_cpu() && fp32(P_l) && fp32(P_w) && fp32(bias) &&
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

// The work on one query row (all heads), forward and backward. Row pointers address
// [heads, m] blocks with heads m floats apart.
struct RowKernels {
  const RowProblem& p;
  const kernels::Ops& k = kernels::best_ops();
  Tensor Cl, Cw, Pl, Pw;  // P_l^T [h,h_k], P_w^T [h_v,h], P_l [h_k,h], P_w [h,h_v]
  Rows<float> B;
  Rows<uint8_t> Mk;

  explicit RowKernels(const RowProblem& p_) : p(p_) {
    if (p.P_l.defined()) Cl = p.P_l.t().contiguous(), Pl = p.P_l.contiguous();
    if (p.P_w.defined()) Cw = p.P_w.t().contiguous(), Pw = p.P_w.contiguous();
    if (p.bias.defined()) B = Rows<float>(p.bias);
    if (p.mask.defined()) Mk = Rows<uint8_t>(p.mask);
  }

  // J [h_k,m] -> W [h,m] (W may be J without P_l) -> U [h_v,m] (U may be W without P_w).
  void forward(const float* J, float* W, float* U, int64_t bb, int64_t i) const {
    const int64_t m = p.m;
    if (Cl.defined()) k.mix(W, m, J, m, ptr(Cl), p.hk, 1, p.h, p.hk, m, false);
    else if (W != J) std::memcpy(W, J, sizeof(float) * p.h * m);
    softmax_rows(W, bb, i);
    if (Cw.defined()) k.mix(U, m, W, m, ptr(Cw), p.h, 1, p.hv, p.h, m, false);
  }

  // In place: W [h,m] = softmax(L + bias) with the mask, row by row.
  void softmax_rows(float* W, int64_t bb, int64_t i) const {
    for (int64_t hh = 0; hh < p.h; ++hh) k.softmax(W + hh * p.m, B.at(bb, hh, i), Mk.at(bb, hh, i), p.m);
  }

  // U [h_v,m] = P_w^T W, for the backward pass.
  void weights_to_values(const float* W, float* U) const {
    k.mix(U, p.m, W, p.m, ptr(Cw), p.h, 1, p.hv, p.h, p.m, false);
  }

  // dU [h_v,m], W [h,m], J [h_k,m] -> dJ [h_k,m] (dJ may be dU without projections).
  // Adds to gl (dP_l), gw (dP_w) and, through bias_row, the bias gradient. dW, dL: scratch
  // [h,m] each.
  template <class BiasRow>
  void backward(const float* dU, const float* W, const float* J, float* dJ, float* dWbuf,
                float* dLbuf, float* gl, float* gw, BiasRow&& bias_row, int64_t bb,
                int64_t i) const {
    const int64_t m = p.m, h = p.h;
    const float* dW = dU;  // dW = P_w dU, dP_w += W dU^T
    if (Pw.defined()) {
      k.mix(dWbuf, m, dU, m, ptr(Pw), p.hv, 1, h, p.hv, m, false);
      k.gram(gw, W, m, h, dU, m, p.hv, m);
      dW = dWbuf;
    }
    // dL = W (dW - sum W dW), 0 where masked; straight into dJ when there is no P_l.
    float* dL = Pl.defined() ? dLbuf : dJ;
    for (int64_t hh = 0; hh < h; ++hh)
      k.softmax_backward(dL + hh * m, W + hh * m, dW + hh * m, Mk.at(bb, hh, i), m);
    for (int64_t hh = 0; hh < h; ++hh)
      if (float* d = bias_row(bb, hh, i)) {
        const float* s = dL + hh * m;
        for (int64_t j = 0; j < m; ++j) d[j] += s[j];
      }
    if (Pl.defined()) {  // dP_l += J dL^T, dJ = P_l dL
      k.gram(gl, J, m, p.hk, dL, m, h, m);
      k.mix(dJ, m, dL, m, ptr(Pl), h, 1, p.hk, h, m, false);
    }
  }
};

// The bias gradient is dL summed to the bias's shape [B,H,N,m], B in {1,b}, H in {1,h},
// N in {1,n}. Every backward here splits its work across threads by query rows, each row's
// whole batch on one thread, so a bias row of N = n is reached by one thread only (which adds
// over the batch in order: the same sum at any thread count); with N = 1 each thread adds
// into its own accumulator, summed in thread order at the end (the same sum every run).
struct BiasGrad {
  bool on = false, per_thread = false;
  int64_t Bb = 1, Hb = 1, Nb = 1, m = 0;
  std::vector<int64_t> shape;
  Tensor acc;  // [threads or 1, B, H, N, m]

  BiasGrad(AutogradContext* ctx, int64_t m_, int threads) : m(m_) {
    on = ctx->saved_data["bias_grad"].toBool();
    if (!on) return;
    shape = ctx->saved_data["bias_shape"].toIntVector();
    std::vector<int64_t> s4(4 - std::min<size_t>(4, shape.size()), 1);
    s4.insert(s4.end(), shape.begin(), shape.end());
    Bb = s4[0], Hb = s4[1], Nb = s4[2];
    per_thread = Nb == 1;
    acc = torch::zeros({per_thread ? threads : 1, Bb, Hb, Nb, m});
  }
  // Row (b, h, i) of this thread's accumulator, or null when no gradient is wanted.
  auto row_fn(int t) const {
    float* base = on ? acc[per_thread ? t : 0].data_ptr<float>() : nullptr;
    return [this, base](int64_t b, int64_t h, int64_t i) -> float* {
      if (!base) return nullptr;
      return base + (((Bb == 1 ? 0 : b) * Hb + (Hb == 1 ? 0 : h)) * Nb + (Nb == 1 ? 0 : i)) * m;
    };
  }
  Tensor result() const { return on ? acc.sum(0).view(shape) : Tensor(); }
};

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
    const RowKernels rk(p);
    Tensor W = torch::empty({p.b, p.n, p.h, p.m});
    Tensor U = P_w.defined() ? torch::empty({p.b, p.n, p.hv, p.m}) : W;
    const float* pJ = J.data_ptr<float>();
    float *pW = W.data_ptr<float>(), *pU = U.data_ptr<float>();
    thx::parallel_for(0, p.n, 4, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t bb = 0; bb < p.b; ++bb) {
          const int64_t row = bb * p.n + i;
          rk.forward(pJ + row * p.hk * p.m, pW + row * p.h * p.m, pU + row * p.hv * p.m, bb, i);
        }
    });
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
    const RowKernels rk(p);
    const int threads = at::get_num_threads();
    const Tensor dU = grads[0].contiguous();
    Tensor dJ = torch::empty({p.b, p.n, p.hk, p.m});
    Tensor gPl = P_l.defined() ? torch::zeros({threads, p.hk, p.h}) : Tensor();
    Tensor gPw = P_w.defined() ? torch::zeros({threads, p.h, p.hv}) : Tensor();
    const BiasGrad bias(ctx, p.m, threads);
    const float *pdU = dU.data_ptr<float>(), *pW = W.data_ptr<float>(), *pJ = ptr(J);
    float* pdJ = dJ.data_ptr<float>();
    thx::parallel_for(0, p.n, 4, [&](int64_t i0, int64_t i1) {
      const int t = at::get_thread_num();
      std::vector<float> dWbuf(p.h * p.m), dLbuf(p.h * p.m);
      auto bias_row = bias.row_fn(t);
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t bb = 0; bb < p.b; ++bb) {
          const int64_t row = bb * p.n + i;
          rk.backward(pdU + row * p.hv * p.m, pW + row * p.h * p.m,
                      pJ ? pJ + row * p.hk * p.m : nullptr, pdJ + row * p.hk * p.m, dWbuf.data(),
                      dLbuf.data(), P_l.defined() ? gPl[t].data_ptr<float>() : nullptr,
                      P_w.defined() ? gPw[t].data_ptr<float>() : nullptr, bias_row, bb, i);
        }
    });
    return {dJ, P_l.defined() ? gPl.sum(0) : Tensor(), P_w.defined() ? gPw.sum(0) : Tensor(),
            bias.result(), Tensor()};
  }
};

// ---- attention_core ----------------------------------------------------------------------
//
// Two kinds of product, two tools. J = Q K^T and dU = dO V^T have a short inner dimension
// (d_k, d_v) and a long [n, m] output that the row kernels consume at once: they are
// computed in cache, kRows query rows at a time, by the mix kernel, and never stored. U V,
// U^T dO, dJ K and dJ^T Q have long inner dimensions: BLAS runs them well, on each head's
// block in place through its leading dimension (blas.h). Stored for the backward pass: W,
// and U when there is a P_w. J is recomputed.

constexpr int64_t kRows = 24;  // query rows per block (measured best of 6, 12, 24, 48)

struct CoreShapes {
  int64_t b, n, m, hk, dk, hv, dv;
  CoreShapes(const Tensor& Q, const Tensor& K, const Tensor& V)
      : b(Q.size(0)), n(Q.size(1)), m(K.size(1)), hk(Q.size(2)), dk(Q.size(3)), hv(V.size(2)),
        dv(V.size(3)) {}
  int64_t blocks() const { return (n + kRows - 1) / kRows; }
};

// X [R,g,m] for query rows i0.. of batch bb: X_g = A_g B_g^T, with A [b,n,g,d] and
// B^T [b,g,d,m] (J from Q and K^T, dU from dO and V^T).
void block_product(const kernels::Ops& k, const CoreShapes& s, int64_t g, int64_t d,
                   const float* A, const float* Bt, float* X, int64_t bb, int64_t i0, int64_t R) {
  const float* Ab = A + (bb * s.n + i0) * g * d;
  for (int64_t h = 0; h < g; ++h)
    k.mix(X + h * s.m, g * s.m, Bt + (bb * g + h) * d * s.m, s.m, Ab + h * d, g * d, 1, R, d,
          s.m, false);
}

// What both attention cores keep for backward: Q, K, V, W, U (when there is a P_w), P_l, P_w,
// the mask, and the bias's shape; and, rebuilt from them, the shapes and the row problem.
void save_core(AutogradContext* ctx, const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& W,
               const Tensor& U, const Tensor& P_l, const Tensor& P_w, const Tensor& mask, const Tensor& bias) {
  ctx->save_for_backward({Q, K, V, W, placeholder(P_w.defined() ? U : Tensor()), placeholder(P_l),
                          placeholder(P_w), placeholder(mask)});
  save_bias_info(ctx, bias);
}

struct SavedCore {
  std::vector<Tensor> sv;
  Tensor Q, K, V, W, U, P_l, P_w;
  CoreShapes s;
  RowProblem p;
  explicit SavedCore(AutogradContext* ctx)
      : sv(ctx->get_saved_variables()), Q(sv[0]), K(sv[1]), V(sv[2]), W(sv[3]),
        U(present(sv[4]).defined() ? sv[4] : W), P_l(present(sv[5])), P_w(present(sv[6])), s(Q, K, V),
        p(s.b, s.n, s.m, s.hk, P_l, P_w, Tensor(), Tensor()) {
    p.mask = present(sv[7]);
  }
};

struct AttentionCoreFn : torch::autograd::Function<AttentionCoreFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& Q_in, const Tensor& K_in,
                        const Tensor& V_in, const Tensor& P_l_in, const Tensor& P_w_in,
                        const Tensor& bias_in, const Tensor& mask_in) {
    const Tensor Q = Q_in.contiguous(), K = K_in.contiguous(), V = V_in.contiguous();
    const Tensor P_l = present(P_l_in), P_w = present(P_w_in);
    const CoreShapes s(Q, K, V);
    const RowProblem p(s.b, s.n, s.m, s.hk, P_l, P_w, present(bias_in), present(mask_in));
    const RowKernels rk(p);
    const Tensor Kt = K.permute({0, 2, 3, 1}).contiguous();  // [b,h_k,d_k,m]
    Tensor W = torch::empty({s.b, s.n, p.h, s.m});           // [b,n,h,m]
    Tensor U = P_w.defined() ? torch::empty({s.b, s.n, s.hv, s.m}) : W;  // [b,n,h_v,m]
    Tensor O = torch::empty({s.b, s.n, s.hv, s.dv});         // [b,n,h_v,d_v]
    const float *q = Q.data_ptr<float>(), *kt = Kt.data_ptr<float>(), *v = V.data_ptr<float>();
    float *w = W.data_ptr<float>(), *u = U.data_ptr<float>(), *o = O.data_ptr<float>();

    thx::parallel_for(0, s.blocks(), 1, [&](int64_t c0, int64_t c1) {
      std::vector<float> Jbuf(P_l.defined() ? kRows * s.hk * s.m : 0);
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t bb = 0; bb < s.b; ++bb) {
          const int64_t i0 = c * kRows, R = std::min(kRows, s.n - i0), row = bb * s.n + i0;
          float* Wb = w + row * p.h * s.m;                   // [R,h,m]
          float* Jb = P_l.defined() ? Jbuf.data() : Wb;      // [R,h_k,m]
          block_product(rk.k, s, s.hk, s.dk, q, kt, Jb, bb, i0, R);
          for (int64_t r = 0; r < R; ++r)
            rk.forward(Jb + r * s.hk * s.m, Wb + r * p.h * s.m, u + (row + r) * s.hv * s.m, bb,
                       i0 + r);
        }
    });
    blas::parallel_gemms(s.b * s.hv, [&](int64_t i) {  // O_g = U_g V_g
      const int64_t bb = i / s.hv, g = i % s.hv;
      blas::sgemm(false, false, s.n, s.dv, s.m, 1.0f, u + (bb * s.n * s.hv + g) * s.m, s.hv * s.m,
                  v + (bb * s.m * s.hv + g) * s.dv, s.hv * s.dv, 0.0f,
                  o + (bb * s.n * s.hv + g) * s.dv, s.hv * s.dv);
    });
    save_core(ctx, Q, K, V, W, U, P_l, P_w, p.mask, present(bias_in));
    return O;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const SavedCore sv(ctx);
    const Tensor &Q = sv.Q, &K = sv.K, &V = sv.V, &W = sv.W, &U = sv.U, &P_l = sv.P_l, &P_w = sv.P_w;
    const CoreShapes& s = sv.s;
    const RowProblem& p = sv.p;
    const RowKernels rk(p);
    const int threads = at::get_num_threads();
    const Tensor dO = grads[0].contiguous();
    const Tensor Vt = V.permute({0, 2, 3, 1}).contiguous();  // [b,h_v,d_v,m]
    const Tensor Kt = P_l.defined() ? K.permute({0, 2, 3, 1}).contiguous() : Tensor();
    Tensor dJ = torch::empty({s.b, s.n, s.hk, s.m});         // [b,n,h_k,m]
    Tensor dQ = torch::empty({s.b, s.n, s.hk, s.dk}), dK = torch::empty({s.b, s.m, s.hk, s.dk});
    Tensor dV = torch::empty({s.b, s.m, s.hv, s.dv});
    Tensor gPl = P_l.defined() ? torch::zeros({threads, s.hk, p.h}) : Tensor();
    Tensor gPw = P_w.defined() ? torch::zeros({threads, p.h, s.hv}) : Tensor();
    const BiasGrad bias(ctx, s.m, threads);
    const float *q = Q.data_ptr<float>(), *kk = K.data_ptr<float>(), *vt = Vt.data_ptr<float>();
    const float *w = W.data_ptr<float>(), *u = U.data_ptr<float>(), *go = dO.data_ptr<float>();
    const float* kt = ptr(Kt);
    float *dj = dJ.data_ptr<float>(), *dq = dQ.data_ptr<float>(), *dkp = dK.data_ptr<float>();
    float* dvp = dV.data_ptr<float>();

    blas::parallel_gemms(s.b * s.hv, [&](int64_t i) {  // dV_g = U_g^T dO_g
      const int64_t bb = i / s.hv, g = i % s.hv;
      blas::sgemm(true, false, s.m, s.dv, s.n, 1.0f, u + (bb * s.n * s.hv + g) * s.m, s.hv * s.m,
                  go + (bb * s.n * s.hv + g) * s.dv, s.hv * s.dv, 0.0f,
                  dvp + (bb * s.m * s.hv + g) * s.dv, s.hv * s.dv);
    });
    thx::parallel_for(0, s.blocks(), 1, [&](int64_t c0, int64_t c1) {
      const int t = at::get_thread_num();
      std::vector<float> dUbuf(kRows * s.hv * s.m), Jbuf(P_l.defined() ? kRows * s.hk * s.m : 0);
      std::vector<float> Wbuf(p.h * s.m), dWbuf(p.h * s.m), dLbuf(p.h * s.m);
      float* gl = P_l.defined() ? gPl[t].data_ptr<float>() : nullptr;
      float* gw = P_w.defined() ? gPw[t].data_ptr<float>() : nullptr;
      auto bias_row = bias.row_fn(t);
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t bb = 0; bb < s.b; ++bb) {
          const int64_t i0 = c * kRows, R = std::min(kRows, s.n - i0), row = bb * s.n + i0;
          block_product(rk.k, s, s.hv, s.dv, go, vt, dUbuf.data(), bb, i0, R);  // dU = dO V^T
          if (P_l.defined()) block_product(rk.k, s, s.hk, s.dk, q, kt, Jbuf.data(), bb, i0, R);
          for (int64_t r = 0; r < R; ++r) {
            // W streams in from memory: one sequential copy beats the kernels' first touches.
            std::memcpy(Wbuf.data(), w + (row + r) * p.h * s.m, sizeof(float) * p.h * s.m);
            rk.backward(dUbuf.data() + r * s.hv * s.m, Wbuf.data(),
                        P_l.defined() ? Jbuf.data() + r * s.hk * s.m : nullptr,
                        dj + (row + r) * s.hk * s.m, dWbuf.data(), dLbuf.data(), gl, gw,
                        bias_row, bb, i0 + r);
          }
        }
    });
    blas::parallel_gemms(s.b * s.hk, [&](int64_t i) {  // dQ_g = dJ_g K_g, dK_g = dJ_g^T Q_g
      const int64_t bb = i / s.hk, g = i % s.hk;
      blas::sgemm(false, false, s.n, s.dk, s.m, 1.0f, dj + (bb * s.n * s.hk + g) * s.m, s.hk * s.m,
                  kk + (bb * s.m * s.hk + g) * s.dk, s.hk * s.dk, 0.0f,
                  dq + (bb * s.n * s.hk + g) * s.dk, s.hk * s.dk);
      blas::sgemm(true, false, s.m, s.dk, s.n, 1.0f, dj + (bb * s.n * s.hk + g) * s.m, s.hk * s.m,
                  q + (bb * s.n * s.hk + g) * s.dk, s.hk * s.dk, 0.0f,
                  dkp + (bb * s.m * s.hk + g) * s.dk, s.hk * s.dk);
    });
    return {dQ, dK, dV, P_l.defined() ? gPl.sum(0) : Tensor(),
            P_w.defined() ? gPw.sum(0) : Tensor(), bias.result(), Tensor()};
  }
};

// ---- attention_core in bf16 --------------------------------------------------------------
//
// Q, K, V in bf16 (common/precision.h). The four per-head products J = Q K^T, O = U V and,
// backward, dU = dO V^T, dV = U^T dO, dQ = dJ K, dK = dJ^T Q are ATen bf16 matmuls on
// heads-major [b,heads,n,m] tensors (oneDNN on the CPU: fp32 accumulation, bf16 results).
// Between them, the row kernels above run unchanged on fp32 copies of one query row's heads,
// converted in cache: the head mixings, bias, mask, softmax and its backward are fp32, and
// dP_l, dP_w and the bias gradient are fp32 sums. Stored for backward, in bf16: W, and U
// when there is a P_w; J is recomputed (one more Q K^T) when there is a P_l.

const uint16_t* bf16_bits(const Tensor& t) { return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>()); }
uint16_t* bf16_bits_mut(Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>()); }

// The g rows of query row i (batch bb) of a heads-major bf16 T [b,g,n,m], as fp32 [g,m]; and back.
struct HeadRows {
  const kernels::Ops& k;
  int64_t n, m;
  void load(const uint16_t* T, int64_t g, int64_t bb, int64_t i, float* out) const {
    for (int64_t h = 0; h < g; ++h) k.bf16_to_float(T + ((bb * g + h) * n + i) * m, out + h * m, m);
  }
  void store(const float* in, uint16_t* T, int64_t g, int64_t bb, int64_t i) const {
    for (int64_t h = 0; h < g; ++h) k.float_to_bf16(in + h * m, T + ((bb * g + h) * n + i) * m, m);
  }
};

// One query row (batch bb, query i) of the bf16 core: its heads' rows in the heads-major bf16
// tensors (rows n*m apart), through the row kernels in fp32 or, where kernels::amx::pays() for
// the product's size, on AMX tiles. A tile product takes bf16 factors: P_l and P_w rounded once
// (packed here), W as stored, dL rounded; it sums in fp32 as the fp32 kernels do.
struct Bf16Row {
  const RowProblem& p;
  const RowKernels& rk;
  const HeadRows rows{rk.k, p.n, p.m};
  bool mix_l = false, mix_w = false, gram = false;  // which products run on tiles
  kernels::amx::Packed Cl, Cw, Pl, Pw;              // P_l^T [h,h_k], P_w^T [h_v,h], P_l [h_k,h], P_w [h,h_v]

  Bf16Row(const RowProblem& p_, const RowKernels& rk_) : p(p_), rk(rk_) {
    namespace amx = kernels::amx;
    if (p.P_l.defined() && amx::pays(p.h, p.hk, 0)) {
      mix_l = true;
      Cl = amx::pack(ptr(rk.Cl), p.hk, 1, p.h, p.hk), Pl = amx::pack(ptr(rk.Pl), p.h, 1, p.hk, p.h);
    }
    if (p.P_w.defined() && amx::pays(p.hv, p.h, 0)) {
      mix_w = true;
      Cw = amx::pack(ptr(rk.Cw), p.h, 1, p.hv, p.h), Pw = amx::pack(ptr(rk.Pw), p.hv, 1, p.h, p.hv);
    }
    gram = amx::pays(p.h, 0, std::max(p.hk, p.hv));
  }
  int64_t row(int64_t g, int64_t bb, int64_t i) const { return (bb * g * p.n + i) * p.m; }  // head 0's row

  struct Scratch {
    std::vector<float> Jf, Wf, Uf, dUf, dWf, dLf, dJf;
    std::vector<uint16_t> dLb;
    kernels::amx::Scratch tiles;
    Scratch(const RowProblem& p, bool backward) {
      const int64_t rows = std::max({p.hk, p.h, p.hv}) * p.m;
      Jf.resize(rows), Wf.resize(rows);
      if (!backward) Uf.resize(rows);
      else dUf.resize(rows), dWf.resize(rows), dLf.resize(rows), dJf.resize(rows);
      if (backward) dLb.resize(p.h * p.m);
    }
  };

  // J [b,h_k,n,m] -> W [b,h,n,m] and, with P_w, U [b,h_v,n,m], all bf16.
  void forward(const uint16_t* j, uint16_t* w, uint16_t* u, int64_t bb, int64_t i, Scratch& s) const {
    const int64_t nm = p.n * p.m;
    float* W = s.Wf.data();
    if (mix_l) {
      kernels::amx::mix(W, p.m, Cl, j + row(p.hk, bb, i), nm, p.m, s.tiles);
    } else if (p.P_l.defined()) {
      rows.load(j, p.hk, bb, i, s.Jf.data());
      rk.k.mix(W, p.m, s.Jf.data(), p.m, ptr(rk.Cl), p.hk, 1, p.h, p.hk, p.m, false);
    } else {
      rows.load(j, p.hk, bb, i, W);
    }
    rk.softmax_rows(W, bb, i);
    rows.store(W, w, p.h, bb, i);
    if (!p.P_w.defined()) return;
    if (mix_w) return kernels::amx::mix_bf16(u + row(p.hv, bb, i), nm, Cw, w + row(p.h, bb, i), nm, p.m, s.tiles);
    rk.weights_to_values(W, s.Uf.data());
    rows.store(s.Uf.data(), u, p.hv, bb, i);
  }

  // dU, W (and J with P_l) -> dJ, all bf16 [b,heads,n,m]; adds to gl, gw and the bias gradient.
  template <class BiasRow>
  void backward(const uint16_t* du, const uint16_t* w, const uint16_t* j, uint16_t* dj, float* gl, float* gw,
                BiasRow&& bias_row, int64_t bb, int64_t i, Scratch& s) const {
    namespace amx = kernels::amx;
    const int64_t nm = p.n * p.m, m = p.m, h = p.h;
    float *W = s.Wf.data(), *dU = s.dUf.data();
    rows.load(w, h, bb, i, W);
    if (!p.P_w.defined() || !mix_w || !gram) rows.load(du, p.hv, bb, i, dU);  // dU in fp32 where used
    const float* dW = dU;  // dW = P_w dU, dP_w += W dU^T
    if (p.P_w.defined()) {
      if (mix_w) amx::mix(s.dWf.data(), m, Pw, du + row(p.hv, bb, i), nm, m, s.tiles);
      else rk.k.mix(s.dWf.data(), m, dU, m, ptr(rk.Pw), p.hv, 1, h, p.hv, m, false);
      if (gram) amx::gram(gw, w + row(h, bb, i), nm, h, du + row(p.hv, bb, i), nm, p.hv, m, s.tiles);
      else rk.k.gram(gw, W, m, h, dU, m, p.hv, m);
      dW = s.dWf.data();
    }
    float* dL = s.dLf.data();
    for (int64_t hh = 0; hh < h; ++hh)
      rk.k.softmax_backward(dL + hh * m, W + hh * m, dW + hh * m, rk.Mk.at(bb, hh, i), m);
    for (int64_t hh = 0; hh < h; ++hh)
      if (float* d = bias_row(bb, hh, i)) {
        const float* r = dL + hh * m;
        for (int64_t x = 0; x < m; ++x) d[x] += r[x];
      }
    if (!p.P_l.defined()) return rows.store(dL, dj, p.hk, bb, i);
    uint16_t* dLb = s.dLb.data();
    if (gram || mix_l) rk.k.float_to_bf16(dL, dLb, h * m);  // the tiles' factor: dL rounded
    if (gram) amx::gram(gl, j + row(p.hk, bb, i), nm, p.hk, dLb, m, h, m, s.tiles);
    else rows.load(j, p.hk, bb, i, s.Jf.data()), rk.k.gram(gl, s.Jf.data(), m, p.hk, dL, m, h, m);
    if (mix_l) return amx::mix_bf16(dj + row(p.hk, bb, i), nm, Pl, dLb, m, m, s.tiles);
    rk.k.mix(s.dJf.data(), m, dL, m, ptr(rk.Pl), h, 1, p.hk, h, m, false);
    rows.store(s.dJf.data(), dj, p.hk, bb, i);
  }
};

struct AttentionCoreBf16Fn : torch::autograd::Function<AttentionCoreBf16Fn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& Q, const Tensor& K, const Tensor& V,
                        const Tensor& P_l_in, const Tensor& P_w_in, const Tensor& bias_in,
                        const Tensor& mask_in) {
    const Tensor P_l = present(P_l_in), P_w = present(P_w_in);
    const CoreShapes s(Q, K, V);
    const RowProblem p(s.b, s.n, s.m, s.hk, P_l, P_w, present(bias_in), present(mask_in));
    const RowKernels rk(p);
    const Bf16Row br(p, rk);
    const Tensor J = torch::matmul(Q.transpose(1, 2), K.permute({0, 2, 3, 1})).contiguous();  // [b,h_k,n,m]
    Tensor W = torch::empty({s.b, p.h, s.n, s.m}, Q.options());                              // [b,h,n,m]
    Tensor U = P_w.defined() ? torch::empty({s.b, s.hv, s.n, s.m}, Q.options()) : W;         // [b,h_v,n,m]
    const uint16_t* j = bf16_bits(J);
    uint16_t *w = bf16_bits_mut(W), *u = bf16_bits_mut(U);
    // Rows in (query, batch) order, the batch innermost, so query row i's bias rows stay in cache
    // across the batch; split across threads as one list, so that one query (decoding) still
    // spreads over the batch.
    thx::parallel_for(0, s.n * s.b, 1, [&](int64_t r0, int64_t r1) {
      Bf16Row::Scratch scratch(p, false);
      for (int64_t r = r0; r < r1; ++r) br.forward(j, w, u, r % s.b, r / s.b, scratch);
    });
    const Tensor O = torch::matmul(U, V.transpose(1, 2));  // [b,h_v,n,d_v]
    save_core(ctx, Q, K, V, W, U, P_l, P_w, p.mask, present(bias_in));
    return O.transpose(1, 2).contiguous();  // [b,n,h_v,d_v]
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const SavedCore sv(ctx);
    const Tensor &Q = sv.Q, &K = sv.K, &V = sv.V, &W = sv.W, &U = sv.U, &P_l = sv.P_l, &P_w = sv.P_w;
    const CoreShapes& s = sv.s;
    const RowProblem& p = sv.p;
    const RowKernels rk(p);
    const Bf16Row br(p, rk);
    const int threads = at::get_num_threads();
    const Tensor dO = grads[0].to(torch::kBFloat16).transpose(1, 2);            // [b,h_v,n,d_v]
    const Tensor Qh = Q.transpose(1, 2), Kh = K.transpose(1, 2);               // [b,h_k,n|m,d_k]
    const Tensor dV = torch::matmul(U.transpose(2, 3), dO);                     // [b,h_v,m,d_v]
    const Tensor dU = torch::matmul(dO, V.permute({0, 2, 3, 1})).contiguous();  // [b,h_v,n,m]
    const Tensor J = P_l.defined() ? torch::matmul(Qh, Kh.transpose(2, 3)).contiguous() : Tensor();  // [b,h_k,n,m]
    Tensor dJ = torch::empty({s.b, s.hk, s.n, s.m}, Q.options());               // [b,h_k,n,m]
    Tensor gPl = P_l.defined() ? torch::zeros({threads, s.hk, p.h}) : Tensor();
    Tensor gPw = P_w.defined() ? torch::zeros({threads, p.h, s.hv}) : Tensor();
    const BiasGrad bias(ctx, s.m, threads);
    const uint16_t *du = bf16_bits(dU), *w = bf16_bits(W), *j = P_l.defined() ? bf16_bits(J) : nullptr;
    uint16_t* dj = bf16_bits_mut(dJ);
    thx::parallel_for(0, s.n, 1, [&](int64_t i0, int64_t i1) {
      const int t = at::get_thread_num();
      Bf16Row::Scratch scratch(p, true);
      float* gl = P_l.defined() ? gPl[t].data_ptr<float>() : nullptr;
      float* gw = P_w.defined() ? gPw[t].data_ptr<float>() : nullptr;
      auto bias_row = bias.row_fn(t);
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t bb = 0; bb < s.b; ++bb)  // the batch innermost: row i's bias gradient in cache
          br.backward(du, w, j, dj, gl, gw, bias_row, bb, i, scratch);
    });
    const Tensor dQ = torch::matmul(dJ, Kh);                  // [b,h_k,n,d_k]
    const Tensor dK = torch::matmul(dJ.transpose(2, 3), Qh);  // [b,h_k,m,d_k]
    return {dQ.transpose(1, 2), dK.transpose(1, 2), dV.transpose(1, 2),
            P_l.defined() ? gPl.sum(0) : Tensor(), P_w.defined() ? gPw.sum(0) : Tensor(), bias.result(), Tensor()};
  }
};

// Heads-major J [b,h_k,n,m] -> U [b,h_v,n,m], in ATen.
Tensor heads_softmax_heads_major(const Tensor& J, const Tensor& P_l, const Tensor& P_w,
                                 const Tensor& bias, const Tensor& mask) {
  Tensor L = P_l.defined() ? mix_heads(J, P_l) : J.clone();
  add_bias_and_mask(L, bias, mask);
  Tensor W = torch::softmax(L, -1);
  return P_w.defined() ? mix_heads(W, P_w) : W;
}

}  // namespace

void set_fused_attention(bool enabled) { g_fused = enabled; }
bool fused_attention_enabled() { return g_fused; }

// The products in their operands' dtype; the logits, softmax and mixings in fp32 (what a
// CUDA tensor runs, and the bf16 core's reference).
Tensor heads_softmax_reference(const Tensor& J, const Tensor& P_l, const Tensor& P_w,
                               const Tensor& bias, const Tensor& mask) {
  return heads_softmax_heads_major(to_fp32(J).transpose(1, 2), P_l, P_w, bias, mask)
      .transpose(1, 2)
      .to(J.scalar_type());
}

Tensor attention_core_reference(const Tensor& Q, const Tensor& K, const Tensor& V,
                                const Tensor& P_l, const Tensor& P_w, const Tensor& bias,
                                const Tensor& mask) {
  Tensor J = to_fp32(torch::matmul(Q.transpose(1, 2), K.permute({0, 2, 3, 1})));  // [b,h_k,n,m]
  Tensor U = heads_softmax_heads_major(J, P_l, P_w, bias, mask);                  // [b,h_v,n,m]
  return torch::matmul(U.to(V.scalar_type()), V.transpose(1, 2)).transpose(1, 2);  // [b,n,h_v,d_v]
}

Tensor heads_softmax(const Tensor& J, const Tensor& P_l, const Tensor& P_w, const Tensor& bias,
                     const Tensor& mask) {
  const int64_t h = P_l.defined() ? P_l.size(1) : J.size(2);
  const bool fp32 = is(J, torch::kFloat32), bf16 = is(J, torch::kBFloat16);
  if (!(fp32 || bf16) || !fusable(J, P_l, P_w, bias, mask, {J.size(0), h, J.size(1), J.size(3)}))
    return heads_softmax_reference(J, P_l, P_w, bias, mask);
  // bf16 J: the fp32 kernels on a converted copy, the result rounded once to bf16.
  const Tensor U = HeadsSoftmaxFn::apply(to_fp32(J), placeholder(P_l), placeholder(P_w), placeholder(bias),
                                         placeholder(mask));
  return U.to(J.scalar_type());
}

Tensor cpu_attention_core(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l, const Tensor& P_w,
                          const Tensor& bias, const Tensor& mask) {
  const int64_t h = P_l.defined() ? P_l.size(1) : Q.size(2);
  auto all = [&](torch::ScalarType t) { return is(Q, t) && is(K, t) && is(V, t); };
  if (fusable(Q, P_l, P_w, bias, mask, {Q.size(0), h, Q.size(1), K.size(1)})) {
    if (all(torch::kFloat32))
      return AttentionCoreFn::apply(Q, K, V, placeholder(P_l), placeholder(P_w), placeholder(bias),
                                    placeholder(mask));
    if (all(torch::kBFloat16))
      return AttentionCoreBf16Fn::apply(Q, K, V, placeholder(P_l), placeholder(P_w), placeholder(bias),
                                        placeholder(mask));
  }
  return Tensor();
}

}  // namespace thx
