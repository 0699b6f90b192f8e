// `thx costs`: the parameter column equals the paper's exactly, the multiplies equal the
// printed four digits, for every configuration of Tables 1-4 and 8-9.
#include <gtest/gtest.h>

#include "experiments/cost_table.h"
#include "cli/forked_cli.h"
#include "test_util.h"

namespace thx {
namespace {
namespace THX_FILE_ID {

TEST(Costs, ParametersEqualThePaperExactly) {
  const auto rows = cost_rows(load_paper_rows(default_tables_csv()));
  std::set<int64_t> got;
  int checked = 0;
  for (const auto& r : rows) {
    if (!r.params) {
      EXPECT_EQ(r.paper_params, "") << r.label << " (printed 'various')";
      continue;
    }
    EXPECT_EQ(std::to_string(*r.params), r.paper_params) << r.label;
    EXPECT_EQ(paper_number(*r.multiplies), r.paper_multiplies) << r.label;
    got.insert(*r.params);
    ++checked;
  }
  // The twelve distinct values the paper prints (independent of tables.csv).
  const std::set<int64_t> want = {2359296, 2359368, 2359584, 2360016, 2360448, 2363904,
                                  2359872, 4718592, 14155776, 2470176, 2801952, 4129920};
  EXPECT_EQ(got, want);
  EXPECT_EQ(checked, 22);  // distinct configurations with a printed number
}

TEST(Costs, PrintedMultipliesFromTheFormulas) {
  // Section 5 by hand for two rows: multi-head h=12 and talking-heads 24/24/24.
  const double n = 512, d = 768;
  const double mh = 12 * (64 + 64) * (n * d + n * d + n * n);
  const double th = (32 * 24 + 32 * 24) * (n * d + n * d + n * n) + n * n * 24 * (24 + 24);
  EXPECT_EQ(paper_number(mh), "1.611e9");
  EXPECT_EQ(paper_number(th), "1.913e9");
  EXPECT_EQ(paper_number(9.9996e9), "1.000e10");
}

TEST(Costs, CommandPrintsEveryFormat) {
  auto r = test::fork_thx("costs");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("| talking-heads      |  24 |  24 |  24 |  32 |  32 |  2360448 |    1.913e9"),
            std::string::npos) << r.out;
  r = test::fork_thx("costs --format csv");
  ASSERT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("general bilinear ²,,12,,,,14155776,7650410496,1.10,="), std::string::npos)
      << r.out;
  r = test::fork_thx("costs --format latex");
  ASSERT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("$2.819\\cdot 10^{9}$"), std::string::npos) << r.out;
  r = test::fork_thx("costs --tables /nonexistent.csv");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "thx: error: /nonexistent.csv: cannot read file\n");
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx
