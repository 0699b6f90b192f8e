// project_logits.h: the logits-projection-only hybrid (section 7.1.3, Tables 3 and 6).
//
//   J[n,m,h_k] = Q·K over d_k        L[n,m,h] = J·P_l[h_k,h]        W = softmax_m(L)
//   O[n,d_v,h] = W·V over m          (no P_w: the values use the h softmax heads, h_v = h)
#pragma once
#include "attention/projected.h"

namespace thx {

class ProjectLogitsAttention : public ProjectedAttention {
 public:
  explicit ProjectLogitsAttention(const AttentionDims& dims);
};

}  // namespace thx
