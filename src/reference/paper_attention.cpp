#include "reference/paper_attention.h"

namespace thx::paper {
namespace {

using torch::einsum;
using torch::Tensor;

bool has(const Params& p, const char* name) { return p.count(name) && p.at(name).defined(); }

// Bias and mask come as [b,h,n,m]; the paper's L is [b,n,m,h].
Tensor bias_and_mask(Tensor L, const Tensor& bias, const Tensor& mask) {
  if (bias.defined()) L = L + bias.permute({0, 2, 3, 1});
  if (mask.defined()) L = torch::where(mask.permute({0, 2, 3, 1}), L, torch::full({}, -1e9, L.options()));
  return L;
}

}  // namespace

Tensor multi_head(const Tensor& X, const Tensor& M, const Params& p, const Tensor& bias,
                  const Tensor& mask) {
  Tensor Q = einsum("bnx,xkh->bnkh", {X, p.at("P_q")});  // Q[n,d_k,h]
  Tensor K = einsum("bmx,xkh->bmkh", {M, p.at("P_k")});  // K[m,d_k,h]
  Tensor V = einsum("bmx,xvh->bmvh", {M, p.at("P_v")});  // V[m,d_v,h]
  Tensor L = einsum("bnkh,bmkh->bnmh", {Q, K});          // L[n,m,h]
  L = bias_and_mask(L, bias, mask);
  Tensor W = torch::softmax(L, 2);                       // W[n,m,h], reduced over m
  Tensor O = einsum("bnmh,bmvh->bnvh", {W, V});          // O[n,d_v,h]
  return einsum("bnvh,yvh->bny", {O, p.at("P_o")});      // Y[n,d_Y]
}

Tensor talking_heads(const Tensor& X, const Tensor& M, const Params& p, const Tensor& bias,
                     const Tensor& mask) {
  Tensor Q = einsum("bnx,xkh->bnkh", {X, p.at("P_q")});  // Q[n,d_k,h_k]
  Tensor K = einsum("bmx,xkh->bmkh", {M, p.at("P_k")});  // K[m,d_k,h_k]
  Tensor V = einsum("bmx,xvh->bmvh", {M, p.at("P_v")});  // V[m,d_v,h_v]
  Tensor J = einsum("bnkh,bmkh->bnmh", {Q, K});          // J[n,m,h_k]
  Tensor L = has(p, "P_l") ? einsum("bnmh,hg->bnmg", {J, p.at("P_l")}) : J;  // L[n,m,h]
  if (has(p, "P_Xl")) {
    Tensor R_Xl = einsum("bnx,xhg->bnhg", {X, p.at("P_Xl")});  // R_Xl[n,h_k,h]
    L = L + einsum("bnmh,bnhg->bnmg", {J, R_Xl});
  }
  if (has(p, "P_Ml")) {
    Tensor R_Ml = einsum("bmx,xhg->bmhg", {M, p.at("P_Ml")});  // R_Ml[m,h_k,h]
    L = L + einsum("bnmh,bmhg->bnmg", {J, R_Ml});
  }
  L = bias_and_mask(L, bias, mask);
  Tensor W = torch::softmax(L, 2);                                               // W[n,m,h]
  Tensor U = has(p, "P_w") ? einsum("bnmg,gv->bnmv", {W, p.at("P_w")}) : W;   // U[n,m,h_v]
  if (has(p, "P_Xw")) {
    Tensor R_Xw = einsum("bnx,xgv->bngv", {X, p.at("P_Xw")});  // R_Xw[n,h,h_v]
    U = U + einsum("bnmg,bngv->bnmv", {W, R_Xw});
  }
  if (has(p, "P_Mw")) {
    Tensor R_Mw = einsum("bmx,xgv->bmgv", {M, p.at("P_Mw")});  // R_Mw[m,h,h_v]
    U = U + einsum("bnmg,bmgv->bnmv", {W, R_Mw});
  }
  Tensor O = einsum("bnmv,bmev->bnev", {U, V});      // O[n,d_v,h_v]
  return einsum("bnev,yev->bny", {O, p.at("P_o")});  // Y[n,d_Y]
}

Tensor general_bilinear(const Tensor& X, const Tensor& M, const Tensor& P, const Tensor& Q,
                        const Tensor& bias, const Tensor& mask) {
  Tensor L = einsum("bnx,bmy,xyh->bnmh", {X, M, P});  // L[n,m,h]
  L = bias_and_mask(L, bias, mask);
  Tensor W = torch::softmax(L, 2);                    // W[n,m,h]
  return einsum("bnmh,bmy,yzh->bnz", {W, M, Q});      // Y[n,d_Y]
}

std::pair<Tensor, Tensor> compose_multi_head(const Params& p) {
  Tensor P = einsum("xkh,ykh->xyh", {p.at("P_q"), p.at("P_k")});  // P[d_X,d_M,h]
  Tensor Q = einsum("yvh,zvh->yzh", {p.at("P_v"), p.at("P_o")});  // Q[d_M,d_Y,h]
  return {P, Q};
}

std::pair<Tensor, Tensor> compose_talking_heads(const Params& p) {
  Tensor P = einsum("xkh,ykh,hg->xyg", {p.at("P_q"), p.at("P_k"), p.at("P_l")});  // P[d_X,d_M,h]
  Tensor Q = einsum("yvh,zvh,gh->yzg", {p.at("P_v"), p.at("P_o"), p.at("P_w")});  // Q[d_M,d_Y,h]
  return {P, Q};
}

}  // namespace thx::paper
