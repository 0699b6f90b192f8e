#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "distributed/dist.h"

// What needs no c10d: torchrun's environment, and the checksums (common to the c10d build,
// dist.cpp, and the single-process one, none/single_process.cpp).
namespace thx::dist {
namespace {

int parse_int(const char* name, const char* value, int lo) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(value, &end, 10);
  if (errno || end == value || *end || v < lo || v > 1 << 20)
    throw InputError(fmt::format("environment: {}=\"{}\" is not an integer >= {} (torchrun sets it; "
                                 "launch with `torchrun --no_python ... thx ...`)", name, value, lo));
  return int(v);
}

}  // namespace

LaunchEnv read_launch_env(const std::function<const char*(const char*)>& get_in) {
  auto get = get_in ? get_in : [](const char* k) -> const char* { return std::getenv(k); };
  LaunchEnv e;
  auto num = [&](const char* name, int& out, int lo) {
    if (const char* v = get(name)) out = parse_int(name, v, lo);
  };
  num("WORLD_SIZE", e.world_size, 1);
  num("RANK", e.rank, 0);
  num("LOCAL_RANK", e.local_rank, 0);
  num("LOCAL_WORLD_SIZE", e.local_world_size, 1);
  num("TORCHELASTIC_RESTART_COUNT", e.restart_count, 0);
  if (e.rank >= e.world_size)
    throw InputError(fmt::format("environment: RANK={} is not below WORLD_SIZE={}", e.rank, e.world_size));
  if (const char* a = get("MASTER_ADDR")) e.master_addr = a;
  if (const char* p = get("MASTER_PORT")) e.master_port = parse_int("MASTER_PORT", p, 1);
  if (e.master_port > 65535)
    throw InputError(fmt::format("environment: MASTER_PORT={} is not a port (1-65535)", e.master_port));
  if (const char* s = get("TORCHELASTIC_USE_AGENT_STORE")) e.agent_store = std::string(s) == "True";
  if (e.world_size > 1 && e.master_addr.empty())
    throw InputError(fmt::format("environment: WORLD_SIZE={} but MASTER_ADDR is not set: launch with torchrun "
                                 "(it sets MASTER_ADDR and MASTER_PORT), or set both", e.world_size));
  if (e.world_size > 1 && e.master_port == 0)
    throw InputError(fmt::format("environment: WORLD_SIZE={} but MASTER_PORT is not set: launch with torchrun "
                                 "(it sets MASTER_ADDR and MASTER_PORT), or set both", e.world_size));
  return e;
}

std::string device_refusal(const torch::Device& device, int ranks, int node_ranks, bool nccl, int64_t gpus) {
  if (ranks <= 1 || device.is_cpu()) return "";
  if (!device.is_cuda() || !nccl)
    return fmt::format("data parallel with {} ranks runs on the CPU only in this build (c10d's Gloo; thx was built "
                       "without NCCL, THX_NCCL): train on the GPU in one process, or on the CPU with --device cpu",
                       ranks);
  // (NCCL refuses two ranks on one GPU, deep in its setup: "Duplicate GPU detected")
  if (node_ranks > gpus)
    return fmt::format("{} ranks on this node (LOCAL_WORLD_SIZE) and {} GPU{}: NCCL needs a GPU for each rank; "
                       "start at most {} a node (torchrun --nproc_per_node {}), or train on the CPU with --device cpu",
                       node_ranks, gpus, gpus == 1 ? "" : "s", gpus, gpus);
  return "";
}

void check_device(const torch::Device& device, const std::string& where) {
  const int64_t gpus = device.is_cuda() ? int64_t(torch::cuda::device_count()) : 0;
  const std::string why = device_refusal(device, world_size(), local_world_size(), nccl_built(), gpus);
  if (!why.empty()) throw InputError(fmt::format("{} {}: {}", where, device.str(), why));
}

uint64_t fnv1a(const void* data, size_t size, uint64_t h) {
  // FNV-1a over 8-byte words (then the tail bytes): a parameter checksum of a T5-base model
  // (900 MB) takes about a tenth of a second.
  const auto* p = static_cast<const unsigned char*>(data);
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < size; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

uint64_t checksum(const std::vector<torch::Tensor>& tensors) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& t : tensors) {
    const torch::Tensor c = t.detach().to(torch::kCPU).contiguous();  // a GPU's tensor: its bytes, copied here
    h = fnv1a(c.data_ptr(), size_t(c.numel()) * c.element_size(), h);
  }
  return h;
}

}  // namespace thx::dist
