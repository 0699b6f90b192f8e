// single_process.cpp: the distributed layer of a build without c10d (cmake -DTHX_DISTRIBUTED=OFF).
// Every run is one process: a launch with WORLD_SIZE > 1 is refused with one line; every
// collective returns its input, as dist.h promises for one process. It exists so that thx still
// builds against a LibTorch whose c10d headers do not compile here (a GPU machine's wheel is
// tried with c10d first: scripts/gpu_build.sh).
#include <fmt/format.h>

#include "common/error.h"
#include "distributed/dist.h"
#include "distributed/grad_sync.h"

namespace thx::dist {

void init(const LaunchEnv& env, double timeout_s) {
  if (env.world_size > 1)
    throw InputError(fmt::format("environment: WORLD_SIZE={}, but this thx was built without data parallelism "
                                 "(cmake -DTHX_DISTRIBUTED=OFF: no c10d); run one process", env.world_size));
}
void shutdown() {}
bool active() { return false; }
int rank() { return 0; }
int world_size() { return 1; }
int local_world_size() { return 1; }
double timeout_s() { return 0; }
c10d::ProcessGroup& group() { throw RunError("dist::group(): this build has no c10d (THX_DISTRIBUTED=OFF)"); }
void guard(const char*, const std::function<void()>& f) { f(); }
void broadcast(std::vector<torch::Tensor>) {}
void all_reduce_sum(torch::Tensor&) {}
std::vector<torch::Tensor> all_gather(const torch::Tensor& t) { return {t}; }
std::string broadcast_bytes(const std::string& from_rank0) { return from_rank0; }
std::vector<std::string> all_gather_bytes(const std::string& mine) { return {mine}; }
void barrier() {}
void check_same(const std::string&, const std::string&) {}

struct GradSync::Timeline {};
struct GradSync::Impl {};
GradSync::GradSync(const std::vector<torch::Tensor>&, bool, int64_t) {}
GradSync::~GradSync() = default;
std::unique_ptr<GradSync> GradSync::on_own_group(const std::vector<torch::Tensor>&, int64_t) { return nullptr; }
void GradSync::prepare(const torch::Tensor&) {}
void GradSync::finish() {}

}  // namespace thx::dist
