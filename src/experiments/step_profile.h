// step_profile.h: where a training step's time goes, from LibTorch's own profilers.
//
// On the CPU, profile_step runs fn (one whole step: forward, backward, optimizer) under LibTorch's
// legacy CPU profiler and returns the self time of every op on the calling thread (time inside an
// op minus the ops it called), summed by name, and grouped into phases: the GEMMs (oneDNN or BLAS
// behind aten::mm/bmm/addmm), the attention core's own work (its row pass and conversions; its
// GEMMs count as GEMMs), casts (with the copy inside a conversion), norms, the loss, the optimizer
// (thx's scope "thx::optimizer"), and the rest (elementwise ops, copies, autograd's bookkeeping).
//
// On a GPU the CPU's time says little (a CUDA op returns once its kernels are queued), so
// profile_step runs fn under Kineto, LibTorch's profiler that reads the GPU's own record of each
// kernel through CUPTI (what torch.profiler runs), and returns the GPU time of every kernel: summed
// by kernel, by the op that launched it (Kineto links each kernel to that op), and by phase. A
// kernel's phase is its launching op's, or the nearest enclosing op's that names one (a softmax
// inside thx's "thx::attention_core" scope is the attention core's; a product inside it is a
// GEMM; the backward of each attention path runs in its autograd node, whose name is the core's
// too: TiledFn, HeadsGemmFn, ...; an autograd node whose name names no phase takes the phase of
// the forward op that made it, so the backward of an ATen composition inside thx::loss is the
// loss's), and every kernel launched inside "thx::optimizer" is the optimizer's. The CPU's self
// times are counted by the same code: an op's phase there is what its kernel's would be on a GPU.
// The step's wall time less its kernels' is the GPU's idle time (waiting for the CPU to launch work).
#pragma once
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace thx {

struct StepProfile {
  struct Op {
    std::string name;
    double self_ms = 0;  // (on a GPU: the time of its kernels)
    int64_t calls = 0;   // (on a GPU: kernels)
  };
  double total_ms = 0;                                   // the step, as the profiler saw it
  std::vector<Op> ops;                                   // by self time, largest first
  std::vector<std::pair<std::string, double>> phases;    // (phase, ms), in a fixed order
  // On a GPU: ops are the ops that launched kernels, with those kernels' time; kernels the kernels
  // by name; phases their time by phase; total_ms the step's wall time, kernels_ms its kernels'.
  bool on_device = false;
  double kernels_ms = 0;
  int64_t kernel_launches = 0;
  std::vector<Op> kernels;
  std::string note;  // why a profile is empty, if it is
};

// fn must be the whole step; optimizer steps inside it should run in a RECORD_USER_SCOPE
// named "thx::optimizer" to be their own phase. fn runs more than once under the profiler: on the
// CPU three times, the fastest reported; on a GPU twice, the second reported. A first step under a
// profiler is slower, and not evenly (step_profile.cpp). On a CUDA device the step is timed to the
// end of its last kernel, and where trace_path is not empty Kineto's timeline of it is written
// there (Chrome's trace format, which Perfetto and chrome://tracing read; a failure is a warning).
StepProfile profile_step(const std::function<void()>& fn, const c10::Device& device = c10::Device(c10::kCPU),
                         const std::string& trace_path = "");

// Markdown: the phases (ms, share) and the `top` ops by self time (on a GPU also the top kernels).
std::string render_profile(const StepProfile& p, const std::string& title, int top = 12);

// What Kineto recorded, as profile_step's GPU side reads it (exposed for its tests).
struct OpSpan {  // an op on a CPU thread
  std::string name;
  uint64_t thread = 0;
  double start_us = 0, end_us = 0;
  uint64_t correlation = 0;  // the id a kernel it launched links to (0: none)
  // autograd's link between a backward node and the forward op that made it: the same sequence
  // number, the forward's thread given on the node (fwd_thread 0: a forward op; sequence -1: none)
  int64_t sequence = -1;
  uint64_t fwd_thread = 0;
};
struct DeviceSpan {  // a kernel, copy or fill on the GPU
  std::string name;
  double us = 0;
  uint64_t linked_correlation = 0;  // its launching op's correlation (0: unknown)
};
struct KinetoSpans {
  std::vector<OpSpan> ops;
  std::vector<DeviceSpan> device;
};
// fn under Kineto (CPU ops; with_cuda: the GPU's kernels, copies and fills too); where trace_path is
// not empty, Kineto's trace is saved there (a LibTorch built without libkineto, as Debian's 1.13,
// records events but cannot save them: a warning).
KinetoSpans record_kineto_spans(const std::function<void()>& fn, bool with_cuda, const std::string& trace_path = "");
// p's ops, kernels, phases, kernels_ms and kernel_launches from what Kineto recorded.
void attribute_kernels(const KinetoSpans& spans, StepProfile& p);
// A kernel's name as a table shows it: no return type, "(anonymous namespace)" as "{anon}", no
// parameter list, at most 100 characters.
std::string short_kernel_name(const std::string& name);

}  // namespace thx
