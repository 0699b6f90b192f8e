// adafactor_hyper.h: one Adafactor step's hyperparameters as thx's kernels take them
// (adafactor_kernels.cuh; adafactor_step.h). No includes: device code compiles it too.
#pragma once

namespace thx::cuda::adafactor {

// lr is the group's (lr * lr_scale); beta1 < 0: no momentum.
struct Hyper {
  float decay, eps1, eps2, clip, lr, beta1;
};

}  // namespace thx::cuda::adafactor
