// common/host_memory.h: the kernel's numbers as host_memory() reads them, and the check on c10's
// CPU allocations: a block that would leave less than the floor available, or take the process
// past its limit, is c10::OutOfMemoryError before anything is written to it; smaller blocks and
// what fits pass; freed memory counts again; a refusal in backward keeps its type. And the
// out-of-memory killer's count that names it in a sweep's report of a child's end and in a
// data-parallel group's line for a rank that stopped. And runtime.h's heap that keeps what is freed.
#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "common/cgroup.h"
#include "common/host_memory.h"
#include "common/runtime.h"
#include "distributed/dist.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

constexpr double kMiB = 1024.0 * 1024.0;

double resident() { return rss_mb() * kMiB; }  // runtime.h

// The message of the c10::OutOfMemoryError that `alloc` throws, or "" if it throws none.
template <class F>
std::string refusal(F&& alloc) {
  try {
    alloc();
  } catch (const c10::OutOfMemoryError& e) {
    return e.what_without_backtrace();
  }
  return "";
}

TEST(HostMemory, ParsesMeminfoAndCgroupLimits) {
  const std::string info = "MemTotal:       24731708 kB\nMemFree:        22000000 kB\nMemAvailable:   23807784 kB\n";
  EXPECT_EQ(meminfo_bytes(info, "MemTotal:"), 24731708.0 * 1024);
  EXPECT_EQ(meminfo_bytes(info, "MemAvailable:"), 23807784.0 * 1024);
  EXPECT_EQ(meminfo_bytes(info, "MemFree:"), 22000000.0 * 1024);
  EXPECT_EQ(meminfo_bytes(info, "Available:"), 0);  // a whole field's name only
  EXPECT_EQ(meminfo_bytes("", "MemTotal:"), 0);
  const double total = 24e9;
  EXPECT_EQ(cgroup_limit_bytes("1073741824\n", total), 1073741824.0);
  EXPECT_EQ(cgroup_limit_bytes("max\n", total), 0);                   // v2: no limit
  EXPECT_EQ(cgroup_limit_bytes("9223372036854771712\n", total), 0);  // v1: no limit
  EXPECT_EQ(cgroup_limit_bytes("", total), 0);
}

// The cgroup arithmetic, v2's and v1's files: available = limit - usage + inactive page cache,
// bounded by MemAvailable and by each other limit; the total is the lowest limit. (Minus the cache, or the usage
// ignored, gives other numbers than these.)
TEST(HostMemory, ACgroupsLimitBindsAsLinuxCountsIt) {
  const double GiB = 1024.0 * kMiB;
  const std::string info = "MemTotal:       25165824 kB\nMemAvailable:   20971520 kB\n";  // 24 GiB, 20 available
  const HostMemory machine = host_memory_from(info, {});
  EXPECT_EQ(machine.total, 24 * GiB);
  EXPECT_EQ(machine.available, 20 * GiB);
  EXPECT_EQ(machine.owner, "this machine's");
  const CgroupText v2{"8589934592\n", "6442450944\n", "anon 5368709120\ninactive_file 1073741824\n",
                      "inactive_file"};  // 8 GiB limit, 6 used, 1 of it inactive cache
  HostMemory m = host_memory_from(info, {v2});
  EXPECT_EQ(m.total, 8 * GiB);
  EXPECT_EQ(m.available, 3 * GiB);
  EXPECT_EQ(m.owner, "this cgroup's");
  const CgroupText v1{"8589934592\n", "1073741824\n", "cache 0\ntotal_inactive_file 0\n", "total_inactive_file"};
  m = host_memory_from("MemTotal:       25165824 kB\nMemAvailable:    2097152 kB\n", {v1});  // 2 GiB available
  EXPECT_EQ(m.total, 8 * GiB);
  EXPECT_EQ(m.available, 2 * GiB);  // the machine's MemAvailable binds below the cgroup's 7 GiB
  const CgroupText none{"max\n", "6442450944\n", "", "inactive_file"};
  const CgroupText v1_none{"9223372036854771712\n", "6442450944\n", "", "total_inactive_file"};
  m = host_memory_from(info, {none, v1_none});
  EXPECT_EQ(m.total, 24 * GiB);
  EXPECT_EQ(m.available, 20 * GiB);
  m = host_memory_from(info, {v2, {"4294967296\n", "0\n", "", "inactive_file"}});  // a lower limit above
  EXPECT_EQ(m.total, 4 * GiB);
  EXPECT_EQ(m.available, 3 * GiB);
  // A looser limit above whose usage (its other children's) leaves less: it binds the available.
  m = host_memory_from(info, {{"4294967296\n", "1073741824\n", "", "inactive_file"},
                              {"6442450944\n", "5905580032\n", "", "inactive_file"}});  // 4 GiB, 1 used; 6, 5.5
  EXPECT_EQ(m.total, 4 * GiB);
  EXPECT_EQ(m.available, 0.5 * GiB);
}

