// The test files compile in unity batches (CMakeLists.txt, thx_test_executable): eight files
// are one translation unit, so two files' helpers with one name would collide even in
// anonymous namespaces. Each file keeps its own names in `namespace { namespace THX_FILE_ID {`,
// THX_FILE_ID unique per file; this test holds every test file to that.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

// The files under tests/ whose anonymous namespaces lack THX_FILE_ID, as "path:line".
std::vector<std::string> unguarded_anonymous_namespaces(const std::filesystem::path& root) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    if (!e.is_regular_file() || e.path().extension() != ".cpp") continue;
    if (e.path().parent_path().filename() == "fuzz") continue;  // one file per binary, no batches
    std::ifstream in(e.path());
    std::string line, previous;
    for (int no = 1; std::getline(in, line); ++no) {
      if (previous == "namespace {" && line != "namespace THX_FILE_ID {")
        out.push_back(e.path().lexically_relative(root).string() + ":" + std::to_string(no - 1));
      previous = line;
    }
  }
  return out;
}

// Also defined in files_test.cpp, which compiles in the same unity batch as this file.
const char* file_tag() { return "unity_names_test"; }

TEST(UnityBuild, EveryTestFileKeepsItsNamesInItsOwnNamespace) {
  EXPECT_STREQ(file_tag(), "unity_names_test");
  const std::filesystem::path root = std::filesystem::path(THX_SOURCE_DIR) / "tests";
  EXPECT_EQ(unguarded_anonymous_namespaces(root), std::vector<std::string>{});
  // The check itself: a file with a bare anonymous namespace is named.
  const TempDir tmp;  // its own directory: runs of this test never meet
  const std::filesystem::path dir = tmp.path;
  std::filesystem::create_directories(dir / "x");
  std::ofstream(dir / "x" / "a_test.cpp") << "namespace thx {\nnamespace {\nint inputs() { return 1; }\n}\n}\n";
  std::ofstream(dir / "x" / "b_test.cpp") << "namespace {\nnamespace THX_FILE_ID {\nint inputs();\n}\n}\n";
  EXPECT_EQ(unguarded_anonymous_namespaces(dir), std::vector<std::string>{"x/a_test.cpp:2"});
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
