// project_weights.h: the weights-projection-only hybrid (section 7.1.3, Tables 3 and 6).
//
//   L[n,m,h] = Q·K over d_k (no P_l: the keys use the h softmax heads, h_k = h)
//   W[n,m,h] = softmax_m(L)          U[n,m,h_v] = W·P_w[h,h_v]          O = U·V over m
#pragma once
#include "attention/projected.h"

namespace thx {

class ProjectWeightsAttention : public ProjectedAttention {
 public:
  explicit ProjectWeightsAttention(const AttentionDims& dims);
};

}  // namespace thx