// A container's CPU quota (docker --cpus) in whole cores, from cgroup v2's cpu.max or v1's
// two files; none where unlimited. available_cores() never counts more than the affinity's.
TEST(Cores, ACgroupsCpuQuotaIsItsWholeCores) {
  EXPECT_EQ(cgroup_quota_cores("max 100000\n", "", ""), 0);
  EXPECT_EQ(cgroup_quota_cores("200000 100000\n", "", ""), 2);
  EXPECT_EQ(cgroup_quota_cores("150000 100000\n", "", ""), 1);  // 1.5 cores: a second thread is throttled
  EXPECT_EQ(cgroup_quota_cores("50000 100000\n", "", ""), 1);
  EXPECT_EQ(cgroup_quota_cores("", "-1\n", "100000\n"), 0);
  EXPECT_EQ(cgroup_quota_cores("", "400000\n", "100000\n"), 4);
  EXPECT_EQ(cgroup_quota_cores("", "", ""), 0);
  EXPECT_EQ(cgroup_quota_cores("garbage", "", ""), 0);
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_GE(available_cores(), 1);
  EXPECT_LE(available_cores(), CPU_COUNT(&set));
}

// /proc/self/cgroup's lines as the kernel writes them: v2's "0::", v1's hierarchies with their
// controllers comma-separated (systemd mounts cpu and cpuacct together), a hybrid host with
// both, a container that sees its cgroup as the root. Each yields its folder, then each ancestor.
TEST(Cgroup, TheFoldersAreTheProcesssOwnThenEachAncestor) {
  const auto paths = [](const std::string& self, const std::string& controller) {
    std::string out;
    for (const CgroupDir& d : cgroup_dirs(self, controller, "/c")) out += std::to_string(d.version) + d.path + " ";
    return out;
  };
  EXPECT_EQ(paths("0::/user.slice/user-0.slice\n", "memory"),
            "2/c/user.slice/user-0.slice/ 2/c/user.slice/ 2/c/ 1/c/memory/ ");
  const std::string v1 = "12:memory:/docker/ab\n4:cpu,cpuacct:/user.slice\n1:name=systemd:/init.scope\n";
  EXPECT_EQ(paths(v1, "memory"), "2/c/ 1/c/memory/docker/ab/ 1/c/memory/docker/ 1/c/memory/ ");
  EXPECT_EQ(paths(v1, "cpu"), "2/c/ 1/c/cpu/user.slice/ 1/c/cpu/ ");
  EXPECT_EQ(paths("3:cpuacct:/a\n", "cpu"), "2/c/ 1/c/cpu/ ");  // cpuacct is not cpu
  EXPECT_EQ(paths(v1 + "0::/session.scope\n", "cpu"), "2/c/session.scope/ 2/c/ 1/c/cpu/user.slice/ 1/c/cpu/ ");
  EXPECT_EQ(paths("0::/\n", "cpu"), "2/c/ 1/c/cpu/ ");
  EXPECT_EQ(paths("", "memory"), "2/c/ 1/c/memory/ ");
}

