#include "experiments/cost_table.h"

#include <fmt/format.h>

#include <cmath>
#include <set>

#include "attention/costs.h"
#include "attention/factory.h"
#include "attention/registry.h"

namespace thx {
namespace {

const std::set<int64_t> kT5CostTables = {1, 2, 3, 4, 8, 9};

std::string dims_key(const PaperAttention& a, int64_t d_model) {
  std::string key = resolve(a.all, d_model, d_model, d_model).summary();
  for (const auto& [layer, c] : a.by_layer)
    key += " | " + layer + ": " + resolve(c, d_model, d_model, d_model).summary();
  return key;
}

}  // namespace

std::string paper_number(double x) {
  const int e = static_cast<int>(std::floor(std::log10(x)));
  double mant = x / std::pow(10.0, e);
  // Round the mantissa to three decimals, carrying into the exponent if it reaches 10.
  mant = std::round(mant * 1000.0) / 1000.0;
  if (mant >= 10.0) return fmt::format("{:.3f}e{}", mant / 10.0, e + 1);
  return fmt::format("{:.3f}e{}", mant, e);
}

std::vector<CostRow> cost_rows(const std::vector<PaperRow>& paper, int64_t d_model, int64_t n) {
  std::vector<CostRow> rows;
  std::map<std::string, size_t> seen;
  for (const auto& p : paper) {
    if (!kT5CostTables.count(p.table) || !p.values.count("params_per_att_layer")) continue;
    PaperAttention a = t5_attention(p);
    const std::string key = dims_key(a, d_model);
    auto [it, fresh] = seen.try_emplace(key, rows.size());
    if (fresh) {
      CostRow r;
      r.label = p.label;
      r.attention = a;
      r.paper_params = p.values.at("params_per_att_layer");
      r.paper_multiplies = p.values.count("multiplies_per_att_layer")
                               ? p.values.at("multiplies_per_att_layer") : "";
      if (a.by_layer.empty()) {
        const AttentionDims d = resolve(a.all, d_model, d_model, d_model);
        r.params = count_parameters(*make_attention(d));
        r.multiplies = multiplies(d, n, n, CostConvention::Paper);
        r.multiplies_full = multiplies(d, n, n, CostConvention::Full);
      }
      rows.push_back(r);
    }
    rows[it->second].appears.push_back(fmt::format("{}.{}", p.table, p.row));
  }
  return rows;
}

TextTable cost_table(const std::vector<CostRow>& rows, TableFormat format, int64_t d_model,
                     int64_t n) {
  TextTable t;
  t.caption = fmt::format("Cost of one attention layer at d_model = {}, n = m = {} (thx costs)",
                          d_model, n);
  t.header = {"variant", "h_k", "h", "h_v", "d_k", "d_v", "params", "multiplies", "tables",
              "paper"};
  t.align = "lrrrrrrrll";
  bool dynamic_note = false, gb_note = false, various_note = false;
  for (const auto& r : rows) {
    const AttentionConfig& c = r.attention.by_layer.empty() ? r.attention.all
                                                            : r.attention.by_layer.begin()->second;
    const AttentionDims d = resolve(c, d_model, d_model, d_model);
    std::string label = r.label;
    std::string params = "various", mult = "various", check;
    if (r.params) {
      params = std::to_string(*r.params);
      const std::string m = paper_number(*r.multiplies);
      mult = format == TableFormat::latex
                 ? fmt::format("${}\\cdot 10^{{{}}}$", m.substr(0, 5), m.substr(6))
             : format == TableFormat::csv ? fmt::format("{:.0f}", *r.multiplies)
                                          : m;
      const bool same = params == r.paper_params && m == r.paper_multiplies;
      check = same ? "=" : fmt::format("{} / {}", r.paper_params, r.paper_multiplies);
      if (d.any_dynamic()) label += " ¹", dynamic_note = true;
      if (!d.variant->per_head) label += " ²", gb_note = true;
    } else {
      label += " ³";
      various_note = true;
      check = "various";
    }
    std::string joined;
    for (const auto& a : r.appears) joined += (joined.empty() ? "" : " ") + a;
    // Blank where the paper leaves the cell blank; 24* where it stars it (one layer type).
    const std::string star = r.attention.by_layer.empty() ? "" : "*";
    // A head count the variant ties to h is blank, as the paper prints it.
    const bool no_hk = !d.variant->P_l, no_hv = !d.variant->P_w;
    t.rows.push_back({label, no_hk ? "" : std::to_string(d.h_k) + star, std::to_string(d.h),
                      no_hv ? "" : std::to_string(d.h_v) + star,
                      d.variant->per_head ? std::to_string(d.d_k) : "",
                      d.variant->per_head ? std::to_string(d.d_v) : "", params,
                      mult, joined, check});
  }
  t.notes.push_back("params: counted from an instantiated thx layer. multiplies: section 5's "
                    "formulas, forward pass. tables: table.row of each printing. paper: '=' when "
                    "both equal the printed values.");
  if (dynamic_note) {
    std::string full;
    for (const auto& r : rows)
      if (r.multiplies_full && *r.multiplies_full != *r.multiplies &&
          resolve(r.attention.all, d_model, d_model, d_model).any_dynamic())
        full += fmt::format("{}{} {}", full.empty() ? "" : ", ", r.label,
                            paper_number(*r.multiplies_full));
    t.notes.push_back("¹ The paper's convention: a dynamic projection counts only generating it, "
                      "n·d·h_in·h_out, not the n·m·h·h_in of applying it. With that term: " + full + ".");
  }
  if (gb_note)
    t.notes.push_back("² As printed: 2·h·n·d² + 2·n·m·d. The computation does 2·h·n·d² + "
                      "2·h·n·m·d.");
  if (various_note)
    t.notes.push_back("³ Talking-heads (24/24/24, d_k = d_v = 32) in one layer type only, "
                      "multi-head (h = 24) elsewhere; the paper prints 'various'. Per layer: "
                      "see the talking-heads and multi-head rows.");
  return t;
}

}  // namespace thx
