// The README stays true: every YAML config snippet in it is a valid config that builds its
// layer at T5-base width and is one of configs/attention/*.yaml, its sweep snippet expands,
// .ci/run runs the README's test command, the suite's size it states is the suite's, and its
// complexity budget states what src/ is: its files' limit (functions' in function_length_test.cpp)
// and how many lines src/ holds, within a tenth, and its table of environment variables names
// every one thx reads.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "attention/factory.h"
#include "training/spec.h"
#include "common/config_tree.h"
#include "common/fs.h"
#include "experiments/sweep.h"
#include "cli/forked_cli.h"
#include "test_util.h"

namespace thx {
namespace {
namespace THX_FILE_ID {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> yaml_blocks(const std::string& markdown) {
  std::vector<std::string> out;
  std::regex block("```yaml\n([\\s\\S]*?)```");
  for (std::sregex_iterator it(markdown.begin(), markdown.end(), block), end; it != end; ++it)
    out.push_back((*it)[1].str());
  return out;
}

TEST(Readme, EveryYamlSnippetIsAValidConfigFile) {
  const std::string root = THX_SOURCE_DIR;
  auto snippets = yaml_blocks(slurp(root + "/README.md"));
  ASSERT_EQ(snippets.size(), 7u);
  // Sweep files load and expand (their base beside them, as in configs/mini/).
  for (auto it = snippets.begin(); it != snippets.end();) {
    if (it->rfind("sweep:", 0) != 0) {
      ++it;
      continue;
    }
    const auto dir = std::filesystem::temp_directory_path() / ("thx-readme-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    std::filesystem::copy_file(root + "/configs/mini/t5.yaml", dir / "t5.yaml");
    std::ofstream(dir / "sweep.yaml") << *it;
    const Sweep sw = load_sweep((dir / "sweep.yaml").string());
    EXPECT_EQ(sw.runs.size(), 16u);
    EXPECT_EQ(sw.runs.back().name, "talking_heads-h48-short-s2");
    remove_tree(dir.string());
    it = snippets.erase(it);
  }
  ASSERT_EQ(snippets.size(), 6u);
  std::set<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(root + "/configs/attention")) {
    std::string body = slurp(e.path().string());
    // Drop the leading comment lines: the README shows the YAML only.
    while (body.rfind("#", 0) == 0) body = body.substr(body.find('\n') + 1);
    files.insert(body);
  }
  for (const auto& s : snippets) {
    ConfigTree t;
    t.merge_text(s, "README.md");
    const RunConfig c = cfg::read<RunConfig>(t.root());
    EXPECT_NO_THROW(make_attention(c.attention, 768)) << s;
    EXPECT_TRUE(files.count(s)) << "not in configs/attention/:\n" << s;
  }
}

TEST(Readme, CiRunsTheReadmeTestCommand) {
  const std::string root = THX_SOURCE_DIR;
  const std::string readme = slurp(root + "/README.md");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(readme, m, std::regex("```sh\n([^\n]*)\n([^\n]*)\n```")));
  EXPECT_NE(m[1].str().find("quickstart.sh"), std::string::npos);
  EXPECT_NE(m[2].str().find("ctest"), std::string::npos);
  EXPECT_NE(slurp(root + "/.ci/run").find("sed -n 2p"), std::string::npos);
}

// The number that `pattern`'s group matches in the README (digits with thousands commas; lines
// joined by spaces), or -1 where it matches nothing.
int64_t number_in(const std::string& markdown, const std::string& pattern) {
  std::string text = markdown;
  std::replace(text.begin(), text.end(), '\n', ' ');
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern))) return -1;
  std::string digits = m[1].str();
  digits.erase(std::remove(digits.begin(), digits.end(), ','), digits.end());
  return std::stoll(digits);
}

// "The tests are N unit tests run as P processes, ... E CTest entries in all", of the README's
// build (a GPU machine's has its CUDA tests and no fuzz targets): N is this binary's tests, E the
// default suite's CTest entries (`-LE slow`, as CI runs it), P those that run a gtest suite
// ("Suite.*", and "Suite.* descending" for the emulated ones).
TEST(Readme, StatesTheSuitesSizeAsItIs) {
#if defined(THX_CUDA_KERNELS) || !defined(__clang__)
  GTEST_SKIP() << "the README counts the suite of its own build (clang, Debian's LibTorch, no CUDA kernels)";
#endif
  const std::string readme = slurp(std::string(THX_SOURCE_DIR) + "/README.md");
  const int64_t tests = ::testing::UnitTest::GetInstance()->total_test_count();
  EXPECT_EQ(number_in(readme, "The tests are ([0-9,]+) unit tests"), tests) << "README.md, \"Tests\": the unit tests";
  const auto listed = test::run_command("ctest --test-dir " THX_BUILD_DIR " -N -LE slow 2>&1");
  ASSERT_EQ(listed.code, 0) << listed.out;
  int64_t entries = -1, suites = 0;
  std::smatch m;
  if (std::regex_search(listed.out, m, std::regex("Total Tests: ([0-9]+)"))) entries = std::stoll(m[1].str());
  std::istringstream lines(listed.out);
  for (std::string line; std::getline(lines, line);)
    suites += line.find("Test") != std::string::npos && line.find(".*") != std::string::npos;
  EXPECT_GT(entries, 0) << listed.out;
  EXPECT_EQ(number_in(readme, "unit tests run as ([0-9,]+) processes"), suites) << "README.md: the gtest processes";
  EXPECT_EQ(number_in(readme, "([0-9,]+) CTest entries in all"), entries) << "README.md, \"Tests\": the CTest entries";
  EXPECT_EQ(number_in("no such sentence", "The tests are ([0-9,]+) unit tests"), -1);
}

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