// The readers on cgroup trees made in a temporary folder: a limit on an ancestor (a systemd
// slice's, a pod's) binds as the process's own does, the tightest wins, and a path the mount
// lacks (a container without its own cgroup namespace) leaves the mount's root, its own cgroup.
TEST(Cgroup, ALimitOnAnAncestorBindsAndTheTightestWins) {
  const double GiB = 1024.0 * kMiB;
  TempDir root;
  const auto put = [&](const std::string& name, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(root.file(name)).parent_path());
    root.write(name, text);
  };
  const std::string info = "MemTotal:       25165824 kB\nMemAvailable:   20971520 kB\n";  // 24 GiB, 20 available
  // v1: the process in /pod/run, the pod limited to 4 GiB with 3 in use (0.5 of it inactive cache).
  put("memory/memory.limit_in_bytes", "9223372036854771712\n");
  put("memory/pod/memory.limit_in_bytes", "4294967296\n");
  put("memory/pod/memory.usage_in_bytes", "3221225472\n");
  put("memory/pod/memory.stat", "cache 0\ntotal_inactive_file 536870912\n");
  put("memory/pod/run/memory.limit_in_bytes", "9223372036854771712\n");
  put("memory/pod/run/memory.usage_in_bytes", "1073741824\n");
  HostMemory m = host_memory_under(info, "9:memory:/pod/run\n", root.path.string());
  EXPECT_EQ(m.total, 4 * GiB);
  EXPECT_EQ(m.available, 1.5 * GiB);
  EXPECT_EQ(m.owner, "this cgroup's");
  // The process's own limit, 8 GiB with 1 used, is looser than the pod's: the pod's still binds.
  put("memory/pod/run/memory.limit_in_bytes", "8589934592\n");
  m = host_memory_under(info, "9:memory:/pod/run\n", root.path.string());
  EXPECT_EQ(m.total, 4 * GiB);
  EXPECT_EQ(m.available, 1.5 * GiB);
  // A path the mount lacks: the root's limit (here none) is all there is.
  m = host_memory_under(info, "9:memory:/docker/elsewhere\n", root.path.string());
  EXPECT_EQ(m.total, 24 * GiB);
  EXPECT_EQ(m.owner, "this machine's");
  // v2's memory.max on a slice above the process's scope.
  put("a.slice/memory.max", "2147483648\n");
  put("a.slice/memory.current", "1073741824\n");
  put("a.slice/b.scope/memory.max", "max\n");
  m = host_memory_under(info, "0::/a.slice/b.scope\n", root.path.string());
  EXPECT_EQ(m.total, 2 * GiB);
  EXPECT_EQ(m.available, 1 * GiB);
  // v2's memory.high, where lower than memory.max (above it the kernel throttles), is the limit:
  // the scope's 1.5 GiB, with the slice's usage, leaves 0.5; "max" or a higher one changes nothing.
  put("a.slice/b.scope/memory.high", "1610612736\n");
  put("a.slice/b.scope/memory.current", "1073741824\n");
  m = host_memory_under(info, "0::/a.slice/b.scope\n", root.path.string());
  EXPECT_EQ(m.total, 1.5 * GiB);
  EXPECT_EQ(m.available, 0.5 * GiB);
  put("a.slice/memory.high", "max\n");
  put("a.slice/b.scope/memory.high", "3221225472\n");
  m = host_memory_under(info, "0::/a.slice/b.scope\n", root.path.string());
  EXPECT_EQ(m.total, 2 * GiB);
  EXPECT_EQ(m.available, 1 * GiB);
  // CPU: v2's cpu.max on the slice (2 cores) and the scope (unlimited); v1's quota on both
  // (3 cores above, 1 on the process's own).
  put("a.slice/cpu.max", "200000 100000\n");
  put("a.slice/b.scope/cpu.max", "max 100000\n");
  EXPECT_EQ(cgroup_cores("0::/a.slice/b.scope\n", root.path.string()), 2);
  put("cpu/cpu.cfs_quota_us", "-1\n");
  put("cpu/cpu.cfs_period_us", "100000\n");
  put("cpu/pod/cpu.cfs_quota_us", "300000\n");
  put("cpu/pod/cpu.cfs_period_us", "100000\n");
  put("cpu/pod/run/cpu.cfs_quota_us", "100000\n");
  put("cpu/pod/run/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cgroup_cores("4:cpu,cpuacct:/pod/run\n", root.path.string()), 1);
  EXPECT_EQ(cgroup_cores("4:cpu,cpuacct:/pod/other\n", root.path.string()), 3);
  EXPECT_EQ(cgroup_cores("4:cpu,cpuacct:/docker/elsewhere\n", root.path.string()), 0);
}

TEST(HostMemory, ReadsThisMachinesNumbers) {
  const HostMemory m = host_memory();
  ASSERT_GT(m.total, 0);
  EXPECT_GT(m.available, 0);
  EXPECT_LE(m.available, m.total);
  // The total is the machine's memory (sysconf's count of its pages), or a cgroup's lower limit.
  const double machine = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  if (m.owner == "this machine's") EXPECT_NEAR(m.total, machine, 0.01 * machine);
  else EXPECT_LT(m.total, machine) << m.owner;
}

