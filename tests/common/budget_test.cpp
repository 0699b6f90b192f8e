// The README's complexity budget states what src/ is: its longest file's limit, the functions'
// limit (checked by function_length_test.cpp) and how many lines src/ holds, within a tenth.
// A number that drifts from src/ fails here, naming the number and what src/ now is.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

namespace fs = std::filesystem;

struct SourceFile {
  std::string path;
  int64_t lines = 0;
};

// Every C++ and CUDA file under `dir`, with its count of lines, longest first.
std::vector<SourceFile> source_files(const fs::path& dir) {
  std::vector<SourceFile> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".cpp" && ext != ".h" && ext != ".cu" && ext != ".cuh")) continue;
    std::ifstream in(e.path());
    const auto n = std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n');
    out.push_back({e.path().lexically_relative(dir).string(), n});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.lines > b.lines; });
  return out;
}

// "path (N lines)" of each file over `limit` lines.
std::vector<std::string> over(const std::vector<SourceFile>& files, int64_t limit) {
  std::vector<std::string> out;
  for (const auto& f : files)
    if (f.lines > limit) out.push_back(f.path + " (" + std::to_string(f.lines) + " lines)");
  return out;
}

// The README's number after `before` (digits with thousands commas), or -1 where it says none.
int64_t readme_number(const std::string& before) {
  std::ifstream in(std::string(THX_SOURCE_DIR) + "/README.md");
  std::stringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  std::replace(text.begin(), text.end(), '\n', ' ');
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(before + " ([0-9][0-9,]*)"))) return -1;
  std::string digits = m[1].str();
  digits.erase(std::remove(digits.begin(), digits.end(), ','), digits.end());
  return std::stoll(digits);
}

TEST(Budget, NoSourceFileIsLongerThanTheReadmeSays) {
  const int64_t limit = readme_number("No source file is over");
  ASSERT_GT(limit, 0) << "README.md, \"Complexity budget\": no \"No source file is over N lines\"";
  EXPECT_EQ(over(source_files(fs::path(THX_SOURCE_DIR) / "src"), limit), std::vector<std::string>{})
      << "README.md's limit is " << limit << " lines a file";
  EXPECT_EQ(readme_number("and no function over"), 80) << "function_length_test.cpp's limit";
}

TEST(Budget, TheReadmesCountOfSrcIsWithinATenth) {
  const int64_t said = readme_number("`src/` is about");
  ASSERT_GT(said, 0) << "README.md, \"Complexity budget\": no \"`src/` is about N lines\"";
  int64_t lines = 0;
  for (const auto& f : source_files(fs::path(THX_SOURCE_DIR) / "src")) lines += f.lines;
  EXPECT_LE(std::abs(lines - said) * 10, said) << "README.md says src/ is about " << said << " lines; it is " << lines;
}

TEST(Budget, TheChecksFindALongFileAndCountEveryKind) {
  const TempDir dir;
  fs::create_directories(dir.path / "a");
  std::ofstream(dir.file("a/long.cu")) << std::string(651, '\n');
  std::ofstream(dir.file("short.h")) << std::string(650, '\n');
  std::ofstream(dir.file("notes.md")) << std::string(900, '\n');
  const auto files = source_files(dir.path);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(over(files, 650), std::vector<std::string>{"a/long.cu (651 lines)"});
  EXPECT_EQ(readme_number("a sentence the README does not have"), -1);
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
