#include "experiments/paper_tables.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/csv.h"
#include "common/error.h"

namespace thx {

std::string default_tables_csv() { return std::string(THX_SOURCE_DIR) + "/data/paper/tables.csv"; }

std::vector<PaperRow> load_paper_rows(const std::string& csv_path) {
  const CsvTable csv = read_csv(csv_path);
  for (const char* col : {"table", "row", "variant", "h_k", "h", "h_v", "d_k", "d_v", "metric",
                          "value", "stddev", "note"})
    if (std::find(csv.header.begin(), csv.header.end(), col) == csv.header.end())
      throw InputError(fmt::format("{}:1: missing column '{}'", csv_path, col));
  std::vector<PaperRow> rows;
  std::map<std::pair<int64_t, int64_t>, size_t> index;
  for (size_t i = 0; i < csv.rows.size(); ++i) {
    const auto& r = csv.rows[i];
    auto integer = [&](const char* col) -> std::optional<int64_t> {
      const std::string& s = r.at(col);
      if (s.empty()) return std::nullopt;
      try {
        size_t used = 0;
        const int64_t v = std::stoll(s, &used);
        if (used == s.size()) return v;
      } catch (const std::exception&) {
      }
      throw InputError(fmt::format("{}:{}: column {}: '{}' is not an integer", csv_path,
                                   csv.lines[i], col, s));
    };
    const int64_t table = *integer("table"), row = *integer("row");
    auto [it, fresh] = index.try_emplace({table, row}, rows.size());
    if (fresh) {
      PaperRow p;
      p.table = table, p.row = row, p.label = r.at("variant");
      p.h_k = integer("h_k"), p.h = integer("h"), p.h_v = integer("h_v");
      p.d_k = integer("d_k"), p.d_v = integer("d_v");
      rows.push_back(p);
    }
    PaperRow& p = rows[it->second];
    const std::string& metric = r.at("metric");
    if (!p.values.count(metric)) p.metric_order.push_back(metric);
    p.values[metric] = r.at("value");
    if (!r.at("stddev").empty()) p.stddev[metric] = r.at("stddev");
    if (!r.at("note").empty()) p.notes[metric] = r.at("note");
  }
  return rows;
}

std::string encoder_table_model(int64_t table) { return table == 7 ? "bert" : "albert"; }

AttentionConfig encoder_attention(const PaperRow& row) {
  static const std::map<std::string, std::string> kVariants = {
      {"Multi-head", "multi_head"}, {"Talking-heads", "talking_heads"},
      {"Logit-project-only", "project_logits"}, {"Weight-project-only", "project_weights"}};
  auto it = kVariants.find(row.label);
  if (it == kVariants.end() || !row.h)
    throw InputError(fmt::format("table {} row {}: '{}' is not an ALBERT/BERT attention row",
                                 row.table, row.row, row.label));
  AttentionConfig c;
  c.variant = it->second;
  c.h = *row.h;
  c.d_k = row.d_k, c.d_v = row.d_v;
  return c;
}

PaperAttention t5_attention(const PaperRow& row) {
  auto need = [&](const std::optional<int64_t>& x, const char* what) {
    if (!x)
      throw InputError(fmt::format("tables.csv: table {} row {} ('{}') has no {}", row.table,
                                   row.row, row.label, what));
    return *x;
  };
  auto th = [&]() {
    AttentionConfig c;
    c.variant = "talking_heads";
    c.h_k = need(row.h_k, "h_k"), c.h = need(row.h, "h"), c.h_v = need(row.h_v, "h_v");
    c.d_k = need(row.d_k, "d_k"), c.d_v = need(row.d_v, "d_v");
    return c;
  };
  const std::vector<std::string> all_dynamic = {"X_l", "M_l", "X_w", "M_w"};
  const std::string& l = row.label;
  PaperAttention out;
  AttentionConfig& c = out.all;
  if (l == "multi-head" || l == "[Raffel et al., 2019]") {
    c.variant = "multi_head";
    c.h = need(row.h, "h"), c.d_k = need(row.d_k, "d_k"), c.d_v = need(row.d_v, "d_v");
  } else if (l == "talking-heads") {
    c = th();
  } else if (l == "project logits") {
    c.variant = "project_logits";
    c.h_k = need(row.h_k, "h_k"), c.h = need(row.h, "h");
    c.d_k = need(row.d_k, "d_k"), c.d_v = need(row.d_v, "d_v");
  } else if (l == "project weights") {
    c.variant = "project_weights";
    c.h = need(row.h, "h"), c.h_v = need(row.h_v, "h_v");
    c.d_k = need(row.d_k, "d_k"), c.d_v = need(row.d_v, "d_v");
  } else if (l == "general bilinear") {
    c.variant = "general_bilinear";
    c.h = need(row.h, "h");
  } else if (l == "dyn. proj." || l == "dynamic proj.") {
    c = th();
    c.dynamic = all_dynamic;
  } else if (l.rfind("dyn. proj. P_", 0) == 0 && l.size() == 15) {
    c = th();
    c.dynamic = {l.substr(13, 1) + "_" + l.substr(14, 1)};  // "P_Xl" -> "X_l"
  } else if (l == "TH-enc-self" || l == "TH-dec-self" || l == "TH-encdec" || l == "DP-enc-self") {
    // Starred rows: talking-heads (24*) in one layer type, multi-head with h=24 elsewhere.
    c.variant = "multi_head";
    c.h = need(row.h, "h"), c.d_k = need(row.d_k, "d_k"), c.d_v = need(row.d_v, "d_v");
    AttentionConfig t = th();
    if (l == "DP-enc-self") t.dynamic = all_dynamic;
    const std::string layer = l == "TH-dec-self" ? "decoder_self"
                              : l == "TH-encdec" ? "encoder_decoder"
                                                 : "encoder_self";
    out.by_layer[layer] = t;
  } else {
    throw InputError(fmt::format("tables.csv: table {} row {}: '{}' is not a T5 attention "
                                 "configuration", row.table, row.row, l));
  }
  return out;
}

}  // namespace thx
