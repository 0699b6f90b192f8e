// adafactor_step.h: one group's Adafactor step as thx's kernels take it (training/adafactor_kernels.cuh;
// adafactor_grouped.cpp fills it): plain data, no kernels, so that the optimizer's C++ needs no CUDA.
#pragma once
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "training/adafactor_hyper.h"

namespace thx::cuda::adafactor {

// A group's step: its members' weights and gradients (fp32, contiguous), the view, the factored
// dims (optimizer.h's factored_dims; none: unfactored), the stacked state, the hyperparameters.
struct GroupStep {
  std::vector<float*> w;
  std::vector<const float*> g;
  std::vector<int64_t> view;
  std::optional<std::pair<int64_t, int64_t>> dims;
  float *vr = nullptr, *vc = nullptr, *v = nullptr, *m = nullptr;  // [members, ...]; m null: no momentum
  Hyper h{};
  int device = -1;  // the GPU the tensors are on (-1: the CPU)
};

// Runs a group's step in the kernels' stream order: CUDA's (group_step_cuda, in builds with thx's
// CUDA kernels), or for the tests the emulator's on the CPU.
using GroupRunner = void (*)(const GroupStep&);
void group_step_cuda(const GroupStep& s);

}  // namespace thx::cuda::adafactor
