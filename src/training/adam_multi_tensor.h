// adam_multi_tensor.h: the Adam family's update (optimizer.cpp states it) for a list of
// parameters at once, the path parameters off the CPU take. Per tensor the update is about a
// dozen operations (and LAMB's two norms); on a GPU each is a kernel launch, and BERT-base's ~200
// tensors make the step launch-bound. ATen's multi-tensor (_foreach_) operations launch one
// kernel for many tensors; the trust ratio stays on the device.
#pragma once
#include <torch/torch.h>

#include <vector>

#include "training/optimizer.h"

namespace thx {

// One step for params[i], i in `which` (their gradients defined), with moments m[i], v[i];
// c1, c2 the bias corrections (1 without).
void adam_multi_tensor_step(std::vector<OptimizedParam>& params, std::vector<torch::Tensor>& m,
                            std::vector<torch::Tensor>& v, const std::vector<size_t>& which, const AdamOptions& o,
                            double lr, double c1, double c2);

}  // namespace thx
