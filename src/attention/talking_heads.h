// talking_heads.h: talking-heads attention (section 4), with optional dynamic projections
// (Appendix A).
//
//   Q[n,d_k,h_k] = X P_q      K[m,d_k,h_k] = M P_k      V[m,d_v,h_v] = M P_v
//   J[n,m,h_k]   = Q·K over d_k                                   dot products
//   L[n,m,h]     = J·P_l[h_k,h]                                   talking-heads projection
//               (+ J·R_Xl[n,h_k,h] + J·R_Ml[m,h_k,h])             dynamic, R_Xl = X P_Xl, ...
//   W[n,m,h]     = softmax_m(L)
//   U[n,m,h_v]   = W·P_w[h,h_v]                                   talking-heads projection
//               (+ W·R_Xw[n,h,h_v] + W·R_Mw[m,h,h_v])             dynamic
//   O[n,d_v,h_v] = U·V over m                   Y[n,d_Y] = O·P_o over (d_v, h_v)
//
// h_k, h and h_v are independent (Table 2). Any subset of the four dynamic generators may be
// enabled (Table 9); each adds d·h_in·h_out parameters.
#pragma once
#include "attention/projected.h"

namespace thx {

class TalkingHeadsAttention : public ProjectedAttention {
 public:
  explicit TalkingHeadsAttention(const AttentionDims& dims);
};

}  // namespace thx
