// dist.h: the processes of a data-parallel run, on LibTorch's c10d, launched by torchrun.
//
// Engine: c10d::ProcessGroupGloo (CPU; and ProcessGroupNCCL for CUDA tensors where built: nccl.h)
// over a c10d::TCPStore rendezvous, the same classes
// torch.distributed uses; thx writes no transport of its own. The store is found as
// torch.distributed's env:// rendezvous finds it: under torchrun's static rendezvous
// (TORCHELASTIC_USE_AGENT_STORE=True) every rank is a client of the agent's store at
// MASTER_ADDR:MASTER_PORT, under a /worker/attempt_<restart> prefix; otherwise rank 0 hosts it.
//
// Without torchrun's variables (or with WORLD_SIZE=1) thx is one process: every call below is
// then a no-op or returns its input, and nothing of c10d is touched.
//
// Failures: a collective that fails (a peer's socket closed, or nothing for
// distributed.timeout_s) is reported as one RunError naming the rank that stopped: every rank
// bumps a heartbeat counter in the store once a second, and a rank whose counter no longer
// moves is the dead one.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

namespace c10d {
class ProcessGroup;
}

namespace thx::dist {

// torchrun's environment.
struct LaunchEnv {
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  std::string master_addr;
  int master_port = 0;
  bool agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE=True: the agent hosts the store
  int restart_count = 0;     // TORCHELASTIC_RESTART_COUNT
};

// Reads the variables through `get` (getenv by default). InputError, one line naming the
// variable, for a malformed value, RANK outside [0, WORLD_SIZE), or WORLD_SIZE > 1 without
// MASTER_ADDR or MASTER_PORT.
LaunchEnv read_launch_env(const std::function<const char*(const char*)>& get = nullptr);

// Join the group when env.world_size > 1: rendezvous through the store, Gloo on loopback or
// the interface MASTER_ADDR resolves through. timeout_s bounds the rendezvous and every
// collective. Also makes non-zero ranks log warnings and errors only, prefixed "rank N".
void init(const LaunchEnv& env, double timeout_s);
// Leave the group (stops the heartbeat); also at exit.
void shutdown();

bool active();      // in a group of more than one process
int rank();         // 0 in one process
int world_size();   // 1 in one process
int local_world_size();
double timeout_s();
c10d::ProcessGroup& group();  // only when active()

// Collectives over the whole group; all ranks must call them in the same order.
void broadcast(std::vector<torch::Tensor> tensors);          // from rank 0, in place
void all_reduce_sum(torch::Tensor& t);                       // in place
std::vector<torch::Tensor> all_gather(const torch::Tensor& t);  // same shape on every rank
std::string broadcast_bytes(const std::string& from_rank0);  // rank 0's bytes, everywhere
std::vector<std::string> all_gather_bytes(const std::string& mine);
void barrier();

// Every rank's `value` must be equal (a config, a checkpoint's parameters): InputError naming
// `what` and the ranks whose value differs from rank 0's.
void check_same(const std::string& what, const std::string& value);

// Runs f; an exception while the group is active is checked against the heartbeats: if a rank
// has stopped, a RunError names it (and what `doing` was) instead; otherwise the exception is
// rethrown as it was.
void guard(const char* doing, const std::function<void()>& f);

// The line naming ranks that stopped (their heartbeats did not move), for guard(): with the
// out-of-memory killer's kills on this machine since the group formed (/proc/vmstat oom_kill;
// -1 where unknown), named where every rank is on this machine (`one_machine`) and any rose,
// since its SIGKILL leaves nothing in the rank's own log ("most likely", or with `named_pid`, a
// dead rank's pid that the kernel's log names, for certain); said not to be it where none did.
std::string stopped_ranks_line(const std::vector<int>& dead, int64_t oom_kills_since, bool one_machine,
                               int64_t named_pid = 0);

// Data parallel runs on the CPU (Gloo), and on GPUs where thx was built with NCCL (nccl.h), one
// GPU a rank: a group of more than one rank asked to train on a GPU without NCCL, or with more
// ranks on this node (LOCAL_WORLD_SIZE) than it has GPUs, is InputError naming `where`.
void check_device(const torch::Device& device, const std::string& where);
// Why `ranks` processes, `node_ranks` of them on this node, cannot train together on `device` in
// a build with NCCL or without, on a node with `gpus` GPUs; "" where they can.
std::string device_refusal(const torch::Device& device, int ranks, int node_ranks, bool nccl, int64_t gpus);

// Whether this build has NCCL as the group's backend for CUDA tensors (THX_NCCL).
bool nccl_built();
// One rank on GPU 0, without torchrun: a group of Gloo and NCCL over an in-process store, a
// CUDA and a CPU all-reduce, and DDP's Reducer over a CUDA parameter. "" if all worked, else
// one line saying what failed (or that the build has no NCCL). A lent GPU machine has one GPU,
// so this is what can be tested there.
std::string nccl_one_rank_check();

// A stable 64-bit hash (FNV-1a over 8-byte words) of bytes: config hashes and parameter checksums.
uint64_t fnv1a(const void* data, size_t size, uint64_t h = 1469598103934665603ull);
// A checksum of the tensors' bytes, in order (equal on every rank iff they are equal bitwise,
// up to hash collisions).
uint64_t checksum(const std::vector<torch::Tensor>& tensors);

}  // namespace thx::dist
