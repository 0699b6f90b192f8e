// nccl.cpp: nccl.h, and dist.h's nccl_built() and nccl_one_rank_check(). Without THX_NCCL only
// the latter two, which say so.
#include "distributed/dist.h"

#if THX_NCCL
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include "distributed/nccl.h"
#endif

namespace thx::dist {

#if THX_NCCL

bool nccl_built() { return true; }

void add_nccl_backend(const compat::GroupPtr& pg, const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                      std::chrono::milliseconds timeout) {
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout;
  auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(c10::make_intrusive<c10d::PrefixStore>("cuda/", store), rank,
                                                          size, opts);
  pg->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, c10::intrusive_ptr<c10d::Backend>(nccl));
}

namespace {
std::string nccl_check_steps() {
  const auto timeout = std::chrono::milliseconds(60000);
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::HashStore>();
  const compat::GroupPtr pg = compat::make_gloo_group(store, 0, 1, timeout,
                                                      c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  add_nccl_backend(pg, store, 0, 1, timeout);
  const auto cuda = torch::TensorOptions().dtype(torch::kFloat32).device(torch::kCUDA, 0);
  std::vector<at::Tensor> gpu{torch::arange(4, cuda)}, cpu{torch::arange(4, torch::kFloat32)};
  pg->allreduce(gpu)->wait();
  pg->allreduce(cpu)->wait();
  const std::string name = pg->getBackend(c10::DeviceType::CUDA)->getBackendName();
  if (name != "nccl") return "the group's CUDA backend is " + name + ", not nccl";
  if (!torch::equal(gpu[0].cpu(), cpu[0])) return "a one-rank all-reduce of a CUDA tensor changed it";
  // DDP's Reducer over a CUDA parameter: its bucket's all-reduce runs on NCCL during backward.
  const at::Tensor w = torch::randn({5}, cuda).requires_grad_(true);
  auto reducer = compat::make_reducer({w}, {{0}}, {size_t(1) << 20}, pg, int64_t(1) << 20, false, int64_t(1) << 20);
  const at::Tensor loss = (w * w).sum();
  reducer->prepare_for_backward({loss});
  loss.backward();
  torch::cuda::synchronize();
  if (!torch::allclose(w.grad(), 2 * w.detach())) return "the Reducer's gradient over NCCL is not d(w.w)/dw = 2w";
  return "";
}
}  // namespace

std::string nccl_one_rank_check() {
  try {
    return nccl_check_steps();
  } catch (const std::exception& e) {
    std::string s = e.what();
    return "NCCL one-rank check failed: " + s.substr(0, s.find('\n'));
  }
}

#else

bool nccl_built() { return false; }
std::string nccl_one_rank_check() { return "thx was built without NCCL (THX_NCCL)"; }

#endif

}  // namespace thx::dist
