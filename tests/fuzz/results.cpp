// Fuzz target: a sweep's results.jsonl, as `thx table` (every layout) and `thx claims` read it.
#include "fuzz.h"

#include "common/text_table.h"
#include "experiments/claims.h"
#include "experiments/paper_tables.h"
#include "experiments/results_table.h"
#include "experiments/sweep_results.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  thx::fuzz::quiet();
  static const auto paper = thx::load_paper_rows(thx::default_tables_csv());
  thx::fuzz::put("results/results.jsonl", data, size);
  thx::fuzz::clear_errors_only([&] {
    const auto results = thx::read_results(thx::fuzz::scratch() + "/results");
    for (int t = 1; t <= 13; ++t)
      thx::render(thx::results_table(t, thx::match_rows(t, paper, results), "fuzz"), thx::TableFormat::markdown);
    thx::render_claims(thx::evaluate_claims(paper, thx::sweep_cells(paper, results)), "fuzz");
  });
  return 0;
}
