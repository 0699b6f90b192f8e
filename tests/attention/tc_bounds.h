// tc_bounds.h: the error bound of talking-heads attention with its products on tensor cores in
// bf16 (bf16_bounds.h's arithmetic), step by step as thx's kernels compute: every product's
// operands rounded to bf16 (J, W, U, dU, dL, dJ and P_l, P_w: mma's operands), its sum in fp32 over
// the reduction (bounded by gamma(2k): tensor cores may truncate rather than round their fp32
// sums, doubling the unit roundoff), the softmax, D and dL in fp32 from unrounded values (with
// the error of the fast exp a GPU runs them with: fast_exp_error), and Q, K, V, dO exact bf16.
// The bias is [1,h,n,m] (its gradient sums over b), as inputs() draws it.
//  - The fused kernels (th_kernels.cuh) keep J and dU = dO V^T in fp32 between products.
//  - The tiled path (`stored_products`) stores them as its bf16 matmuls give them (one rounding
//    each) for the row kernels (th_rows_tc_kernels.cuh), whose products then read them as they are.
#pragma once
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "bf16_bounds.h"
#include "core_problems.h"

namespace thx::test::core {

struct TcBounds {
  Bounded O, dQ, dK, dV, dP_l, dP_w, dbias;
};

// What the bf16 kernels' exp adds to the weights W = softmax(L) on a GPU (thx_exp_fast, CUDA's
// __expf: within 2 + floor(|1.173 x|) units of 2^-23 relative, by the CUDA C++ Programming Guide's
// table of intrinsics; the emulator's is exp itself, so this only loosens the bound there): each
// weight's own exp(L - LSE) at x = ln W, and the row's LSE, whose sum has terms exp(l - max) (x
// within the row's range R of logits) and at most m online rescalings (their arguments adding up
// to at most R): (2 + 2m + 2.346 R) units, moving every weight by as much relative. At m = 72 and
// R = 20 some 4e-5 relative, beside the 2^-9 of W's rounding to bf16 that follows. Checked against
// the row kernels' softmax with the worst fast exp: TiledRowKernelsTc.FastExpErrorBoundsTheWeights...
inline torch::Tensor fast_exp_error(const torch::Tensor& L, const torch::Tensor& W, const torch::Tensor& keep,
                                    int64_t m) {
  const double inf = std::numeric_limits<double>::infinity();
  const torch::Tensor hi = L.masked_fill(keep.logical_not(), -inf).amax(-1, true);
  const torch::Tensor lo = L.masked_fill(keep.logical_not(), inf).amin(-1, true);
  const torch::Tensor range = torch::where(hi >= lo, hi - lo, torch::zeros_like(hi));
  const torch::Tensor own = 2 + 1.173 * W.clamp_min(1e-300).log().abs();
  return std::ldexp(1.0, -23) * W * (own + 2 + 2 * double(m) + 2.346 * range);
}

inline TcBounds tensor_core_bounds(const Inputs& in, bool stored_products = false) {
  auto rb = [](const Bounded& v) { return round_bf16(v); };
  auto mma = [](const std::string& eq, const Bounded& a, const Bounded& b, int64_t k) {
    return product(eq, a, b, 2.0 * double(k));
  };
  auto operand = [&](const Bounded& v) { return stored_products ? v : rb(v); };  // stored: already bf16
  const int64_t b = in.Q.size(0), n = in.Q.size(1), m = in.K.size(1), hk = in.Q.size(2), dk = in.Q.size(3);
  const int64_t hv = in.V.size(2), dv = in.V.size(3), h = in.P_l.defined() ? in.P_l.size(1) : hk;
  const Bounded Q = exact(in.Q), K = exact(in.K), V = exact(in.V), G = exact(in.dO);
  Bounded J = mma("bnkd,bmkd->bknm", Q, K, dk);
  if (stored_products) J = rb(J);
  Bounded L = in.P_l.defined() ? mma("bknm,ks->bsnm", operand(J), rb(exact(in.P_l)), hk) : J;
  if (in.bias.defined()) {
    const torch::Tensor bias = in.bias.to(torch::kFloat64);
    L.e = L.e + kFp32U * (L.x.abs() + bias.abs() + L.e);
    L.x = L.x + bias;
  }
  const torch::Tensor keep = in.mask.defined() ? in.mask.expand_as(L.x) : torch::ones_like(L.x, torch::kBool);
  L.x = L.x.masked_fill(keep.logical_not(), -1e9), L.e = L.e.masked_fill(keep.logical_not(), 0.0);
  Bounded W;  // the softmax's exact perturbation bound, plus fp32's own
  W.x = torch::softmax(L.x, -1);
  W.e = W.x * (torch::exp(L.e + std::get<0>(L.e.max(-1, true))) - 1) + gamma32(double(m) + 16) * W.x;
  W.e = W.e + fast_exp_error(L.x, W.x, keep, m);
  const Bounded U = in.P_w.defined() ? rb(mma("bsnm,st->btnm", rb(W), rb(exact(in.P_w)), h)) : rb(W);
  TcBounds r;
  r.O = rb(mma("btnm,bmte->bnte", U, V, m));
  Bounded dU = mma("bnte,bmte->btnm", G, V, dv);
  if (stored_products) dU = rb(dU);
  const Bounded dW = in.P_w.defined() ? mma("btnm,st->bsnm", operand(dU), rb(exact(in.P_w)), hv) : dU;
  r.dV = rb(mma("btnm,bnte->bmte", U, G, n));
  if (in.P_w.defined()) r.dP_w = mma("bsnm,btnm->st", rb(W), operand(dU), b * n * m);
  const Bounded D = product("bsnm,bsnm->bsn", W, dW, double(m));  // fp32 FMAs
  const Bounded dL = softmax_backward(W, dW, {D.x.unsqueeze(-1), D.e.unsqueeze(-1)}, keep);
  if (in.bias.defined())
    r.dbias = {dL.x.sum(0, true), dL.e.sum(0, true) + gamma32(double(b)) * dL.x.abs().sum(0, true)};
  if (in.P_l.defined()) r.dP_l = mma("bknm,bsnm->ks", operand(J), rb(dL), b * n * m);
  const Bounded dJ = in.P_l.defined() ? rb(mma("bsnm,ks->bknm", rb(dL), rb(exact(in.P_l)), h)) : rb(dL);
  r.dQ = rb(mma("bknm,bmkd->bnkd", dJ, K, m));
  r.dK = rb(mma("bknm,bnkd->bmkd", dJ, Q, n));
  return r;
}

// Every result (O, dQ, dK, dV, dP_l, dP_w, dbias; undefined where absent) within its bound, or
// the first that is not, named.
inline ::testing::AssertionResult within_tc_bounds(const std::vector<torch::Tensor>& got, const TcBounds& B) {
  const Bounded* want[] = {&B.O, &B.dQ, &B.dK, &B.dV, &B.dP_l, &B.dP_w, &B.dbias};
  const char* names[] = {"O", "dQ", "dK", "dV", "dP_l", "dP_w", "dbias"};
  for (size_t i = 0; i < 7; ++i) {
    const torch::Tensor& g = got[i];
    if (g.defined() != want[i]->x.defined()) return ::testing::AssertionFailure() << names[i] << ": defined differs";
    if (!g.defined()) continue;
    const ::testing::AssertionResult r = within(g.cpu(), *want[i]);
    if (!r) return ::testing::AssertionFailure() << names[i] << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

}  // namespace thx::test::core
