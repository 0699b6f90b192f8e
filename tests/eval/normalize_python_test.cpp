// SQuAD/ReCoRD answer normalization against Python itself: Debian's python3 normalizes the
// same strings the way the official scripts do (str.lower(), drop string.punctuation, the
// articles regex, ' '.join(str.split())), written here from that description, and
// normalize_answer must give the same text, byte for byte. The cases are the outside
// campaign's (Greek final sigma, one-to-two mappings) and the rest of str.isspace.
#include <gtest/gtest.h>

#include <cstdlib>

#include <nlohmann/json.hpp>

#include "common/fs.h"
#include "eval/metrics.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

const char* const kCases[] = {
    "-ΦΟΡΟΣ", "-φορος", "ΑΣ Α", "ας α", "İstanbul", "i̇stanbul", "ÉCOLE", "ǅemal", "ΣΑΣ.", "ὈΔΥΣΣΕΎΣ",
    "The  Cat!", "an apple, a pear", "theatre (the)", "Straße", "ﬁne ﬂower", "A\u00a0B\u2003C\u3000D\u0085E",
    "x\u001cy\u001fz", "«quoted» – dash", "ΣΑΣ Σ σ",
};

TEST(NormalizePython, EqualsTheOfficialScriptsNormalizationInPython) {
  if (std::system("/usr/bin/python3 -c 'import json, re, string' 2>/dev/null") != 0)
    GTEST_SKIP() << "Debian's /usr/bin/python3 is missing (scripts/setup.sh installs it)";
  TempDir dir;
  const std::string in = dir.write("in.json", nlohmann::json(std::vector<std::string>(std::begin(kCases), std::end(kCases))).dump());
  const std::string script = dir.write("norm.py", R"(import json, re, string, sys
def normalize(s):
    s = s.lower()
    s = ''.join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r'\b(a|an|the)\b', ' ', s)
    return ' '.join(s.split())
json.dump([normalize(s) for s in json.load(open(sys.argv[1], encoding='utf-8'))],
          open(sys.argv[2], 'w', encoding='utf-8'), ensure_ascii=False)
)");
  const std::string out = dir.file("out.json");
  ASSERT_EQ(std::system(("/usr/bin/python3 " + script + " " + in + " " + out).c_str()), 0);
  const auto expected = nlohmann::json::parse(read_file(out)).get<std::vector<std::string>>();
  ASSERT_EQ(expected.size(), std::size(kCases));
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(normalize_answer(kCases[i]), expected[i]) << kCases[i];
  // The campaign's scores: the official scripts give EM 1 here.
  EXPECT_EQ(squad_exact("-ΦΟΡΟΣ", "-φορος"), 1.0);
  EXPECT_EQ(squad_exact("ΑΣ Α", "ας α"), 1.0);
  EXPECT_EQ(squad_exact("İstanbul", "i̇stanbul"), 1.0);
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
