// docs/ARCHITECTURE.md's "may use" table is what src/ includes: for each layer, the other
// layers its files #include "layer/..." from (common aside, which every layer may use) are
// exactly the ones the table lists, and none of them is above it in the table.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

namespace fs = std::filesystem;
using Graph = std::map<std::string, std::set<std::string>>;

const std::vector<std::string> kLayers = {"cli", "experiments", "eval", "training", "distributed",
                                          "models", "data", "attention", "reference", "common"};

// layer -> the other layers its sources include (common left out).
Graph includes_of(const fs::path& src) {
  Graph g;
  const std::regex include(R"re(^\s*#include "([a-z_]+)/)re");
  for (const auto& layer : kLayers) {
    g[layer];
    for (const auto& e : fs::recursive_directory_iterator(src / layer)) {
      if (!e.is_regular_file()) continue;
      std::ifstream in(e.path());
      std::smatch m;
      for (std::string line; std::getline(in, line);)
        if (std::regex_search(line, m, include) && m[1] != layer && m[1] != "common") g[layer].insert(m[1]);
    }
  }
  return g;
}

// The table's rows: `a`, `b` | `c`, `d`; ... -> a: {c, d}, b: {c, d} (layers only, common left out).
Graph table_of(const fs::path& architecture) {
  Graph g;
  std::ifstream in(architecture);
  const std::regex name("`([a-z_/]+)`");
  bool in_table = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| layer | may use |", 0) == 0) in_table = true;
    else if (in_table && line.rfind("|", 0) != 0) break;
    if (!in_table || line.rfind("| `", 0) != 0) continue;
    const size_t bar = line.find('|', 1);
    auto names = [&](const std::string& cell) {
      std::set<std::string> out;
      for (std::sregex_iterator it(cell.begin(), cell.end(), name), end; it != end; ++it)
        if (std::find(kLayers.begin(), kLayers.end(), (*it)[1]) != kLayers.end() && (*it)[1] != "common")
          out.insert((*it)[1]);
      return out;
    };
    for (const auto& layer : names(line.substr(1, bar - 1))) g[layer] = names(line.substr(bar + 1));
  }
  return g;
}

TEST(Layering, TheArchitectureTableIsWhatSrcIncludes) {
  const fs::path root(THX_SOURCE_DIR);
  // A folder of src/ that is no layer here would escape the check.
  for (const auto& e : fs::directory_iterator(root / "src"))
    if (e.is_directory())
      EXPECT_NE(std::find(kLayers.begin(), kLayers.end(), e.path().filename().string()), kLayers.end())
          << "src/" << e.path().filename().string() << " is not in this test's layers";
  const Graph code = includes_of(root / "src"), table = table_of(root / "docs" / "ARCHITECTURE.md");
  for (const auto& layer : kLayers) {
    if (layer == "common") continue;
    ASSERT_TRUE(table.count(layer)) << "docs/ARCHITECTURE.md: no row for " << layer;
    EXPECT_EQ(code.at(layer), table.at(layer)) << layer;
    // Down only: every layer it uses comes later in kLayers (the map's order).
    const auto pos = std::find(kLayers.begin(), kLayers.end(), layer);
    for (const auto& used : code.at(layer))
      EXPECT_GT(std::find(kLayers.begin(), kLayers.end(), used), pos) << layer << " includes " << used;
  }
}

// The build enforces the same table (CMakeLists.txt, "Layering, enforced by the compiler"):
// its THX_USES_<layer> lists are the table's rows (the CLI, which sees every layer, aside).
TEST(Layering, TheBuildsIncludeViewsAreTheTable) {
  const fs::path root(THX_SOURCE_DIR);
  const Graph table = table_of(root / "docs" / "ARCHITECTURE.md");
  std::ifstream in(root / "CMakeLists.txt");
  const std::regex uses(R"re(^set\(THX_USES_([a-z_]+) ?(.*)\)$)re");
  Graph build;
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, uses)) continue;
    std::istringstream names(m[2].str());
    build[m[1]];
    for (std::string n; names >> n;)
      if (n != "\"\"") build[m[1]].insert(n);
  }
  for (const auto& layer : kLayers) {
    if (layer == "cli") continue;
    ASSERT_TRUE(build.count(layer)) << "CMakeLists.txt has no THX_USES_" << layer;
    EXPECT_EQ(build.at(layer), table.count(layer) ? table.at(layer) : std::set<std::string>{}) << layer;
  }
}

// And an include that points up does not compile: a file of models/ sees attention/ (a layer
// it may use) and not training/ (above it).
TEST(Layering, AnUpwardIncludeDoesNotCompile) {
  const std::string view = std::string(THX_BUILD_DIR) + "/layers/models";
  auto compile = [&](const std::string& header) {
    return run_command("printf '#include \"" + header + "\"\\n' | c++ -std=c++17 -fsyntax-only -x c++ -I " + view +
                       " - 2>&1");
  };
  const RunResult down = compile("attention/config.h");
  EXPECT_EQ(down.code, 0) << down.out;
  const RunResult up = compile("training/loop.h");
  EXPECT_NE(up.code, 0);
  EXPECT_NE(up.out.find("training/loop.h: No such file"), std::string::npos) << up.out;
}

// ARCHITECTURE.md is the one-screen map (DEVELOPERS.md): at most 66 lines, its map and flow
// blocks at most 100 characters wide, and its map names every folder of src/ at a line's
// start, as DESIGN.md's file-by-file map does; the detail lives in DESIGN.md.
TEST(Layering, TheArchitectureIsOneScreenAndNamesEveryLayer) {
  const fs::path root(THX_SOURCE_DIR);
  auto lines_of = [](const fs::path& file) {
    std::ifstream in(file);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  };
  const std::vector<std::string> map = lines_of(root / "docs" / "ARCHITECTURE.md");
  EXPECT_LE(map.size(), 66u) << "docs/ARCHITECTURE.md is longer than a screen; move detail to docs/DESIGN.md";
  bool in_block = false;
  for (size_t i = 0; i < map.size(); ++i) {
    if (map[i].rfind("```", 0) == 0) in_block = !in_block;
    else if (in_block) EXPECT_LE(map[i].size(), 100u) << "docs/ARCHITECTURE.md:" << i + 1 << " is wider than the map";
  }
  const std::vector<std::string> design = lines_of(root / "docs" / "DESIGN.md");
  for (const auto& e : fs::directory_iterator(root / "src")) {
    if (!e.is_directory()) continue;
    const std::string folder = "src/" + e.path().filename().string() + " ";
    auto named = [&](const std::vector<std::string>& doc) {
      return std::any_of(doc.begin(), doc.end(), [&](const std::string& l) { return l.rfind(folder, 0) == 0; });
    };
    EXPECT_TRUE(named(map)) << "docs/ARCHITECTURE.md's map has no line for " << folder;
    EXPECT_TRUE(named(design)) << "docs/DESIGN.md's map has no line for " << folder;
  }
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
