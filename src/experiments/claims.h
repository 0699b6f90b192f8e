// claims.h: `thx claims`, the paper's qualitative conclusions checked on a set of numbers.
//
// Each claim is bound to a table and a metric and is a list of comparisons between printed
// rows ("row A is better than row B": lower ln(PPL), higher downstream scores). Where the
// seed standard deviations of both cells are known, σ = sqrt(σ_A² + σ_B²) and a comparison is
// shown when its margin is at least 2σ, contradicted when it is at most -2σ, and inside the
// noise between; where σ is not known (one seed, most published cells) its sign decides. A
// claim fails when a comparison is contradicted, has not enough data when one lacks numbers,
// is not shown when one is inside the noise, and holds when every comparison is shown.
//
// Comparisons outside a claim's scope that the paper's own numbers contradict are printed
// with it ("outside the claim"), and a few broader readings that are not claims of the paper
// (talking-heads vs multi-head on downstream tasks at each head count) close the report.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "experiments/results_table.h"

namespace thx {

enum class Verdict { holds, fails, not_enough_data, not_shown };
const char* verdict_name(Verdict v);  // "holds", "fails", "not enough data", "not shown"

// A comparison's margin against its noise: the 2σ rule above.
enum class Outcome { shown, inside_noise, contradicted, no_data };
constexpr double kClaimSigmas = 2.0;

struct ComparisonResult {
  std::string metric, better, worse;  // labels of the rows
  std::optional<double> margin;       // > 0 when it goes the claim's way; nullopt: no data
  std::optional<double> sigma;        // sqrt(σ_A² + σ_B²) where known
  bool in_scope = true;
  Outcome outcome() const;
};

struct ClaimResult {
  int number = 0;  // 1-8 for the paper's claims; 0 for broader readings
  std::string tables, metric, text;
  Verdict verdict = Verdict::not_enough_data;
  std::vector<ComparisonResult> comparisons;
};

// A cell: the value of `metric` in printed row `row` of `table`.
using CellSource = std::function<std::optional<Aggregate>(int table, int row, const std::string& metric)>;

// Every claim and broader reading, evaluated on `cells`. `paper` names the rows.
std::vector<ClaimResult> evaluate_claims(const std::vector<PaperRow>& paper, const CellSource& cells);

// Cells from the published numbers, and from a sweep's results.
CellSource published_cells(const std::vector<PaperRow>& paper);
CellSource sweep_cells(const std::vector<PaperRow>& paper, const std::vector<nlohmann::json>& results);

// Markdown report: a line per claim with its verdict, then its comparisons.
std::string render_claims(const std::vector<ClaimResult>& claims, const std::string& source);

}  // namespace thx
