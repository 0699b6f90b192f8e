// grad_sync.h: gradients summed across the ranks of a data-parallel run, in buckets launched
// while backward is still running: c10d::Reducer, the engine of PyTorch's
// DistributedDataParallel, used from C++.
//
// The Reducer hooks every parameter's gradient accumulator. When the hooks are armed
// (prepare(), on the last micro-batch of a step), a bucket of about 25 MB (the first one 1 MB,
// as DDP) is all-reduced as soon as backward has produced all of its gradients, while backward
// goes on with the layers below; when backward returns, every .grad holds the sum over ranks.
// Micro-batches before the last accumulate locally, unreduced (DDP's no_sync).
//
// The reduction is a sum, not DDP's mean: the loop weights each rank's loss by its share of
// the whole step's weight (loop.h), so the sum is the gradient of the global mean, as one
// process computes it. A communication hook (c10d::CommHookInterface) replaces DDP's
// division by the world size.
#pragma once
#include <torch/torch.h>

#include <memory>
#include <vector>

namespace c10d {
class ProcessGroup;
}

namespace thx::dist {

// What the last reduced backward cost (seconds on the steady clock; see benchmarks.md).
struct SyncStats {
  int64_t buckets = 0, bytes = 0;  // all-reduced per step
  double backward_s = 0;           // prepare() to the end of backward
  double comm_s = 0;               // time with at least one bucket in flight
  double exposed_s = 0;            // of comm_s, after the last bucket was launched
};

class GradSync {
 public:
  // params: every parameter that receives a gradient in a step, as the optimizer holds them.
  // find_unused: some parameters may get no gradient in a step (they keep none, as in one
  // process); costs one traversal of the autograd graph per step.
  GradSync(const std::vector<torch::Tensor>& params, bool find_unused, int64_t bucket_bytes = 25 << 20);
  ~GradSync();
  // The same over a group of this process alone (a HashStore; Gloo on loopback), in any launch:
  // what a rank's Reducer holds, for the memory bound's test
  // (tests/models/memory_bound_measured_test.cpp). nullptr in a build without c10d.
  static std::unique_ptr<GradSync> on_own_group(const std::vector<torch::Tensor>& params,
                                                int64_t bucket_bytes = 25 << 20);
  // Arm the hooks for the backward of `loss` (the step's last micro-batch on this rank).
  void prepare(const torch::Tensor& loss);
  // Call after that backward returned: fills stats().
  void finish();
  const SyncStats& stats() const { return stats_; }

  struct Timeline;
  struct Impl;  // c10d::Reducer (grad_sync.cpp); nothing in a build without c10d

 private:
  GradSync();
  void start(const std::vector<torch::Tensor>& params, bool find_unused, int64_t bucket_bytes,
             c10d::ProcessGroup* group);
  std::unique_ptr<Impl> impl_;
  std::shared_ptr<Timeline> timeline_;
  SyncStats stats_;
};

}  // namespace thx::dist
