// cgroup.cpp: this process's cgroup folders (cgroup.h).
#include "common/cgroup.h"

#include <sstream>

namespace thx {
namespace {

// "/a/b" -> "/a/b/", "/a/", "/" (the cgroup, then its ancestors up to the root).
std::vector<std::string> with_ancestors(std::string path) {
  std::vector<std::string> out;
  while (!path.empty() && path.back() == '/') path.pop_back();
  for (;;) {
    out.push_back(path + "/");
    const size_t slash = path.rfind('/');
    if (path.empty() || slash == std::string::npos) break;
    path.erase(slash);
  }
  return out;
}

}  // namespace

std::vector<CgroupDir> cgroup_dirs(const std::string& self_cgroup, const std::string& controller,
                                   const std::string& root) {
  std::string v2 = "/", v1 = "/";  // a container that lists nothing: the mount's root is its own
  std::istringstream in(self_cgroup);
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
    if (line.compare(0, a, "0") == 0 && controllers == ",,") v2 = line.substr(b + 1);
    else if (controllers.find("," + controller + ",") != std::string::npos) v1 = line.substr(b + 1);
  }
  std::vector<CgroupDir> dirs;
  for (const std::string& dir : with_ancestors(v2)) dirs.push_back({root + dir, 2});
  for (const std::string& dir : with_ancestors(v1)) dirs.push_back({root + "/" + controller + dir, 1});
  return dirs;
}

}  // namespace thx
