// Every C++-library symbol this binary imports resolves to libstdc++ itself. A PyTorch 2 wheel's
// libtorch.so exports a copy of std::filesystem; found first, its remove_all called through a
// null pointer (the CUDA test suites' crashes on the GPU machine). CMakeLists.txt puts libstdc++
// first among the needed libraries; this checks the result the way the dynamic linker binds:
// dlvsym over the global scope, for each versioned import that `nm -D` lists.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace thx::test {
namespace {
namespace THX_FILE_ID {

TEST(Linking, TheCppLibrarysImportsResolveToLibstdcxx) {
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();  // this process's binary
  ASSERT_FALSE(ec) << ec.message();
  const std::string cmd = "nm -D --undefined-only '" + self + "' 2>/dev/null";
  const std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  ASSERT_TRUE(p);
  std::vector<std::pair<std::string, std::string>> imports;  // name, version
  char line[4096];
  while (std::fgets(line, sizeof line, p.get())) {
    std::string s(line);
    const size_t at = s.find("@GLIBCXX_"), start = s.find_last_of(' ', at);
    if (at == std::string::npos || start == std::string::npos) continue;
    imports.emplace_back(s.substr(start + 1, at - start - 1), s.substr(at + 1, s.find_first_of("@\n", at + 1) - at - 1));
  }
  if (imports.empty()) GTEST_SKIP() << "nm lists no GLIBCXX imports (binutils missing?)";
  int filesystem = 0;
  for (const auto& [name, version] : imports) {
    void* f = dlvsym(RTLD_DEFAULT, name.c_str(), version.c_str());
    if (!f) continue;  // a weak import nothing defines
    Dl_info info{};
    ASSERT_NE(dladdr(f, &info), 0) << name;
    EXPECT_NE(std::string(info.dli_fname).find("libstdc++"), std::string::npos)
        << name << "@" << version << " resolves to " << info.dli_fname;
    filesystem += name.find("filesystem") != std::string::npos;
  }
  EXPECT_GT(filesystem, 0) << "the test binary imports no std::filesystem: the check covers nothing it should";
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
