// checkpoint.h: training state in HDF5, written atomically, the last N kept.
//
// checkpoints/step-00001000.h5:
//   /params/<module path>              every parameter, paper names and shapes for attention
//   /optimizer/<module path>/{vr,vc,v,m}
//   /state/step, /state/optimizer_step, /state/rng (LibTorch's CPU generator, rank 0's),
//   /state/world_size (absent in checkpoints before data parallelism: 1),
//   /state/rng_ranks [W, bytes] uint8: every rank's CPU generator (only when W > 1),
//   /state/rng_cuda [W, bytes] uint8: every rank's CUDA generator (dropout's on a GPU; only
//                                     when the run trains on CUDA),
//   /state/stream/{epoch,doc,offset,example}
//   /state/extra/<name>                uint8: what a trainer keeps beyond these (fine-tuning:
//                                      its data order and sampler state, the best evaluations)
//   attribute "config": the resolved YAML of the run
//   attribute "provenance": JSON of the session that wrote it (version, commit, command line,
//                           host, CPU/GPU, start: common/provenance.h)
// A new checkpoint is complete (temp file, fsync, rename) before any older one is deleted.
#pragma once
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "data/stream.h"

namespace thx {

struct Checkpoint {
  std::map<std::string, torch::Tensor> params, optimizer;
  int64_t step = 0, optimizer_step = 0;
  StreamState stream;
  torch::Tensor rng;
  int64_t world_size = 1;
  torch::Tensor rng_ranks;  // [W, bytes] uint8, or undefined
  torch::Tensor rng_cuda;   // [W, bytes] uint8, or undefined
  std::string config;
  std::map<std::string, std::string> extra;  // /state/extra/<name>, as bytes
};

void save_checkpoint(const std::string& path, const Checkpoint& c);
// InputError naming the file (and dataset) for a missing, truncated or corrupt checkpoint.
Checkpoint load_checkpoint(const std::string& path);

// Checkpoints in dir, oldest first.
std::vector<std::string> list_checkpoints(const std::string& dir);
std::string checkpoint_path(const std::string& dir, int64_t step);
// Delete all but the newest `keep`.
void prune_checkpoints(const std::string& dir, int64_t keep);

}  // namespace thx
