#include "experiments/claims.h"

#include <cmath>
#include <map>

#include <fmt/format.h>

namespace thx {

namespace {

// "row A beats row B" in one table.
struct Pair {
  int table, better, worse;
  bool in_scope = true;
};

struct ClaimDef {
  int number;
  std::string tables, metric_label, text;
  std::vector<std::string> metrics;
  std::vector<Pair> pairs;
};

bool lower_is_better(const std::string& metric) { return metric.rfind("ln_ppl", 0) == 0; }

const std::vector<std::string> kLnPpl = {"ln_ppl_65536", "ln_ppl_524288"};

// Row numbers as printed in tables.csv (data/paper/tables.md describes each table).
std::vector<ClaimDef> definitions() {
  return {
      {1, "Table 1", "ln(PPL)", "talking-heads is lower than multi-head at every head count", kLnPpl,
       {{1, 5, 1}, {1, 6, 2}, {1, 7, 3}, {1, 8, 4}}},
      {2, "Table 1", "ln(PPL)",
       "multi-head gets worse from 24 to 48 heads while talking-heads improves", kLnPpl,
       {{1, 3, 4}, {1, 8, 7}}},
      {3, "Table 2", "ln(PPL)", "raising h alone (6/24/6) helps more than raising h_k and h_v (24/6/24)",
       kLnPpl, {{2, 2, 3}}},
      {4, "Table 3", "ln(PPL)", "talking-heads beats logits-only and weights-only", kLnPpl,
       {{3, 4, 2}, {3, 4, 3}}},
      {5, "Table 4", "SQuAD and MNLI-m", "encoder-self placement is the best single placement",
       {"squad11_dev_f1", "mnli_m_dev"}, {{4, 2, 3}, {4, 2, 4}}},
      {6, "Table 8", "ln(PPL)", "dynamic projections are lower than static talking-heads", kLnPpl,
       {{8, 3, 2}, {8, 6, 5}}},
      {7, "Tables 5 and 6", "Average",
       "talking-heads beats multi-head from 12 heads up, and beats logits-only and weights-only",
       {"average"}, {{5, 6, 2}, {5, 7, 3}, {5, 8, 4}, {5, 5, 1, false}, {6, 4, 2}, {6, 4, 3}}},
      {8, "Table 7", "SQuAD and MNLI", "every talking-heads row beats multi-head 12",
       {"squad11_f1", "mnli"},
       {{7, 2, 1}, {7, 3, 1}, {7, 4, 1}, {7, 5, 1}, {7, 6, 1}, {7, 7, 1}, {7, 8, 1}, {7, 9, 1}, {7, 10, 1}}},
      // Broader readings: not claims of the paper, printed so that a contradiction shows.
      {0, "Table 1", "SQuAD and MNLI-m",
       "(broader reading) talking-heads beats multi-head on downstream tasks at every head count",
       {"squad11_dev_f1", "mnli_m_dev"}, {{1, 5, 1}, {1, 6, 2}, {1, 7, 3}, {1, 8, 4}}},
      {0, "Table 4", "ln(PPL)",
       "(broader reading) by ln(PPL), encoder-decoder placement is the best single placement", kLnPpl,
       {{4, 4, 2}, {4, 4, 3}}},
      // The pretraining columns behind claim 7 (section 7.2), which a sweep fills without
      // fine-tuning.
      {0, "Table 5", "MLM and SOP",
       "(broader reading) in pretraining, talking-heads beats multi-head from 12 heads up on MLM and SOP accuracy",
       {"mlm", "sop"}, {{5, 6, 2}, {5, 7, 3}, {5, 8, 4}, {5, 5, 1, false}}},
  };
}

std::string row_label(const std::vector<PaperRow>& paper, int table, int row) {
  for (const auto& p : paper)
    if (p.table == table && p.row == row) {
      std::string heads;
      if (p.h_k && p.h_v && (*p.h_k != *p.h || *p.h_v != *p.h))
        heads = fmt::format(" {}/{}/{}", *p.h_k, p.h ? *p.h : 0, *p.h_v);
      else if (p.h)
        heads = fmt::format(" h={}", *p.h);
      return fmt::format("{}{} (T{}.{})", p.label, heads, table, row);
    }
  return fmt::format("T{}.{}", table, row);
}

}  // namespace

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::holds: return "holds";
    case Verdict::fails: return "fails";
    case Verdict::not_shown: return "not shown";
    default: return "not enough data";
  }
}

Outcome ComparisonResult::outcome() const {
  if (!margin) return Outcome::no_data;
  if (sigma && *sigma > 0) {
    if (*margin >= kClaimSigmas * *sigma) return Outcome::shown;
    return *margin <= -kClaimSigmas * *sigma ? Outcome::contradicted : Outcome::inside_noise;
  }
  return *margin > 0 ? Outcome::shown : Outcome::contradicted;
}

