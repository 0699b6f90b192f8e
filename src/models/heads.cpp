#include "models/heads.h"

#include "common/precision.h"
#include "models/encoder.h"

// Shapes as heads.h: b examples, n positions, d = d_model, out head outputs.
namespace thx {

TaskHeadImpl::TaskHeadImpl(int64_t d, int64_t out) {
  w = register_parameter("w", torch::empty({d, out}));  // [d,out]
  b = register_parameter("bias", torch::zeros({out}));  // [out]
  init_truncated_normal(w, 0.02);
}

// The product in the compute dtype (common/precision.h); the scores, a softmax's input, in fp32.
torch::Tensor TaskHeadImpl::forward(const torch::Tensor& x) const {
  if (x.dim() == 2) return to_fp32(torch::addmm(to_compute(b), to_compute(x), to_compute(w)));  // [b,d] -> [b,out]
  return to_fp32(torch::matmul(to_compute(x), to_compute(w))) + b;  // [b,n,d] -> [b,n,out]
}

}  // namespace thx
