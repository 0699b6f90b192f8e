// launch.h: what a command does to run data parallel: read the `distributed:` block, join
// torchrun's group, and agree on the config before any work.
//
//   distributed:
//     timeout_s: 300   # a collective (or the rendezvous) that makes no progress this long fails
//
// The block is a launch setting, not part of the experiment: it is taken out of the config
// tree before the run's config is read, so it is not in config.yaml, checkpoints, config
// hashes or the --resume comparison, and it may differ between a run and its resume.
#pragma once
#include <functional>
#include <string>

#include "common/config_tree.h"

namespace thx::dist {

struct DistributedConfig {
  double timeout_s = 300;
};

template <class V>
void visit(V& v, DistributedConfig& c) {
  v("timeout_s", c.timeout_s,
    "seconds a collective or the rendezvous may make no progress before the ranks stop with an error");
}

// Reads and removes the block (InputError naming the file and line of a bad value).
DistributedConfig take_distributed_config(ConfigTree& tree);

// Under torchrun (WORLD_SIZE > 1): join the group, then check that every rank resolved the
// same config (InputError naming the ranks that differ). One process: nothing.
void start(const DistributedConfig& c, const std::string& resolved_yaml);

// Run f on rank 0 only (checks of a run directory the other ranks may not see); an InputError
// it throws is thrown on every rank with the same line, so no rank waits for the others.
void on_rank0(const std::function<void()>& f);

}  // namespace thx::dist
