// step_profile.h: where a training step's time goes, from LibTorch's own profiler.
//
// profile_step runs fn (one whole step: forward, backward, optimizer) under LibTorch's legacy
// CPU profiler and returns the self time of every op on the calling thread (time inside an op
// minus the ops it called), summed by name, and grouped into phases: the GEMMs (oneDNN or
// BLAS behind aten::mm/bmm/addmm), the fused attention core's own work (its row pass and
// conversions; its GEMMs count as GEMMs), casts (with the copy inside a conversion), norms,
// the loss, the optimizer (thx's scope
// "thx::optimizer"), and the rest (elementwise ops, copies, autograd's bookkeeping).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace thx {

struct StepProfile {
  struct Op {
    std::string name;
    double self_ms = 0;
    int64_t calls = 0;
  };
  double total_ms = 0;                                   // the step, as the profiler saw it
  std::vector<Op> ops;                                   // by self time, largest first
  std::vector<std::pair<std::string, double>> phases;    // (phase, ms), in a fixed order
};

// fn must be the whole step; optimizer steps inside it should run in a RECORD_USER_SCOPE
// named "thx::optimizer" to be their own phase.
StepProfile profile_step(const std::function<void()>& fn);

// Markdown: the phases (ms, share) and the `top` ops by self time.
std::string render_profile(const StepProfile& p, const std::string& title, int top = 12);

}  // namespace thx
