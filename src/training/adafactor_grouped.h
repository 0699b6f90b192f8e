// adafactor_grouped.h: Adafactor's update (optimizer.h states it) for many parameters of one
// view at once, the path a GPU's parameters take. Per parameter, the ATen composition is ~25
// operations; on a GPU each is a kernel launch and a dispatch, and T5-base's ~200 tensors made
// the update launch-bound (0.072 s of a 0.204 s bf16 step on an H200). Stacked, the same
// operations run once per group of equal views (about ten groups in T5-base): the gradients
// are stacked into [G, view...] (one copy), the state lives stacked (each parameter's state is
// a view of its row, so checkpoints see no difference), the per-parameter RMS of the weights
// comes from one multi-tensor norm, and the update is subtracted by one multi-tensor op.
#pragma once
#include <torch/torch.h>

#include <optional>
#include <utility>
#include <vector>

#include "training/adafactor_step.h"
#include "training/optimizer.h"

namespace thx {

struct AdafactorGroup {
  std::vector<size_t> members;                        // indices into the optimizer's parameters
  std::vector<int64_t> view;                          // each member's view; the state is [G, view...]
  std::optional<std::pair<int64_t, int64_t>> dims;    // factored dims of the view (d0, d1)
  double lr_scale = 1.0;
  torch::Tensor vr, vc, v, m;                         // stacked state: [G, view with d0 -> 1], ...
};

// Groups of two or more of `params` (those `eligible` says) with the same view, factoring,
// learning-rate scale, dtype and device, with their stacked state allocated (zeros, fp32).
std::vector<AdafactorGroup> adafactor_groups(const std::vector<OptimizedParam>& params,
                                             const std::vector<bool>& eligible, const AdafactorOptions& o);

// One step of the group's members, whose gradients are all defined. With `kernels` (the
// optimizer's fused switch, optimizer.h), fp32 members on a GPU take thx's kernels
// (adafactor_kernels.cuh: nine launches a factored group, three an unfactored one, where ATen
// makes some 30) where thx was built with them; else, and with kernels off (also where THX_ATEN or
// bench train --aten names adafactor: common/runtime.h), the ATen composition above.
void adafactor_group_step(AdafactorGroup& group, std::vector<OptimizedParam>& params, const AdafactorOptions& o,
                          double decay, double lr, bool kernels = true);

// Tests: groups on the CPU (AdafactorOptions::group_on_cpu) take `runner` (the emulated kernels)
// where kernels are on; null: the ATen composition.
void set_adafactor_kernels_on_cpu(cuda::adafactor::GroupRunner runner);

}  // namespace thx
