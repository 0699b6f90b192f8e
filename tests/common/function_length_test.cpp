// No function of src/ is longer than 80 lines, as Universal Ctags measures it (its start and
// end lines, --fields=+ne): a reader should be able to hold one in their head. For scale,
// Marian's whole Train::run is about 90 lines. The check itself must fail on a long function.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

constexpr int kMaxLines = 80;

// "path:line name (N lines)" of every function under `dir` longer than kMaxLines.
std::vector<std::string> long_functions(const std::string& dir) {
  const RunResult r = run_command("ctags --fields=+ne --output-format=json --kinds-c++=f -R -f - " + dir + " 2>&1");
  EXPECT_EQ(r.code, 0) << "universal-ctags is needed (scripts/setup.sh installs it): " << r.out;
  std::vector<std::string> out;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("end")) continue;
    const int n = j["end"].get<int>() - j["line"].get<int>() + 1;
    if (n > kMaxLines)
      out.push_back(j["path"].get<std::string>() + ":" + std::to_string(j["line"].get<int>()) + " " +
                    j["name"].get<std::string>() + " (" + std::to_string(n) + " lines)");
  }
  return out;
}

TEST(FunctionLength, NoFunctionOfSrcIsOver80Lines) {
  if (const std::string why = absent_on_gpu_machine("ctags --version", "universal-ctags"); !why.empty())
    GTEST_SKIP() << why;
  EXPECT_EQ(long_functions(std::string(THX_SOURCE_DIR) + "/src"), std::vector<std::string>{});
}

TEST(FunctionLength, TheCheckFindsALongFunction) {
  if (const std::string why = absent_on_gpu_machine("ctags --version", "universal-ctags"); !why.empty())
    GTEST_SKIP() << why;
  const TempDir dir;
  std::string body = "int f(int x) {\n";
  for (int i = 0; i < kMaxLines; ++i) body += "  x += " + std::to_string(i) + ";\n";
  body += "  return x;\n}\nint g() { return 1; }\n";
  std::ofstream(dir.file("long.cpp")) << body;
  const auto found = long_functions(dir.path.string());
  ASSERT_EQ(found.size(), 1u);
  EXPECT_NE(found[0].find("long.cpp:1 f (83 lines)"), std::string::npos) << found[0];
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
