// The README stays true: every YAML config snippet in it is a valid config that builds its
// layer at T5-base width and is one of configs/attention/*.yaml, its sweep snippet expands,
// and .ci/run runs the README's test command.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "attention/factory.h"
#include "training/spec.h"
#include "common/config_tree.h"
#include "common/fs.h"
#include "experiments/sweep.h"

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

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx
