#include "distributed/launch.h"

#include "common/error.h"
#include "distributed/dist.h"

namespace thx::dist {
namespace {

struct DistributedRoot {
  DistributedConfig distributed;
};

template <class V>
void visit(V& v, DistributedRoot& c) {
  v("distributed", c.distributed, "data-parallel launch settings (under torchrun)");
}

}  // namespace

DistributedConfig take_distributed_config(ConfigTree& tree) {
  ConfigTree block = tree.take("distributed");
  return load_config<DistributedRoot>(block, [](const DistributedRoot& r) {
           if (!(r.distributed.timeout_s > 0))
             throw ConfigError("distributed.timeout_s", fmt::format("{} is not a positive number of seconds",
                                                                    r.distributed.timeout_s));
         }).distributed;
}

void start(const DistributedConfig& c, const std::string& resolved_yaml) {
  const LaunchEnv env = read_launch_env();
  init(env, c.timeout_s);
  check_same("resolved config", resolved_yaml);
}

void on_rank0(const std::function<void()>& f) {
  std::string error;
  if (rank() == 0) {
    try {
      f();
    } catch (const InputError& e) {
      if (!active()) throw;
      error = e.what();
    }
  }
  error = broadcast_bytes(error);
  if (!error.empty()) throw InputError(error);
}

}  // namespace thx::dist
