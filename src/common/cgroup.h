// cgroup.h: where this process's Linux control groups keep their limits (a container's --memory
// and --cpus, a systemd slice's MemoryMax and CPUQuota).
//
// /proc/self/cgroup names the cgroup: "0::/path" in v2's one hierarchy, "N:cpu,cpuacct:/path"
// in each of v1's (one line per hierarchy, its controllers comma-separated). A limit set on any
// cgroup from the process's own up to the hierarchy's root binds it, so the readers
// (host_memory.cpp's memory, runtime.cpp's CPU quota) look in each of those folders and take the
// tightest. A container with its own cgroup namespace sees its cgroup as the root ("0::/"); one
// without sees the host's path, which its own mount lacks, so those folders are absent and only
// the mount's root (its own cgroup) is read.
#pragma once
#include <string>
#include <vector>

namespace thx {

struct CgroupDir {
  std::string path;  // a folder, with a trailing '/'
  int version = 2;   // 2, or 1: v1's controller's hierarchy
};

// The folders of the cgroup that `self_cgroup` (a /proc/self/cgroup text) names, and of each of
// its ancestors, under `root` (the mount point, /sys/fs/cgroup): v2's (root/path/) first, then
// v1's hierarchy holding `controller` ("memory", "cpu"; root/controller/path/); within each, the
// process's own first and the root last. Whether they exist is the reader's to find out.
std::vector<CgroupDir> cgroup_dirs(const std::string& self_cgroup, const std::string& controller,
                                   const std::string& root = "/sys/fs/cgroup");

}  // namespace thx
