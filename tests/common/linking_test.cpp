// The C++ library's functions this binary calls bind to libstdc++ itself. A PyTorch 2 wheel's
// libtorch exports a statically linked copy of std::filesystem (pytorch/pytorch#133437); where
// the dynamic linker found that copy first, its remove_all called through a null pointer (the
// CUDA test suites' crashes on the GPU machine). CMakeLists.txt lists libstdc++ first among the
// needed libraries, and thx removes trees with common/fs.h's remove_tree, outside the C++
// library. This checks the binding the way the program sees it, with no binutils (the GPU
// machines have none): the address this binary holds for each function, and the library that
// address is in (dladdr); on failure it names the needed libraries in their order.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/fs.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

// The main program's DT_NEEDED entries, in order (the dynamic linker searches them in this
// order after the program itself).
std::vector<std::string> needed_libraries() {
  std::vector<std::string> out;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto& names = *static_cast<std::vector<std::string>*>(data);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          if (info->dlpi_phdr[i].p_type != PT_DYNAMIC) continue;
          const auto* dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
          const char* strtab = nullptr;  // glibc has relocated d_ptr to an address
          for (const auto* d = dyn; d->d_tag != DT_NULL; ++d)
            if (d->d_tag == DT_STRTAB) strtab = reinterpret_cast<const char*>(d->d_un.d_ptr);
          for (const auto* d = dyn; strtab && d->d_tag != DT_NULL; ++d)
            if (d->d_tag == DT_NEEDED) names.emplace_back(strtab + d->d_un.d_val);
        }
        return 1;  // the first object is the main program: stop there
      },
      &out);
  return out;
}

std::string library_of(const void* f) {
  Dl_info info{};
  return dladdr(f, &info) && info.dli_fname ? info.dli_fname : "(no library)";
}

TEST(Linking, TheCppLibrarysFunctionsBindToLibstdcxx) {
  namespace fs = std::filesystem;
  const std::vector<std::string> needed = needed_libraries();
  ASSERT_FALSE(needed.empty()) << "no DT_NEEDED read from the main program";
  std::string order;
  for (const auto& n : needed) order += " " + n;
  // The functions of std::filesystem thx calls, and remove_all, which crashed; each address as
  // this binary holds it (through its GOT: the definition the dynamic linker chose).
  const std::vector<std::pair<const char*, const void*>> functions = {
      {"create_directories", reinterpret_cast<const void*>(
                                 static_cast<bool (*)(const fs::path&)>(&fs::create_directories))},
      {"status", reinterpret_cast<const void*>(static_cast<fs::file_status (*)(const fs::path&)>(&fs::status))},
      {"rename", reinterpret_cast<const void*>(static_cast<void (*)(const fs::path&, const fs::path&)>(&fs::rename))},
      {"remove_all", reinterpret_cast<const void*>(static_cast<std::uintmax_t (*)(const fs::path&)>(&fs::remove_all))},
  };
  for (const auto& [name, f] : functions)
    EXPECT_NE(library_of(f).find("libstdc++"), std::string::npos)
        << "std::filesystem::" << name << " binds to " << library_of(f) << "; the needed libraries, in order:" << order;
  EXPECT_NE(needed.front().find("libstdc++"), std::string::npos) << "needed libraries, in order:" << order;
}

TEST(Linking, RemoveTreeRemovesEverythingButFollowsNoLink) {
  TempDir dir;
  const std::filesystem::path root = dir.path / "tree", outside = dir.path / "outside";
  std::filesystem::create_directories(root / "a" / "b");
  std::filesystem::create_directories(outside);
  std::ofstream(root / "a" / "b" / "f") << "x";
  std::ofstream(root / "g") << "y";
  std::ofstream(outside / "keep") << "z";
  std::filesystem::create_directory_symlink(outside, root / "a" / "link");
  std::string error;
  EXPECT_TRUE(remove_tree(root.string(), &error)) << error;
  EXPECT_FALSE(std::filesystem::exists(root));
  EXPECT_TRUE(std::filesystem::exists(outside / "keep")) << "remove_tree followed a symbolic link";
  EXPECT_TRUE(remove_tree(root.string(), &error)) << "a missing path is no error: " << error;
  std::ofstream(dir.path / "file") << "w";  // a plain file is removed too
  EXPECT_TRUE(remove_tree((dir.path / "file").string()));
  EXPECT_FALSE(std::filesystem::exists(dir.path / "file"));
}

TEST(Linking, RemoveTreeNamesWhatItCouldNotRemove) {
  TempDir dir;
  const std::string bad = (dir.path / std::string(300, 'x')).string();  // past NAME_MAX: ENAMETOOLONG
  std::string error;
  EXPECT_FALSE(remove_tree(bad, &error));
  EXPECT_NE(error.find(std::string(300, 'x') + ": File name too long"), std::string::npos) << error;
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
