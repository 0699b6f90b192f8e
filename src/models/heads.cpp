#include "models/heads.h"

#include "models/encoder.h"

// Shapes as heads.h: b examples, n positions, d = d_model, out head outputs.
namespace thx {

TaskHeadImpl::TaskHeadImpl(int64_t d, int64_t out) {
  w = register_parameter("w", torch::empty({d, out}));  // [d,out]
  b = register_parameter("bias", torch::zeros({out}));  // [out]
  init_truncated_normal(w, 0.02);
}

torch::Tensor TaskHeadImpl::forward(const torch::Tensor& x) const {
  if (x.dim() == 2) return torch::addmm(b, x, w);  // [b,d] -> [b,out]
  return torch::matmul(x, w) + b;                   // [b,n,d] -> [b,n,out]
}

}  // namespace thx
