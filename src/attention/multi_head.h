// multi_head.h: multi-head attention (Vaswani et al., 2017; the paper's section 3.3).
//
//   Q[n,d_k,h] = X[n,d_X] P_q[d_X,d_k,h]        K, V likewise from M
//   L[n,m,h]   = Q·K over d_k                   W[n,m,h] = softmax_m(L)
//   O[n,d_v,h] = W·V over m                      Y[n,d_Y] = O·P_o over (d_v, h)
//
// One head count: h_k = h = h_v. Parameters: 4·d·d_k·h at d_X = d_M = d_Y = d, d_k = d_v.
#pragma once
#include "attention/projected.h"

namespace thx {

class MultiHeadAttention : public ProjectedAttention {
 public:
  explicit MultiHeadAttention(const AttentionDims& dims);
};

}  // namespace thx