TEST(Readme, NoSourceFileIsLongerThanItsBudgetSays) {
  const std::string readme = slurp(std::string(THX_SOURCE_DIR) + "/README.md");
  const int64_t limit = number_in(readme, "No source file is over ([0-9,]+) lines");
  ASSERT_GT(limit, 0) << "README.md, \"Complexity budget\": no \"No source file is over N lines\"";
  EXPECT_EQ(over(source_files(fs::path(THX_SOURCE_DIR) / "src"), limit), std::vector<std::string>{})
      << "README.md's limit is " << limit << " lines a file";
  EXPECT_EQ(number_in(readme, "and no function over ([0-9,]+)"), 80) << "function_length_test.cpp's limit";
}

TEST(Readme, ItsCountOfSrcIsWithinATenth) {
  const std::string readme = slurp(std::string(THX_SOURCE_DIR) + "/README.md");
  const int64_t said = number_in(readme, "`src/` is about ([0-9,]+) lines");
  ASSERT_GT(said, 0) << "README.md, \"Complexity budget\": no \"`src/` is about N lines\"";
  int64_t lines = 0;
  for (const auto& f : source_files(fs::path(THX_SOURCE_DIR) / "src")) lines += f.lines;
  EXPECT_LE(std::abs(lines - said) * 10, said) << "README.md says src/ is about " << said << " lines; it is " << lines;
}

TEST(Readme, TheBudgetChecksFindALongFileAndCountEveryKind) {
  const test::TempDir dir;
  fs::create_directories(dir.path / "a");
  std::ofstream(dir.file("a/long.cu")) << std::string(651, '\n');
  std::ofstream(dir.file("short.h")) << std::string(650, '\n');
  std::ofstream(dir.file("notes.md")) << std::string(900, '\n');
  const auto files = source_files(dir.path);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(over(files, 650), std::vector<std::string>{"a/long.cu (651 lines)"});
}

// docs/gpu.md's table of talking-heads paths has a row for each value `--th-path` takes, and
// no other: thx's refusal of a path it does not know lists them.
TEST(Readme, TheGpuPagesTableHasEveryThPath) {
  const auto refused = test::fork_thx("--th-path not-a-path --help");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(refused.out, m, std::regex("not in \\{([^}]*)\\}"))) << refused.out;
  std::set<std::string> taken;
  std::istringstream names(m[1].str());
  for (std::string name; std::getline(names, name, ',');) taken.insert(name);
  const std::string page = slurp(std::string(THX_SOURCE_DIR) + "/docs/gpu.md");
  const size_t at = page.find("## Talking-heads paths");
  ASSERT_NE(at, std::string::npos) << "docs/gpu.md has no section \"Talking-heads paths\"";
  const std::string table = page.substr(at, page.find("\n## ", at + 1) - at);
  std::set<std::string> rows;
  const std::regex row("\n\\| `([a-z][a-z-]*)`");  // (not the header's `--th-path`)
  for (std::sregex_iterator it(table.begin(), table.end(), row), end; it != end; ++it) rows.insert((*it)[1].str());
  EXPECT_GE(taken.size(), 10u);
  EXPECT_EQ(rows, taken);
}

// The environment variables src/ names: each quoted name of capitals with an underscore (every
// one is a variable), and each name getenv, or distributed/env.cpp's get and num, read.
std::set<std::string> variables_src_reads() {
  static const std::regex named(R"re("([A-Z][A-Z0-9]*_[A-Z0-9_]+)"|(?:getenv|get|num)\("([A-Z][A-Z0-9_]*)")re");
  std::set<std::string> names;
  for (const auto& e : std::filesystem::recursive_directory_iterator(std::string(THX_SOURCE_DIR) + "/src")) {
    if (!e.is_regular_file()) continue;
    const std::string text = slurp(e.path().string());
    for (std::sregex_iterator it(text.begin(), text.end(), named), end; it != end; ++it)
      names.insert((*it)[1].matched ? (*it)[1].str() : (*it)[2].str());
  }
  return names;
}

// README.md's "Environment variables" table names every variable thx reads, and no other.
TEST(Readme, NamesEveryVariableThxReads) {
  const std::string readme = slurp(std::string(THX_SOURCE_DIR) + "/README.md");
  const size_t at = readme.find("\n### Environment variables\n");
  ASSERT_NE(at, std::string::npos) << "README.md has no \"Environment variables\" section";
  const std::string section = readme.substr(at, readme.find("\n## ", at) - at);
  std::set<std::string> listed;  // the backquoted names of each row's first cell
  static const std::regex row(R"(\n\| ([^|]*) \|)"), name("`([A-Z][A-Z0-9_]*)`");
  for (std::sregex_iterator r(section.begin(), section.end(), row), end; r != end; ++r) {
    const std::string cell = (*r)[1].str();
    for (std::sregex_iterator n(cell.begin(), cell.end(), name); n != end; ++n) listed.insert((*n)[1].str());
  }
  const std::set<std::string> read = variables_src_reads();
  ASSERT_GE(read.size(), 20u) << "the search of src/ found too few variables";
  for (const std::string& v : read) EXPECT_EQ(listed.count(v), 1u) << v << ": read by src/, not in the README's table";
  for (const std::string& v : listed) EXPECT_EQ(read.count(v), 1u) << v << ": in the README's table, not read by src/";
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx
