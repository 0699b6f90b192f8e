// host_memory.cpp: the check on c10's CPU allocations (host_memory.h).
#include "common/host_memory.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <sys/klog.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

#include "common/cgroup.h"
#include "common/fs.h"
#include "common/runtime.h"
#include "common/torch_compat.h"

namespace thx {
namespace {

constexpr double kMB = 1024.0 * 1024.0;       // the MB of thx's memory lines (rss_mb's, /proc's kB / 1024)
constexpr size_t kChecked = size_t(1) << 20;  // allocations this large are checked, smaller ones counted
constexpr int64_t kReadEveryNs = 100'000'000;  // /proc/meminfo read at most every 100 ms, unless...

double number(const std::string& text) {  // a file holding one whole number; -1 where it does not
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  return end != text.c_str() ? v : -1;
}

// "key value" lines (a cgroup's memory.stat): value of key, 0 where absent.
double stat_value(const std::string& stat, const std::string& key) {
  std::istringstream in(stat);
  std::string k;
  double v = 0;
  while (in >> k >> v)
    if (k == key) return v;
  return 0;
}

// A memory cgroup's files: v2's memory.max, memory.current, memory.stat and memory.high, or v1's
// memory controller's memory.limit_in_bytes, memory.usage_in_bytes, memory.stat; and
// memory.stat's key of the inactive page cache. v2's memory.high (systemd's MemoryHigh=,
// Kubernetes' memory QoS) is no hard limit, but above it the kernel throttles the cgroup and
// reclaims from it hard: a run past it crawls, so where it is lower it counts as the limit.
struct Cgroup {
  std::string limit, usage, stat, inactive, high;
};
// Those of the cgroups this process is under (cgroup.h: its own and each ancestor) that exist.
std::vector<Cgroup> cgroups(const std::string& self_cgroup, const std::string& root) {
  std::vector<Cgroup> found;
  for (const CgroupDir& d : cgroup_dirs(self_cgroup, "memory", root)) {
    const Cgroup g = d.version == 2
                         ? Cgroup{d.path + "memory.max", d.path + "memory.current", d.path + "memory.stat",
                                  "inactive_file", d.path + "memory.high"}
                         : Cgroup{d.path + "memory.limit_in_bytes", d.path + "memory.usage_in_bytes",
                                  d.path + "memory.stat", "total_inactive_file", ""};
    if (std::ifstream(g.limit)) found.push_back(g);
  }
  return found;
}

HostMemory host_memory_of(const std::string& meminfo, const std::vector<Cgroup>& groups) {
  const double total = meminfo_bytes(meminfo, "MemTotal:");
  std::vector<CgroupText> texts;
  for (const Cgroup& g : groups) {  // usage and statistics read only where a limit is set
    std::string limit = read_file_if_any(g.limit);
    if (!g.high.empty()) {
      std::string high = read_file_if_any(g.high);
      const double h = cgroup_limit_bytes(high, total), l = cgroup_limit_bytes(limit, total);
      if (h > 0 && (l <= 0 || h < l)) limit = std::move(high);
    }
    if (cgroup_limit_bytes(limit, total) > 0)
      texts.push_back({std::move(limit), read_file_if_any(g.usage), read_file_if_any(g.stat), g.inactive});
  }
  return host_memory_from(meminfo, texts);
}

double resident_bytes() { return rss_mb() * kMB; }  // runtime.h's, from /proc/self/status

}  // namespace

// (Named, not anonymous: HostMemoryGuard::State, a class with linkage, holds a Guard and a
// CheckedAllocator, and GCC warns of a member whose type has none, -Wsubobject-linkage.)
namespace host_memory_detail {

// The checked allocator's state: what it may hand out before it reads the kernel's numbers again.
struct Guard {
  double floor = 0, limit = 0;  // bytes (limit 0: none)
  std::atomic<int64_t> budget{0};
  std::atomic<int64_t> next_read{0};  // steady clock, ns
  std::mutex reading;

  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // The kernel's numbers: what this process may still take (bytes) and whether the limit, not
  // the floor, sets it.
  struct Reading {
    HostMemory memory;
    double resident = 0, left = 1e300;
    bool capped = false;
  };
  Reading read() const {
    Reading r;
    if (floor > 0) r.memory = host_memory();
    if (r.memory.total > 0) r.left = r.memory.available - floor;
    r.resident = limit > 0 ? resident_bytes() : 0;
    r.capped = limit > 0 && limit - r.resident < r.left;
    if (r.capped) r.left = limit - r.resident;
    return r;
  }

