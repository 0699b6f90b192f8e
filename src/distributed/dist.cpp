#include "distributed/dist.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include <fmt/ranges.h>

#include "common/error.h"
#include "common/host_memory.h"
#include "common/log.h"
#include "common/torch_compat.h"
#if THX_NCCL
#include "distributed/nccl.h"
#endif

// Shapes: byte strings travel as [n] uint8 tensors, their lengths as [1] int64.
namespace thx::dist {
namespace {

using torch::Tensor;
using Clock = std::chrono::steady_clock;

struct Group {
  LaunchEnv env;
  double timeout_s = 300;
  int64_t oom_kills = -1;  // the kernel's count when the group formed (common/host_memory.h)
  c10::intrusive_ptr<c10d::Store> store, beat_store;
  compat::GroupPtr pg;  // Gloo for CPU tensors
  std::thread beat;
  std::atomic<bool> stop{false};
  ~Group() {
    stop = true;
    if (beat.joinable()) beat.join();
  }
};
std::unique_ptr<Group> g;

std::string beat_key(int r) { return "thx/beat/" + std::to_string(r); }
std::string pid_key(int r) { return "thx/pid/" + std::to_string(r); }  // each rank's process id

c10::intrusive_ptr<c10d::Store> make_store(const LaunchEnv& e, double timeout_s, bool server, bool wait) {
  c10d::TCPStoreOptions o;
  o.port = uint16_t(e.master_port);
  o.isServer = server;
  if (wait) o.numWorkers = size_t(e.world_size);
  o.waitWorkers = wait;
  o.timeout = std::chrono::milliseconds(int64_t(timeout_s * 1000));
  o.multiTenant = true;
  c10::intrusive_ptr<c10d::Store> s = c10::make_intrusive<c10d::TCPStore>(e.master_addr, o);
  if (e.agent_store)
    s = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(e.restart_count), s);
  return s;
}

std::shared_ptr<::gloo::transport::Device> make_device(const LaunchEnv& e) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"))
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  if (e.master_addr == "localhost" || e.master_addr.rfind("127.", 0) == 0)
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

void wait(const c10::intrusive_ptr<c10d::Work>& w) { w->wait(); }

// Heartbeat counters of every rank, or empty when the store does not answer.
std::optional<std::vector<int64_t>> read_beats() {
  try {
    std::vector<int64_t> v;
    for (int r = 0; r < g->env.world_size; ++r) v.push_back(g->store->add(beat_key(r), 0));
    return v;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// Why a collective failed, if a rank has stopped; "" when every rank is alive.
std::string diagnose() {
  const auto before = read_beats();
  const std::string store_gone = fmt::format(
      "the rendezvous store at {}:{} no longer answers: {} has stopped", g->env.master_addr, g->env.master_port,
      g->env.agent_store ? "the torchrun agent of node 0" : "rank 0, which hosts it,");
  if (!before) return store_gone;
  std::this_thread::sleep_for(std::chrono::milliseconds(3000));
  const auto after = read_beats();
  if (!after) return store_gone;
  std::vector<int> dead;
  for (int r = 0; r < g->env.world_size; ++r)
    if (r != g->env.rank && (*after)[size_t(r)] == (*before)[size_t(r)]) dead.push_back(r);
  if (dead.empty()) return "";
  const int64_t now = oom_kills(), kills = g->oom_kills >= 0 && now >= 0 ? now - g->oom_kills : -1;
  const bool one_machine = g->env.world_size == g->env.local_world_size;
  int64_t named = 0;  // a dead rank's pid that the kernel's log names as the out-of-memory killer's
  for (int r : dead) {
    if (!one_machine || kills <= 0) break;
    try {
      if (const int64_t pid = g->store->add(pid_key(r), 0); oom_killed(pid)) named = pid;
    } catch (const std::exception&) {  // the store is gone: the count alone speaks
    }
  }
  return stopped_ranks_line(dead, kills, one_machine, named);
}

std::string first_line(const std::exception& e) {
  std::string s;
  if (auto c = dynamic_cast<const c10::Error*>(&e)) s = c->what_without_backtrace();
  else s = e.what();
  const auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

}  // namespace

std::string stopped_ranks_line(const std::vector<int>& dead, int64_t oom_kills_since, bool one_machine,
                               int64_t named_pid) {
  std::string why = "killed, out of memory or crashed; its own log says which";
  if (one_machine && oom_kills_since > 0)
    why = fmt::format("Linux's out-of-memory killer has ended {} process{} on this machine since the group formed "
                      "(/proc/vmstat oom_kill), {}, which leaves nothing in its own log; {}", oom_kills_since,
                      oom_kills_since == 1 ? "" : "es",
                      named_pid <= 0     ? std::string("most likely it")
                      : dead.size() == 1 ? fmt::format("it among them (the kernel's log names its pid {})", named_pid)
                                         : fmt::format("a rank among them (the kernel's log names pid {})", named_pid),
                      oom_killer_advice("each rank", "train.grad_accum"));
  else if (one_machine && oom_kills_since == 0)
    why = "not ended by this machine's out-of-memory killer (/proc/vmstat oom_kill unchanged); an error or a crash "
          "shows in its own log, a signal or a hang does not";
  return fmt::format("rank{} {} stopped (no heartbeat for 3 s: {}); with torchrun --max_restarts the group restarts "
                     "and --resume continues from the last checkpoint", dead.size() == 1 ? "" : "s",
                     fmt::join(dead, ", "), why);
}

void init(const LaunchEnv& env, double timeout_s) {
  if (env.world_size <= 1 || g) return;
  auto group = std::make_unique<Group>();
  group->env = env, group->timeout_s = timeout_s, group->oom_kills = oom_kills();
  set_log_rank(env.rank);
  // Gloo's TCP pairs and c10d's store write to the other ranks' sockets. Once a rank has died, the
  // default SIGPIPE would kill this one at its next write (exit -13, seen in CI), before the failed
  // collective is diagnosed (`rank N stopped`, below); CPython, which torchrun's workers usually
  // are, ignores SIGPIPE from its start. Ignored, the write fails with EPIPE and Gloo throws.
  std::signal(SIGPIPE, SIG_IGN);
  try {
    group->store = make_store(env, timeout_s, !env.agent_store && env.rank == 0, true);
    const std::chrono::milliseconds timeout(int64_t(timeout_s * 1000));
    group->pg = compat::make_gloo_group(group->store, env.rank, env.world_size, timeout, make_device(env));
#if THX_NCCL
    if (torch::cuda::is_available()) add_nccl_backend(group->pg, group->store, env.rank, env.world_size, timeout);
#endif
    group->beat_store = make_store(env, timeout_s, false, false);
    // This rank's pid, for the others' line should it die (set, not added to: a restarted group
    // may find the last one's).
    const int64_t was = group->beat_store->add(pid_key(env.rank), 0);
    group->beat_store->add(pid_key(env.rank), int64_t(::getpid()) - was);
  } catch (const std::exception& e) {
    throw RunError(fmt::format("joining the group of {} at {}:{} failed within {} s "
                               "(distributed.timeout_s): {}", env.world_size, env.master_addr,
                               env.master_port, timeout_s, first_line(e)));
  }
  Group* raw = group.get();
  group->beat = std::thread([raw] {
    while (!raw->stop) {
      try {
        raw->beat_store->add(beat_key(raw->env.rank), 1);
      } catch (const std::exception&) {  // the store is gone: diagnose() says so
      }
      for (int i = 0; i < 10 && !raw->stop; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  g = std::move(group);
  std::atexit([] { shutdown(); });
  thx::log("dist")->info("rank {} of {} (local {} of {}), Gloo{} over {}:{}, collective timeout {} s", env.rank,
                         env.world_size, env.local_rank, env.local_world_size,
                         nccl_built() && torch::cuda::is_available() ? " and NCCL" : "", env.master_addr,
                         env.master_port, timeout_s);
}

static Group* volatile left_to_exit = nullptr;  // see shutdown()

void shutdown() {
  if (!g) return;
  g->stop = true;
  if (g->beat.joinable()) g->beat.join();
  // The process group and stores are left to the process's end: tearing Gloo down while a
  // peer is gone can block. A global (volatile, so the store is kept) keeps them reachable,
  // so that LeakSanitizer does not report what is left on purpose.
  left_to_exit = g.release();
}

bool active() { return bool(g); }
int rank() { return g ? g->env.rank : 0; }
int world_size() { return g ? g->env.world_size : 1; }
int local_world_size() { return g ? g->env.local_world_size : 1; }
double timeout_s() { return g ? g->timeout_s : 0; }
c10d::ProcessGroup& group() { return *g->pg; }

void guard(const char* doing, const std::function<void()>& f) {
  if (!g) return f();
  try {
    f();
  } catch (const InputError&) {
    throw;
  } catch (const RunError&) {
    throw;
  } catch (const std::exception& e) {
    // A dead or silent rank is named; any other error (a bug, memory) stays what it was.
    const std::string why = diagnose();
    if (why.empty()) throw;
    throw RunError(fmt::format("{} failed: {}", doing, why));
  }
}

void broadcast(std::vector<Tensor> tensors) {
  if (!g || tensors.empty()) return;
  torch::NoGradGuard no_grad;  // parameters are written in place
  guard("broadcast", [&] { c10d::broadcast_coalesced(g->pg, tensors, 16 << 20, 0); });
}

void all_reduce_sum(Tensor& t) {
  if (!g) return;
  guard("all-reduce", [&] {
    std::vector<Tensor> v{t};
    wait(g->pg->allreduce(v));
  });
}

std::vector<Tensor> all_gather(const Tensor& t) {
  if (!g) return {t};
  std::vector<std::vector<Tensor>> out(1);
  for (int r = 0; r < g->env.world_size; ++r) out[0].push_back(torch::empty_like(t));
  guard("all-gather", [&] {
    std::vector<Tensor> in{t.contiguous()};
    wait(g->pg->allgather(out, in));
  });
  return out[0];
}

std::string broadcast_bytes(const std::string& from_rank0) {
  if (!g) return from_rank0;
  Tensor n = torch::tensor({int64_t(from_rank0.size())});  // [1]
  broadcast({n});
  if (n.item<int64_t>() == 0) return {};  // (an empty tensor's data pointer is null)
  Tensor bytes = torch::empty({n.item<int64_t>()}, torch::kUInt8);  // [n]
  if (g->env.rank == 0) std::memcpy(bytes.data_ptr<uint8_t>(), from_rank0.data(), from_rank0.size());
  broadcast({bytes});
  return std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), size_t(bytes.numel()));
}

std::vector<std::string> all_gather_bytes(const std::string& mine) {
  if (!g) return {mine};
  const auto sizes = all_gather(torch::tensor({int64_t(mine.size())}));  // W x [1]
  int64_t longest = 1;
  for (const auto& s : sizes) longest = std::max(longest, s.item<int64_t>());
  Tensor padded = torch::zeros({longest}, torch::kUInt8);  // [longest]
  std::memcpy(padded.data_ptr<uint8_t>(), mine.data(), mine.size());
  const auto all = all_gather(padded);
  std::vector<std::string> out;
  for (size_t r = 0; r < all.size(); ++r)
    out.emplace_back(reinterpret_cast<const char*>(all[r].data_ptr<uint8_t>()), size_t(sizes[r].item<int64_t>()));
  return out;
}

void barrier() {
  if (!g) return;
  guard("barrier", [&] { wait(g->pg->barrier()); });
}

void check_same(const std::string& what, const std::string& value) {
  if (!g) return;
  const uint64_t h = fnv1a(value.data(), value.size());
  const auto all = all_gather_bytes(std::string(reinterpret_cast<const char*>(&h), sizeof h));
  std::vector<int> differ;
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) differ.push_back(int(r));
  if (!differ.empty())
    throw InputError(fmt::format("rank{} {} {} differ{} from rank 0's: every rank must run the same "
                                 "config (is a file different on another node?)",
                                 differ.size() > 1 ? "s" : "", fmt::join(differ, ", "), what,
                                 differ.size() > 1 ? "" : "s"));
}

}  // namespace thx::dist