std::vector<ClaimResult> evaluate_claims(const std::vector<PaperRow>& paper, const CellSource& cells) {
  std::vector<ClaimResult> out;
  for (const auto& d : definitions()) {
    ClaimResult c;
    c.number = d.number, c.tables = d.tables, c.metric = d.metric_label, c.text = d.text;
    bool any_fail = false, any_missing = false, any_noise = false, any = false;
    for (const auto& metric : d.metrics) {
      // A metric with no numbers at all in these tables (a column a sweep did not run, such as
      // the full budget) is left out rather than counted as missing, unless no metric has any.
      std::vector<ComparisonResult> got;
      bool metric_has_data = false;
      for (const auto& p : d.pairs) {
        ComparisonResult r;
        r.metric = metric, r.in_scope = p.in_scope;
        r.better = row_label(paper, p.table, p.better);
        r.worse = row_label(paper, p.table, p.worse);
        const auto a = cells(p.table, p.better, metric), b = cells(p.table, p.worse, metric);
        if (a || b) metric_has_data = true;
        if (a && b && a->text.empty() && b->text.empty()) {
          r.margin = lower_is_better(metric) ? b->mean - a->mean : a->mean - b->mean;
          if (a->std || b->std)
            r.sigma = std::sqrt(a->std.value_or(0) * a->std.value_or(0) + b->std.value_or(0) * b->std.value_or(0));
        }
        got.push_back(r);
      }
      if (!metric_has_data) continue;
      for (auto& r : got) {
        if (r.in_scope) {
          any = true;
          const Outcome o = r.outcome();
          any_missing |= o == Outcome::no_data;
          any_fail |= o == Outcome::contradicted;
          any_noise |= o == Outcome::inside_noise;
        }
        c.comparisons.push_back(r);
      }
    }
    c.verdict = any_fail                  ? Verdict::fails
                : (!any || any_missing) ? Verdict::not_enough_data
                : any_noise             ? Verdict::not_shown
                                        : Verdict::holds;
    out.push_back(c);
  }
  return out;
}

CellSource published_cells(const std::vector<PaperRow>& paper) {
  return [&paper](int table, int row, const std::string& metric) -> std::optional<Aggregate> {
    for (const auto& p : paper)
      if (p.table == table && p.row == row) return published(p, metric);
    return std::nullopt;
  };
}

CellSource sweep_cells(const std::vector<PaperRow>& paper, const std::vector<nlohmann::json>& results) {
  auto matched = std::make_shared<std::map<int, std::vector<MatchedRow>>>();
  return [&paper, results, matched](int table, int row, const std::string& metric) -> std::optional<Aggregate> {
    auto it = matched->find(table);
    if (it == matched->end()) it = matched->emplace(table, match_rows(table, paper, results)).first;
    for (const auto& m : it->second)
      if (m.paper.row == row && !m.published_only) return aggregate(m, metric);
    return std::nullopt;
  };
}

std::string render_claims(const std::vector<ClaimResult>& claims, const std::string& source) {
  std::string s = fmt::format("# The paper's claims, checked on {}\n\n", source);
  s += "| # | table | metric | claim | verdict | smallest margin |\n|---|---|---|---|---|---|\n";
  auto margin_text = [](const ComparisonResult& r) {
    if (!r.margin) return std::string("no data");
    std::string m = fmt::format("{:+.4g}", *r.margin);
    if (r.sigma && *r.sigma > 0) m += fmt::format(" ({:+.1f}σ)", *r.margin / *r.sigma);
    return m;
  };
  for (const auto& c : claims) {
    const ComparisonResult* smallest = nullptr;
    for (const auto& r : c.comparisons)
      if (r.in_scope && r.margin && (!smallest || *r.margin < *smallest->margin)) smallest = &r;
    s += fmt::format("| {} | {} | {} | {} | **{}** | {} |\n", c.number ? std::to_string(c.number) : "-",
                     c.tables, c.metric, c.text, verdict_name(c.verdict),
                     smallest ? margin_text(*smallest) : "");
  }
  s += "\nMargins: the better row's advantage (ln(PPL) lower, scores higher); σ = sqrt(σ_A² + σ_B²) "
       "from the seed standard deviations where known (the paper prints them for ln(PPL) at 65536 "
       "steps only). With σ, a comparison is shown (ok) when its margin is at least 2σ, "
       "contradicted (FAILS) at -2σ or below, and inside the noise between; without σ its sign "
       "decides. A claim holds when every comparison is shown, fails when one is contradicted, "
       "and is not shown when one is inside the noise.\n";
  for (const auto& c : claims) {
    s += fmt::format("\n## {}{}: {}\n\n", c.number ? fmt::format("Claim {} ", c.number) : "",
                     c.tables, c.text);
    for (const auto& r : c.comparisons) {
      const Outcome o = r.outcome();
      const char* mark = o == Outcome::no_data        ? "?"
                         : o == Outcome::shown        ? "ok"
                         : o == Outcome::inside_noise ? "inside the noise"
                                                      : "FAILS";
      s += fmt::format("- {}: {} vs {}: {} — {}{}\n", r.metric, r.better, r.worse, margin_text(r), mark,
                       r.in_scope ? "" : " (outside the claim)");
    }
    s += fmt::format("\nVerdict: **{}**.\n", verdict_name(c.verdict));
  }
  return s;
}

}  // namespace thx