  // Called with each new block (made, not yet written: the kernel's numbers do not count it).
  void check(size_t n) {
    const int64_t bytes = int64_t(n);
    const int64_t left_before = budget.fetch_sub(bytes, std::memory_order_relaxed) - bytes;
    if (n < kChecked) return;
    const int64_t now = now_ns();
    if (left_before >= 0 && now < next_read.load(std::memory_order_relaxed)) return;
    std::lock_guard<std::mutex> lock(reading);
    Reading r = read();
    // thx's heap keeps what it frees (runtime.h, keep_freed_memory), which the kernel counts as
    // held: give it back and read again before refusing.
    if (double(n) > r.left) trim_heap(), r = read();
    if (double(n) > r.left) {
      budget.store(0), next_read.store(0);  // the next large one reads again
      if (r.capped)
        TORCH_CHECK_WITH(OutOfMemoryError, false, fmt::format("host memory: {:.0f} MB more would take this process "
                         "past THX_MEMORY_LIMIT_MB={:.0f}: it holds {:.0f} MB", double(n) / kMB, limit / kMB,
                         r.resident / kMB));
      TORCH_CHECK_WITH(OutOfMemoryError, false, fmt::format("host memory: {:.0f} MB more, with {:.0f} MB of {} {:.0f} "
                       "MB available, would leave less than the {:.0f} MB that thx keeps free so that Linux's "
                       "out-of-memory killer does not end the run (THX_MEMORY_FLOOR_MB); this process holds {:.0f} MB",
                       double(n) / kMB, r.memory.available / kMB, r.memory.owner, r.memory.total / kMB, floor / kMB,
                       resident_bytes() / kMB));
    }
    budget.store(int64_t(std::min(r.left - double(n), 4e18)));
    next_read.store(now + kReadEveryNs);
  }
};

struct Checker {
  Guard* guard;
  void operator()(void*, size_t n) const { guard->check(n); }
};
using CheckedAllocator = compat::WrappingAllocator<Checker>;

}  // namespace host_memory_detail
using host_memory_detail::Checker;
using host_memory_detail::CheckedAllocator;
using host_memory_detail::Guard;

namespace {

// The environment's MB as bytes: `fallback` where unset; -1 where not a whole number.
double env_mb(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;  // (set empty: as if unset)
  const std::string s = v;
  if (s.size() > 12 || s.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stod(s) * kMB;
}

double default_floor() {
  const double total = host_memory().total;
  return std::max(512 * kMB, 0.03 * total);
}

}  // namespace

double meminfo_bytes(const std::string& meminfo, const std::string& field) {  // "MemAvailable:   23807784 kB"
  size_t at = meminfo.rfind(field, 0) == 0 ? 0 : meminfo.find("\n" + field);
  if (at == std::string::npos) return 0;
  if (meminfo[at] == '\n') ++at;
  return std::max(0.0, number(meminfo.substr(at + field.size(), 32)) * 1024.0);
}

double cgroup_limit_bytes(const std::string& limit_file, double machine_total) {
  const double v = number(limit_file);
  return v > 0 && (machine_total <= 0 || v < machine_total) ? v : 0;
}

HostMemory host_memory_from(const std::string& meminfo, const std::vector<CgroupText>& groups) {
  HostMemory m{meminfo_bytes(meminfo, "MemAvailable:"), meminfo_bytes(meminfo, "MemTotal:"), "this machine's"};
  const double machine_total = m.total;
  for (const CgroupText& g : groups) {
    const double limit = cgroup_limit_bytes(g.limit, machine_total);
    if (limit <= 0) continue;  // none, or none below the machine's memory
    // The cgroup reclaims its inactive page cache before its own out-of-memory killer runs. Its
    // usage counts its children's (and an ancestor's, its siblings'), so each limit may bind.
    const double usage = std::max(0.0, number(g.usage));
    const double available = std::max(0.0, limit - usage + stat_value(g.stat, g.inactive_key));
    m.available = m.total > 0 ? std::min(m.available, available) : available;
    if (m.total <= 0 || limit < m.total) m.total = limit, m.owner = "this cgroup's";
  }
  return m;
}

HostMemory host_memory() {
  static const std::vector<Cgroup> groups = cgroups(read_file_if_any("/proc/self/cgroup"), "/sys/fs/cgroup");
  return host_memory_of(read_file_if_any("/proc/meminfo"), groups);
}

HostMemory host_memory_under(const std::string& meminfo, const std::string& self_cgroup, const std::string& root) {
  return host_memory_of(meminfo, cgroups(self_cgroup, root));
}

int64_t oom_kills_from(const std::string& vmstat) {  // "oom_kill 3" among "key value" lines
  std::istringstream in(vmstat);
  std::string key, value;
  while (in >> key >> value)
    if (key == "oom_kill")
      return !value.empty() && value.size() <= 18 && value.find_first_not_of("0123456789") == std::string::npos
                 ? std::stoll(value)
                 : -1;
  return -1;
}

std::string oom_killer_advice(const std::string& whom, const std::string& how) {
  return fmt::format("give {} more room ({}) and leave thx's memory check on (THX_MEMORY_FLOOR_MB unset or above 0), "
                     "which stops a run that outgrows the machine with one line", whom, how);
}

int64_t oom_kills() { return oom_kills_from(read_file_if_any("/proc/vmstat")); }

bool oom_killed_in(const std::string& kernel_log, int64_t pid) {
  return pid > 0 && kernel_log.find(fmt::format("Killed process {} (", pid)) != std::string::npos;
}

bool oom_killed(int64_t pid) {
  const int size = ::klogctl(10, nullptr, 0);  // SYSLOG_ACTION_SIZE_BUFFER
  if (size <= 0 || pid <= 0) return false;
  std::string log(size_t(size), '\0');
  const int n = ::klogctl(3, log.data(), size);  // SYSLOG_ACTION_READ_ALL: refused without CAP_SYSLOG
  return n > 0 && oom_killed_in(log.substr(0, size_t(n)), pid);
}

std::string child_end(int wait_status, int64_t oom_kills_during, int64_t pid) {
  const std::string how = WIFEXITED(wait_status)     ? fmt::format("exit code {}", WEXITSTATUS(wait_status))
                          : WIFSIGNALED(wait_status) ? signal_name(WTERMSIG(wait_status))
                                                     : fmt::format("wait status {}", wait_status);
  if (oom_kills_during <= 0) return how;
  const bool killed = WIFSIGNALED(wait_status) && WTERMSIG(wait_status) == SIGKILL;
  const std::string whom = killed && oom_killed(pid) ? fmt::format("this run (the kernel's log names its pid {})", pid)
                           : killed                  ? "most likely this run"
                                                     : "perhaps one of its processes (a rank, under torchrun)";
  return fmt::format("{}; Linux's out-of-memory killer ended {} process{} while it ran (/proc/vmstat oom_kill), "
                     "{}: {}", how, oom_kills_during, oom_kills_during == 1 ? "" : "es", whom,
                     oom_killer_advice("a run", "fewer at a time with --jobs, smaller micro-batches with "
                                                "train.grad_accum"));
}

std::string host_memory_env_error() {
  for (const char* name : {"THX_MEMORY_FLOOR_MB", "THX_MEMORY_LIMIT_MB"})
    if (env_mb(name, 0) < 0)
      return fmt::format("{}={}: not a whole number of MB of at most 12 digits (0 turns {})", name, std::getenv(name),
                         std::string(name) == "THX_MEMORY_FLOOR_MB" ? "the check off" : "the limit off");
  return "";
}

double host_memory_floor() {
  const double floor = env_mb("THX_MEMORY_FLOOR_MB", -2);
  return floor == -2 ? default_floor() : std::max(0.0, floor);
}

void guard_host_memory() {
  const double floor = env_mb("THX_MEMORY_FLOOR_MB", -2), limit = env_mb("THX_MEMORY_LIMIT_MB", 0);
  if (floor == 0 && limit <= 0) return;
  static Guard guard;
  guard.floor = floor == -2 ? default_floor() : std::max(0.0, floor), guard.limit = std::max(0.0, limit);
  static auto* checked = new CheckedAllocator(c10::GetCPUAllocator(), Checker{&guard});  // (kept to the end)
  c10::SetCPUAllocator(checked, 0);
}

struct HostMemoryGuard::State {
  Guard guard;
  std::unique_ptr<CheckedAllocator> checked;
  c10::Allocator* previous = nullptr;
};

HostMemoryGuard::HostMemoryGuard(double floor_bytes, double limit_bytes) : state_(std::make_unique<State>()) {
  state_->guard.floor = floor_bytes, state_->guard.limit = limit_bytes;
  state_->previous = c10::GetCPUAllocator();
  state_->checked = std::make_unique<CheckedAllocator>(state_->previous, Checker{&state_->guard});
  c10::SetCPUAllocator(state_->checked.get(), 0);
}

// (Blocks it made free through their own deleter, the allocator's below it: they may outlive it.)
HostMemoryGuard::~HostMemoryGuard() { c10::SetCPUAllocator(state_->previous, 0); }

}  // namespace thx