// The floor the check keeps free, which a sweep takes from the memory its runs share: its
// default the larger of 512 MB and 3% of the total, THX_MEMORY_FLOOR_MB's where set, 0 where
// that turns the check off.
TEST(HostMemory, TheFloorIsTheSettingsOrItsDefault) {
  const char* before = std::getenv("THX_MEMORY_FLOOR_MB");
  const std::string saved = before ? before : "";
  unsetenv("THX_MEMORY_FLOOR_MB");
  EXPECT_DOUBLE_EQ(host_memory_floor(), std::max(512.0 * 1048576, 0.03 * host_memory().total));
  setenv("THX_MEMORY_FLOOR_MB", "100", 1);
  EXPECT_DOUBLE_EQ(host_memory_floor(), 100.0 * 1048576);
  setenv("THX_MEMORY_FLOOR_MB", "0", 1);
  EXPECT_DOUBLE_EQ(host_memory_floor(), 0);
  if (before) setenv("THX_MEMORY_FLOOR_MB", saved.c_str(), 1);
  else unsetenv("THX_MEMORY_FLOOR_MB");
}

// The out-of-memory killer's count, and how `thx sweep` reports a child's end with it: wait
// statuses from real children (one exits 3, one is killed).
TEST(HostMemory, NamesTheOutOfMemoryKillerInAChildsEnd) {
  EXPECT_EQ(oom_kills_from("pgfault 12\noom_kill 3\npgmajfault 1\n"), 3);
  EXPECT_EQ(oom_kills_from("pgfault 12\n"), -1);  // a kernel before 4.13
  EXPECT_EQ(oom_kills_from("oom_kill x\n"), -1);
  EXPECT_EQ(oom_kills_from("oom_kill 1234567890123456789012\n"), -1);  // more digits than a count has
  // This machine's count, read between two reads of the file: the count cannot go down.
  const auto vmstat = [] {
    std::ifstream in("/proc/vmstat");
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const int64_t before = oom_kills_from(vmstat()), read = oom_kills(), after = oom_kills_from(vmstat());
  if (before >= 0) {
    EXPECT_GE(read, before);
    EXPECT_LE(read, after);
  } else {
    EXPECT_EQ(read, -1);
  }
  const auto status_of = [](bool kill_it) {
    const pid_t pid = fork();
    if (pid == 0) {
      if (kill_it) raise(SIGKILL);
      _exit(3);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
  };
  const int exited = status_of(false), killed = status_of(true);
  EXPECT_EQ(child_end(exited, 0), "exit code 3");
  EXPECT_EQ(child_end(killed, 0), "SIGKILL");
  const std::string oom = child_end(killed, 1);
  EXPECT_EQ(oom.rfind("SIGKILL; Linux's out-of-memory killer ended 1 process while it ran (/proc/vmstat oom_kill), "
                      "most likely this run: give a run more room (fewer at a time with --jobs, ", 0), 0u) << oom;
  EXPECT_NE(oom.find("THX_MEMORY_FLOOR_MB"), std::string::npos) << oom;
  const std::string advice =
      oom_killer_advice("a run", "fewer at a time with --jobs, smaller micro-batches with train.grad_accum");
  EXPECT_EQ(oom.substr(oom.find(": give a run") + 2), advice);
  EXPECT_EQ(oom_killer_advice("each rank", "train.grad_accum"),
            "give each rank more room (train.grad_accum) and leave thx's memory check on (THX_MEMORY_FLOOR_MB unset "
            "or above 0), which stops a run that outgrows the machine with one line");
  // The kernel's log, where it can be read, names the process it ended: exactly that pid.
  const std::string log = "[44394.088794] Memory cgroup out of memory: Killed process 12708 (thx) total-vm:2902800kB, "
                          "anon-rss:1504112kB\n";
  EXPECT_TRUE(oom_killed_in(log, 12708));
  EXPECT_FALSE(oom_killed_in(log, 1270));
  EXPECT_FALSE(oom_killed_in(log, 127080));
  EXPECT_FALSE(oom_killed_in(log, 0));
  EXPECT_FALSE(oom_killed(int64_t(getpid())));  // (this process is alive)
  EXPECT_NE(child_end(exited, 2).find("exit code 3; Linux's out-of-memory killer ended 2 processes while it ran "
                                      "(/proc/vmstat oom_kill), perhaps one of its processes (a rank, under torchrun)"),
            std::string::npos);
}

// The same count in a data-parallel group's line for a rank that stopped: named where every rank
// is on this machine and it rose, said not to be it where it did not, left open otherwise.
TEST(HostMemory, NamesTheOutOfMemoryKillerForAStoppedRank) {
  const std::string tail = "); with torchrun --max_restarts the group restarts and --resume continues from the last "
                           "checkpoint";
  EXPECT_EQ(dist::stopped_ranks_line({1}, -1, true),
            "rank 1 stopped (no heartbeat for 3 s: killed, out of memory or crashed; its own log says which" + tail);
  EXPECT_EQ(dist::stopped_ranks_line({1, 3}, 2, false),  // two machines: this one's count says nothing of the other
            "ranks 1, 3 stopped (no heartbeat for 3 s: killed, out of memory or crashed; its own log says which" + tail);
  EXPECT_EQ(dist::stopped_ranks_line({1}, 0, true),
            "rank 1 stopped (no heartbeat for 3 s: not ended by this machine's out-of-memory killer (/proc/vmstat "
            "oom_kill unchanged); an error or a crash shows in its own log, a signal or a hang does not" + tail);
  const std::string oom = dist::stopped_ranks_line({2}, 1, true);
  EXPECT_EQ(oom.rfind("rank 2 stopped (no heartbeat for 3 s: Linux's out-of-memory killer has ended 1 process on this "
                      "machine since the group formed (/proc/vmstat oom_kill), most likely it, ", 0), 0u) << oom;
  EXPECT_NE(oom.find("train.grad_accum"), std::string::npos) << oom;
  EXPECT_NE(dist::stopped_ranks_line({2}, 1, true, 4321).find("(/proc/vmstat oom_kill), it among them (the kernel's "
                                                              "log names its pid 4321), which leaves nothing"),
            std::string::npos);
  EXPECT_NE(dist::stopped_ranks_line({2, 3}, 2, true, 4321).find("a rank among them (the kernel's log names pid 4321)"),
            std::string::npos);
}

// runtime.h's keep_freed_memory: a 3 GiB block comes from the heap, not from mmap, and freed at
// the heap's top it stays there: glibc's trimming is off, not at its largest threshold (2 GiB),
// below what a T5-base step at 48 heads frees each step. The block is never written, so it takes
// address space, not memory. mallopt's settings are the process's, so a child runs it.
TEST(HostMemory, ABlockFreedAtTheHeapsTopStaysInTheHeap) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    keep_freed_memory();
    constexpr size_t kSize = size_t(3) << 30;
    char* const before = static_cast<char*>(sbrk(0));
    void* block = std::malloc(kSize);
    if (!block) _exit(3);  // the address space refused
    char* const grown = static_cast<char*>(sbrk(0));
    // From the heap: the break moved, and the block ends below it (glibc maps a block far above).
    if (grown <= before || static_cast<char*>(block) + kSize > grown) _exit(4);
    std::free(block);
    _exit(static_cast<char*>(sbrk(0)) == grown ? 0 : 5);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child ended by signal " << WTERMSIG(status);
  if (WEXITSTATUS(status) == 3) GTEST_SKIP() << "malloc refused 3 GiB of address space (vm.overcommit_memory?)";
  EXPECT_NE(WEXITSTATUS(status), 4) << "the block did not come from the heap (glibc mapped it)";
  EXPECT_NE(WEXITSTATUS(status), 5) << "glibc trimmed the heap's top when the block was freed";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// runtime.h's kept_heap_environment: a process started behind it keeps its heap as
// keep_freed_memory does, which is how bench train runs the PyTorch peer. The child is Python
// (ctypes on glibc's malloc and sbrk), as the peer is; the same 3 GiB block as above, never
// written. Exit 4: glibc mapped the block; 5: it trimmed the heap's top; 3: no address space.
TEST(HostMemory, AProcessStartedBehindTheKeptHeapsTunablesKeepsItsHeap) {
  TempDir dir;
  const std::string script = (dir.path / "heap.py").string();
  std::ofstream(script) << R"(import ctypes
libc = ctypes.CDLL(None)
libc.sbrk.restype, libc.sbrk.argtypes = ctypes.c_void_p, [ctypes.c_long]
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
size = 3 << 30
before = libc.sbrk(0)
block = libc.malloc(size)
if not block: raise SystemExit(3)
grown = libc.sbrk(0)
if grown <= before or block + size > grown: raise SystemExit(4)
libc.free(block)
raise SystemExit(0 if libc.sbrk(0) == grown else 5)
)";
  const auto run = [&](const std::string& users, bool kept) {
    const std::string env = users.empty() ? "env -u GLIBC_TUNABLES " : "env GLIBC_TUNABLES=" + users + " ";
    return run_command(env + "sh -c '" + (kept ? kept_heap_environment() : std::string()) + test_python() + " " +
                       script + "' 2>&1");
  };
  RunResult r = run("", true);
  if (r.code == 3) GTEST_SKIP() << "malloc refused 3 GiB of address space (vm.overcommit_memory?)";
  EXPECT_EQ(r.code, 0) << r.out;
  // glibc's defaults map the block: the settings are what keep it.
  EXPECT_EQ(run("", false).code, 4);
  // The user's own tunables are kept beside them, and come last, so that the user's win.
  EXPECT_EQ(run("glibc.malloc.tcache_count=0", true).code, 0);
  EXPECT_EQ(run("glibc.malloc.trim_threshold=131072", true).code, 5);
}

TEST(HostMemoryGuard, RefusesABlockThatWouldLeaveLessThanTheFloor) {
  const double floor = host_memory().available + 1e12;  // more than is available: every checked block
  {
    HostMemoryGuard guard(floor, 0);
    const std::string why = refusal([] { return torch::empty({1 << 20}); });  // 4 MiB
    EXPECT_NE(why.find("host memory: 4 MB more, with "), std::string::npos) << why;
    EXPECT_NE(why.find("THX_MEMORY_FLOOR_MB"), std::string::npos) << why;
    EXPECT_EQ(why.find('\n'), std::string::npos) << why;
    EXPECT_EQ(refusal([] { return torch::ones({1000}); }), "");  // under 1 MiB: counted, not checked
  }
  EXPECT_EQ(refusal([] { return torch::ones({1 << 20}); }), "");  // the scope's end takes the check away
}

TEST(HostMemoryGuard, LetsThroughWhatFits) {
  HostMemoryGuard guard(64 * kMiB, 0);
  EXPECT_EQ(refusal([] { return torch::ones({16 << 20}); }), "");  // 64 MiB
}

TEST(HostMemoryGuard, CapsThisProcessAtItsLimitAndCountsFreedMemoryAgain) {
  HostMemoryGuard guard(0, resident() + 48 * kMiB);
  EXPECT_EQ(refusal([] { return torch::ones({8 << 20}); }), "");  // 32 MiB, written, then freed
  // The first block left a budget of 16 MiB; the second is checked against the process again,
  // which holds what it held before the first.
  EXPECT_EQ(refusal([] { return torch::ones({8 << 20}); }), "");
  torch::Tensor held = torch::ones({8 << 20});  // 32 MiB held
  const std::string why = refusal([] { return torch::empty({8 << 20}); });
  EXPECT_NE(why.find("host memory: 32 MB more would take this process past THX_MEMORY_LIMIT_MB="), std::string::npos)
      << why;
}

// With that heap (keep_freed_memory), what thx freed stays resident, and the kernel counts it as
// held: the check gives it back (trim_heap) and reads again before it refuses. Here 128 MiB freed
// leaves 32 MiB under the limit; 48 MiB more fits once they are given back. In a child, as above,
// through c10's allocator, not torch's ops, whose OpenMP threads a child of fork must not use.
TEST(HostMemoryGuard, GivesBackTheHeapsFreeMemoryBeforeItRefuses) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    keep_freed_memory();
    {
      const at::DataPtr freed = c10::GetCPUAllocator()->allocate(size_t(128) << 20);
      std::memset(freed.get(), 1, size_t(128) << 20);
    }
    HostMemoryGuard guard(0, resident() + 32 * kMiB);  // it wraps the allocator: fetch it after
    const std::string why = refusal([] { return c10::GetCPUAllocator()->allocate(size_t(48) << 20); });
    if (!why.empty()) std::fprintf(stderr, "%s\n", why.c_str());
    _exit(why.empty() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "refused, though the heap held the memory free (the child's line above)";
}

// The loop catches the error by its type around forward and backward: autograd's engine hands
// back a refusal in backward as the same c10::OutOfMemoryError.
TEST(HostMemoryGuard, ARefusalInBackwardKeepsItsType) {
  const torch::Tensor x = torch::ones({1 << 20}, torch::requires_grad());  // 4 MiB
  const torch::Tensor y = (x * x).sum();
  HostMemoryGuard guard(host_memory().available + 1e12, 0);
  const std::string why = refusal([&] {
    y.backward();  // x * 2 * grad: a new 4 MiB block
    return x;
  });
  EXPECT_NE(why.find("host memory: 4 MB more"), std::string::npos) << why;
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
