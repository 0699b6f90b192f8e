// host_memory.h: running out of the machine's memory as thx's one line, not the kernel's SIGKILL.
//
// Linux grants more memory than it has (overcommit) and, once it is gone, its out-of-memory
// killer ends the largest process with SIGKILL: no message, no exit code of thx's, mid-step. A
// CPU run whose micro-batch outgrows the machine died that way. So thx checks LibTorch's CPU
// allocations (c10's CPU allocator, which every CPU tensor comes from) against the memory the
// kernel says is available: an allocation that would leave less than a floor free throws
// c10::OutOfMemoryError, as a GPU's caching allocator does when the GPU is full. The training
// loop turns that into its one line (training/loop.cpp: the step, the micro-batch, what to
// change; exit 2, the checkpoints as they were), and `thx bench` into a row that says so.
//
// Available memory: /proc/meminfo's MemAvailable (the kernel's estimate of what it can hand out
// without swapping: free memory and the page cache it can drop), or less where a cgroup's limit
// binds (a container: limit - usage + the inactive page cache, v2's memory.max, or its
// memory.high where lower, above which the kernel throttles, or v1's memory.limit_in_bytes,
// in its own cgroup or an ancestor: common/cgroup.h), or less where
// THX_MEMORY_LIMIT_MB caps this process (limit - its resident memory).
//
// The cost: /proc/meminfo is read at most every 100 ms, and before that only when the
// allocations since the last read could have used up what it left; allocations under 1 MiB are
// only counted. (A 50-step mini T5 run read it 91 times, at 9 us a read on this project's VMs.)
// Memory that does not come from c10 (oneDNN's and OpenBLAS's buffers, thx's kernels' scratch)
// is not checked; the floor leaves room for it. Where the killer ends a run anyway (the check
// off, or memory from elsewhere), `thx sweep` says so: oom_kills() and child_end() below.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace thx {

// The memory the kernel can still hand out, in bytes (0 where unknown), and whose it is.
struct HostMemory {
  double available = 0;  // MemAvailable, or less where a cgroup's limit binds
  double total = 0;      // MemTotal, or a cgroup's lower limit
  std::string owner;     // "this machine's" or "this cgroup's" (whose total), for messages
};
HostMemory host_memory();

// The parts host_memory() reads, for its tests: a field of a /proc/meminfo text ("MemAvailable:")
// in bytes (0 where absent); a cgroup's limit file (v2's memory.max, v1's memory.limit_in_bytes)
// in bytes, 0 where it sets none ("max", or at least the machine's total).
double meminfo_bytes(const std::string& meminfo, const std::string& field);
double cgroup_limit_bytes(const std::string& limit_file, double machine_total);
// A cgroup's files as text: its limit and usage (v2: memory.max, memory.current; v1:
// memory.limit_in_bytes, memory.usage_in_bytes), its memory.stat, and that file's key of the
// inactive page cache (v2: inactive_file; v1: total_inactive_file).
struct CgroupText {
  std::string limit, usage, stat, inactive_key;
};
// host_memory() from those texts: the total is the lowest limit below the machine's total
// ("this cgroup's"), and the available the least of MemAvailable and each such cgroup's limit -
// usage + inactive page cache (which the cgroup drops before its out-of-memory killer runs; an
// ancestor's usage counts its other children's).
HostMemory host_memory_from(const std::string& meminfo, const std::vector<CgroupText>& groups);
// host_memory() with its inputs named, for its tests: a /proc/meminfo text, a /proc/self/cgroup
// text, and where the cgroup file systems are mounted (cgroup.h: the process's cgroup and each
// ancestor, v2 and v1, those whose limit file exists).
HostMemory host_memory_under(const std::string& meminfo, const std::string& self_cgroup, const std::string& root);

// The environment's settings, in MB of 2^20 bytes (as thx's RSS numbers): THX_MEMORY_FLOOR_MB
// (what every checked allocation leaves available; default the larger of 512 MB and 3% of the
// total; 0 turns the check off) and THX_MEMORY_LIMIT_MB (at most this much resident memory for
// this process; default none). An empty string where both are whole numbers (or unset, or
// empty), else one line naming the variable.
std::string host_memory_env_error();
// The floor the check keeps available (THX_MEMORY_FLOOR_MB's, or its default), in bytes; 0
// where the check is off. Processes that the check guards fill at most the total less it.
double host_memory_floor();

// Processes Linux's out-of-memory killer has ended since boot: /proc/vmstat's oom_kill (Linux
// 4.13 and later; it counts the kills a cgroup's limit caused too), or -1 where it does not say.
int64_t oom_kills();
int64_t oom_kills_from(const std::string& vmstat);  // the same from a /proc/vmstat text

// Whether the kernel's log names `pid` as a process its out-of-memory killer ended ("Killed
// process <pid> ("), where this process may read that log (root, or CAP_SYSLOG under
// kernel.dmesg_restrict) and it still holds the line; false otherwise, so only a yes counts.
// The count above says "most likely"; this says "did".
bool oom_killed(int64_t pid);
bool oom_killed_in(const std::string& kernel_log, int64_t pid);  // the same in a log's text

// What to change once the out-of-memory killer has ended `whom` ("a run", "each rank"): "give
// <whom> more room (<how>) and leave thx's memory check on (...), which stops ... with one line".
// One wording for the sweep's, the resumed run's and data parallel's lines.
std::string oom_killer_advice(const std::string& whom, const std::string& how);

// How a failed child ended, for its parent's log (a wait status): "exit code 1", "SIGKILL", ...;
// and, where the out-of-memory killer ended processes while it ran (oom_kills_during > 0), that
// it did and what gives a run more room, since neither the SIGKILL nor its last line says so
// (`pid`: the child's, which the kernel's log may name; 0: not looked up).
std::string child_end(int wait_status, int64_t oom_kills_during, int64_t pid = 0);

// Installs the check on c10's CPU allocator for the rest of the process (thx's main, after
// host_memory_env_error()). A floor of 0 with no limit installs nothing.
void guard_host_memory();

// The same for a scope, with its own floor and limit (bytes; limit 0: none): the tests'.
class HostMemoryGuard {
 public:
  HostMemoryGuard(double floor_bytes, double limit_bytes);
  ~HostMemoryGuard();
  HostMemoryGuard(const HostMemoryGuard&) = delete;
  HostMemoryGuard& operator=(const HostMemoryGuard&) = delete;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace thx
