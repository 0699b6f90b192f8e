#include "experiments/results_table.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "attention/config.h"
#include "common/error.h"
#include "eval/metrics.h"
#include "experiments/cost_table.h"

namespace thx {
using json = nlohmann::json;

namespace {

const char* const kLayers[] = {"encoder_self", "decoder_self", "encoder_decoder"};
constexpr int64_t kPaperDModel = 768;

bool is_t5_table(int t) { return (t >= 1 && t <= 4) || (t >= 8 && t <= 13); }

// The attention of one layer type, reduced to what identifies a printed row.
struct Signature {
  std::string variant;
  int64_t h_k = 0, h = 0, h_v = 0;
  double key_width = 0, value_width = 0;  // h_k·d_k / d_model, h_v·d_v / d_model
  std::set<std::string> dynamic;
  bool operator==(const Signature& o) const {
    return variant == o.variant && h_k == o.h_k && h == o.h && h_v == o.h_v &&
           std::abs(key_width - o.key_width) < 1e-9 && std::abs(value_width - o.value_width) < 1e-9 &&
           dynamic == o.dynamic;
  }
};

Signature signature(const AttentionDims& d, int64_t d_model) {
  Signature s;
  s.variant = d.name();
  s.h_k = d.h_k, s.h = d.h, s.h_v = d.h_v;
  s.key_width = double(d.h_k * d.d_k) / double(d_model);
  s.value_width = double(d.h_v * d.d_v) / double(d_model);
  if (d.X_l) s.dynamic.insert("X_l");
  if (d.M_l) s.dynamic.insert("M_l");
  if (d.X_w) s.dynamic.insert("X_w");
  if (d.M_w) s.dynamic.insert("M_w");
  return s;
}

std::optional<Signature> run_signature(const json& r, const char* layer) {
  if (!r.contains("attention") || !r["attention"].contains(layer) || !r.contains("d_model"))
    return std::nullopt;
  const json& a = r["attention"][layer];
  Signature s;
  const int64_t d = r["d_model"];
  s.variant = a.value("variant", "");
  s.h_k = a.value("h_k", int64_t(0)), s.h = a.value("h", int64_t(0)), s.h_v = a.value("h_v", int64_t(0));
  s.key_width = double(s.h_k * a.value("d_k", int64_t(0))) / double(d);
  s.value_width = double(s.h_v * a.value("d_v", int64_t(0))) / double(d);
  for (const auto& x : a.value("dynamic", json::array())) s.dynamic.insert(x.get<std::string>());
  return s;
}

int decimals_of(const std::string& printed) {
  const auto dot = printed.find('.');
  if (printed.find('e') != std::string::npos || dot == std::string::npos) return 0;
  return int(printed.size() - dot - 1);
}

std::optional<double> number(const std::string& s) {
  if (s.empty()) return std::nullopt;
  try {
    size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::string header_of(const std::string& metric) {
  static const std::map<std::string, std::string> names = {
      {"ln_ppl_65536", "ln(PPL) short"},        {"ln_ppl_524288", "ln(PPL) full"},
      {"squad11_dev_f1", "SQuAD v1.1 dev-F1"},  {"mnli_m_dev", "MNLI-m dev"},
      {"step_time_s", "step time (s)"},         {"params_per_att_layer", "params per att. layer"},
      {"multiplies_per_att_layer", "multiplies per att. layer"},
      {"squad11_f1", "SQuAD1.1 (F1)"},          {"squad20_f1", "SQuAD2.0 (F1)"},
      {"mnli", "MNLI"},                         {"sst_2", "SST-2"},
      {"race", "RACE"},                         {"mlm", "MLM"},
      {"sop", "SOP"},                           {"average", "Average"}};
  auto it = names.find(metric);
  return it != names.end() ? it->second : metric;
}

// Quality metrics get a difference column; costs and step time are printed beside the
// published value only (a mini model's step time or size is not comparable to the paper's).
bool has_difference(const std::string& metric) {
  return metric != "step_time_s" && metric != "params_per_att_layer" &&
         metric != "multiplies_per_att_layer";
}

// A downstream column of a printed table, as (task, metric) pairs of `thx finetune` results
// (run["downstream"][task][metric], percent); several pairs are averaged (the averages).
std::vector<std::pair<std::string, std::string>> downstream_sources(int table, const std::string& metric) {
  using V = std::vector<std::pair<std::string, std::string>>;
  static const std::map<std::string, V> t5 = {
      {"squad11_dev_f1", {{"squad11", "f1"}}}, {"mnli_m_dev", {{"mnli", "accuracy"}}},
      {"squad_em", {{"squad11", "exact_match"}}}, {"squad_f1", {{"squad11", "f1"}}},
      // Table 11 (GLUE)
      {"cola_mcc", {{"cola", "mcc"}}}, {"sst_2_acc", {{"sst2", "accuracy"}}},
      {"mrpc_f1", {{"mrpc", "f1"}}}, {"mrpc_acc", {{"mrpc", "accuracy"}}},
      {"stsb_pcc", {{"stsb", "pearson"}}}, {"stsb_scc", {{"stsb", "spearman"}}},
      {"qqp_f1", {{"qqp", "f1"}}}, {"qqp_acc", {{"qqp", "accuracy"}}},
      {"mnlim_acc", {{"mnli", "accuracy"}}}, {"mnlimm_acc", {{"mnli_mm", "accuracy"}}},
      {"qnli_acc", {{"qnli", "accuracy"}}},
      // Table 12 (SuperGLUE)
      {"boolq_acc", {{"boolq", "accuracy"}}}, {"cb_f1", {{"cb", "f1_macro"}}}, {"cb_acc", {{"cb", "accuracy"}}},
      {"copa_acc", {{"copa", "accuracy"}}}, {"multirc_f1", {{"multirc", "f1a"}}},
      {"multirc_em", {{"multirc", "exact_match"}}}, {"record_f1", {{"record", "f1"}}},
      {"record_em", {{"record", "exact_match"}}}, {"wic_acc", {{"wic", "accuracy"}}},
      {"wsc_acc", {{"wsc", "accuracy"}}}};
  static const std::map<std::string, V> encoder = {  // Tables 5-7
      {"squad11_f1", {{"squad11", "f1"}}}, {"squad20_f1", {{"squad20", "f1"}}},
      {"mnli", {{"mnli", "accuracy"}}},    {"sst_2", {{"sst2", "accuracy"}}},
      {"race", {{"race", "accuracy"}}},
      // ALBERT's Average: the five downstream columns.
      {"average", {{"squad11", "f1"}, {"squad20", "f1"}, {"mnli", "accuracy"}, {"sst2", "accuracy"}, {"race", "accuracy"}}}};
  if (metric == "rte_acc") return {{table == 12 ? "rte_sg" : "rte", "accuracy"}};
  const auto& m = table >= 5 && table <= 7 ? encoder : t5;
  auto it = m.find(metric);
  return it != m.end() ? it->second : V{};
}

// The GLUE (Table 11) or SuperGLUE (Table 12) tasks of T5's average.
const std::vector<std::string>& average_tasks(int table) {
  static const std::vector<std::string> glue = {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "mnli_mm", "qnli", "rte", "wnli"};
  static const std::vector<std::string> superglue = {"boolq", "cb", "copa", "multirc", "record", "rte_sg", "wic", "wsc"};
  return table == 11 ? glue : superglue;
}

}  // namespace

std::optional<double> downstream_value(int table, const std::string& metric, const json& run) {
  if (!run.contains("downstream") || !run["downstream"].is_object()) return std::nullopt;
  const json& d = run["downstream"];
  if (metric == "score_average" && (table == 11 || table == 12)) {
    // T5's average over the benchmark's tasks this run has (a two-metric task averages first).
    std::map<std::string, std::map<std::string, double>> scores;
    for (const auto& task : average_tasks(table))
      if (d.contains(task) && d[task].is_object())
        for (const auto& [k, v] : d[task].items())
          if (v.is_number() && k != "threshold" && k.rfind("has_", 0) && k.rfind("no_", 0) && k.rfind("best_", 0))
            scores[task][k] = v.get<double>();
    if (scores.empty()) return std::nullopt;
    return benchmark_average(scores).value;
  }
  const auto sources = downstream_sources(table, metric);
  if (sources.empty()) return std::nullopt;
  double sum = 0;
  for (const auto& [task, key] : sources) {
    if (!d.contains(task) || !d[task].contains(key) || !d[task][key].is_number()) return std::nullopt;
    sum += d[task][key].get<double>();
  }
  return sum / double(sources.size());
}

bool is_downstream_metric(int table, const std::string& metric) {
  return !downstream_sources(table, metric).empty() || (metric == "score_average" && (table == 11 || table == 12));
}

std::string sweep_table_layout(const std::string& sweep_dir) {
  // The copy thx sweep keeps in its directory (not load_sweep: the copy's relative base paths
  // do not resolve from here).
  const std::string copy = (std::filesystem::path(sweep_dir) / "sweep.yaml").string();
  if (std::filesystem::exists(copy)) {
    try {
      const YAML::Node n = YAML::LoadFile(copy)["table"];
      if (n && n.IsScalar()) return n.as<std::string>();
    } catch (const YAML::Exception& e) {
      throw InputError(fmt::format("{}:{}: {}", copy, e.mark.line + 1, e.msg));
    }
  }
  const std::string results = (std::filesystem::path(sweep_dir) / "results.jsonl").string();
  if (!std::filesystem::exists(results))
    throw InputError(fmt::format("{}: no results file; run `thx sweep` first", results));
  throw InputError(fmt::format("table: --layout is required ({} {})", copy,
                               std::filesystem::exists(copy) ? "names no table" : "is missing"));
}

int parse_layout(const std::string& name) {
  if (name.rfind("table", 0) == 0) {
    try {
      size_t used = 0;
      const int t = std::stoi(name.substr(5), &used);
      if (used == name.size() - 5 && t >= 1 && t <= 13) return t;
    } catch (const std::exception&) {
    }
  }
  throw InputError(fmt::format("--layout {}: unknown layout; allowed: table1 ... table13, costs", name));
}

std::vector<std::string> table_metrics(int table, const std::vector<PaperRow>& paper) {
  // tables.csv lists each row's metrics in the printed column order; later rows add any
  // column the earlier ones lack.
  std::vector<std::string> order;
  for (const auto& r : paper)
    if (r.table == table)
      for (const auto& m : r.metric_order)
        if (std::find(order.begin(), order.end(), m) == order.end()) order.push_back(m);
  return order;
}

std::vector<MatchedRow> match_rows(int table, const std::vector<PaperRow>& paper,
                                   const std::vector<json>& results) {
  std::vector<MatchedRow> out;
  for (const auto& p : paper) {
    if (p.table != table) continue;
    MatchedRow m;
    m.paper = p;
    if (p.label.find("Raffel") != std::string::npos || p.label.find("ibid") != std::string::npos) {
      m.published_only = true;
      out.push_back(m);
      continue;
    }
    if (is_t5_table(table)) {
      const PaperAttention pa = t5_attention(p);
      std::vector<Signature> want;
      for (const char* layer : kLayers) {
        auto it = pa.by_layer.find(layer);
        const AttentionConfig& c = it != pa.by_layer.end() ? it->second : pa.all;
        want.push_back(signature(resolve(c, kPaperDModel, kPaperDModel, kPaperDModel), kPaperDModel));
      }
      for (const auto& r : results) {
        if (r.contains("model") && r["model"] != "t5") continue;
        bool all = true;
        for (size_t i = 0; i < 3 && all; ++i) {
          const auto s = run_signature(r, kLayers[i]);
          all = s && *s == want[i];
        }
        if (all) m.runs.push_back(r);
      }
    }
    if (table >= 5 && table <= 7) {  // ALBERT (5, 6) and BERT (7): encoder self-attention only
      const Signature want =
          signature(resolve(encoder_attention(p), kPaperDModel, kPaperDModel, kPaperDModel), kPaperDModel);
      const std::string model = encoder_table_model(table);
      for (const auto& r : results) {
        if (r.value("model", "t5") != model) continue;
        const auto s = run_signature(r, "encoder_self");
        if (s && *s == want) m.runs.push_back(r);
      }
    }
    out.push_back(m);
  }
  return out;
}

std::string unmatched_note(int table, const std::vector<MatchedRow>& rows, const std::vector<json>& results) {
  std::set<std::string> matched;
  for (const auto& r : rows)
    for (const auto& run : r.runs) matched.insert(run.value("name", ""));
  std::vector<std::string> left;
  for (const auto& r : results) {
    if (matched.count(r.value("name", ""))) continue;
    const auto s = run_signature(r, "encoder_self");
    left.push_back(s ? fmt::format("{} ({} {}, h_k/h/h_v {}/{}/{}, h·d_k/d_model {:.3g})", r.value("name", ""),
                                   r.value("model", "t5"), s->variant, s->h_k, s->h, s->h_v, s->key_width)
                     : fmt::format("{} (no attention block)", r.value("name", "")));
  }
  if (left.empty()) return "";
  std::string names;
  for (size_t i = 0; i < left.size() && i < 5; ++i) names += (i ? "; " : "") + left[i];
  if (left.size() > 5) names += fmt::format("; and {} more", left.size() - 5);
  return fmt::format("Left out: {} of {} runs match no row of Table {} (a row is matched by model, variant, "
                     "heads and h·d_k / d_model, in every layer type for T5): {}.",
                     left.size(), results.size(), table, names);
}

std::optional<Aggregate> aggregate(const MatchedRow& row, const std::string& metric) {
  std::vector<double> v;
  std::set<std::string> texts;
  for (const auto& r : row.runs) {
    const std::string budget = r.value("budget", "short");
    if (metric == "ln_ppl_65536" || metric == "ln_ppl_524288") {
      if (budget != (metric == "ln_ppl_65536" ? "short" : "full") || !r.contains("ln_ppl")) continue;
      v.push_back(r["ln_ppl"]);
    } else if (metric == "params_per_att_layer" || metric == "multiplies_per_att_layer") {
      if (!r.contains(metric)) continue;
      const json& x = r[metric];
      if (x.is_number()) {
        v.push_back(x);
      } else if (x.is_object()) {
        std::set<double> distinct;
        for (const auto& [k, e] : x.items()) distinct.insert(e.get<double>());
        // Multiplies differ by layer type with n != m; the paper's column is n = m, which the
        // encoder's self-attention has.
        if (metric == "multiplies_per_att_layer" && x.contains("encoder_self") &&
            r["attention"]["encoder_self"] == r["attention"]["decoder_self"] &&
            r["attention"]["encoder_self"] == r["attention"]["encoder_decoder"])
          v.push_back(x["encoder_self"].get<double>());
        else if (distinct.size() == 1)
          v.push_back(*distinct.begin());
        else
          texts.insert("various");
      }
    } else if (is_downstream_metric(row.paper.table, metric)) {
      if (const auto x = downstream_value(row.paper.table, metric, r)) v.push_back(*x);
    } else {
      if (!r.contains(metric) || !r[metric].is_number()) continue;
      v.push_back(r[metric]);
    }
  }
  if (v.empty() && texts.empty()) return std::nullopt;
  Aggregate a;
  if (!texts.empty() && v.empty()) {
    a.text = *texts.begin();
    a.n = int(texts.size());
    return a;
  }
  a.n = int(v.size());
  for (double x : v) a.mean += x;
  a.mean /= double(v.size());
  if (v.size() >= 2) {
    double ss = 0;
    for (double x : v) ss += (x - a.mean) * (x - a.mean);
    a.std = std::sqrt(ss / double(v.size() - 1));
  }
  return a;
}

std::optional<Aggregate> published(const PaperRow& row, const std::string& metric) {
  auto it = row.values.find(metric);
  if (it == row.values.end()) return std::nullopt;
  Aggregate a;
  a.n = 1;
  if (const auto v = number(it->second)) {
    a.mean = *v;
  } else {
    a.text = it->second.empty() ? "various" : it->second;
  }
  auto s = row.stddev.find(metric);
  if (s != row.stddev.end()) a.std = number(s->second);
  return a;
}

std::string results_precision(const std::vector<json>& results, const std::string& source) {
  std::map<std::string, int> count;
  for (const auto& r : results) ++count[r.value("precision", std::string("fp32"))];
  if (count.size() <= 1) return count.empty() ? "fp32" : count.begin()->first;
  std::string parts;
  for (const auto& [p, n] : count) parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", n, p);
  throw InputError(fmt::format("{}: its runs mix train.precision ({}); a table or claim pools the seeds of a row, "
                               "so keep each precision in a sweep of its own", source, parts));
}

namespace {

// The columns: the row's label, its heads and sizes, the runs, and per metric ours, the
// paper's and (where it means something) the difference.
void table_header(TextTable& t, bool t5, const std::vector<std::string>& metrics) {
  t.header = {""};
  t.align = "l";
  if (t5) {
    for (const char* c : {"h_k", "h", "h_v", "d_k", "d_v"}) t.header.push_back(c), t.align += 'r';
  } else {
    for (const char* c : {"heads", "d_k = d_v"}) t.header.push_back(c), t.align += 'r';
  }
  t.header.push_back("runs"), t.align += 'r';
  for (const auto& m : metrics) {
    t.header.push_back(header_of(m)), t.align += 'r';
    t.header.push_back("paper"), t.align += 'r';
    if (has_difference(m)) t.header.push_back("Δ"), t.align += 'r';
  }
}

std::string opt_cell(const std::optional<int64_t>& x) { return x ? std::to_string(*x) : std::string(); }

// d_k / d_v: the printed size, and the runs' own where they differ from it.
std::string dim_cell(const MatchedRow& r, const std::optional<int64_t>& printed, const char* key) {
  std::string s = opt_cell(printed);
  std::set<int64_t> ours;
  for (const auto& run : r.runs)
    if (run.contains("attention") && run["attention"].contains("encoder_self"))
      ours.insert(run["attention"]["encoder_self"].value(key, int64_t(0)));
  if (ours.size() == 1 && (!printed || *ours.begin() != *printed) && *ours.begin() > 0)
    s = fmt::format("{} ({})", *ours.begin(), s.empty() ? "-" : s);
  return s;
}

// One metric's cells of a row: ours, the paper's, and the difference; sets *missing when the
// row has runs but none has the metric.
void metric_cells(int table, const MatchedRow& r, const std::string& m, std::vector<std::string>& cells,
                  bool* missing) {
  const auto pub = published(r.paper, m);
  const int dec = pub && pub->text.empty() ? decimals_of(r.paper.values.at(m)) : 3;
  auto fmt_value = [&](const Aggregate& a, bool ours) {
    if (!a.text.empty()) return a.text;
    if (m == "params_per_att_layer") return fmt::format("{:.0f}", a.mean);
    if (m == "multiplies_per_att_layer") return paper_number(a.mean);
    // Ours with more digits where mini-scale differences are small: step time, and the
    // MLM/SOP accuracies the paper prints to one decimal.
    const int d = ours && m == "step_time_s"                                                ? 3
                  : ours && (m == "mlm" || m == "sop" || m == "nsp" || is_downstream_metric(table, m)) ? 2
                                                                                                : dec;
    std::string s = fmt::format("{:.{}f}", a.mean, d);
    if (a.std) s += fmt::format(" ± {:.{}f}", *a.std, std::max(d, 3));
    if (ours && a.n > 1 && !a.std) s += fmt::format(" [{}]", a.n);
    return s;
  };
  const auto ours = r.published_only ? std::nullopt : aggregate(r, m);
  if (!ours && !r.published_only) *missing = true;
  cells.push_back(ours ? fmt_value(*ours, true) : r.published_only ? "" : "—");
  cells.push_back(pub ? (pub->text.empty() ? r.paper.values.at(m) + (pub->std ? " ± " + r.paper.stddev.at(m) : "")
                                           : pub->text)
                      : "");
  if (has_difference(m))
    cells.push_back(ours && pub && ours->text.empty() && pub->text.empty()
                        ? fmt::format("{:+.{}f}", ours->mean - pub->mean, dec)
                        : "");
}

// The notes on the downstream columns: where they come from, why one may stay empty, and
// what the GLUE/SuperGLUE averages cover.
void downstream_notes(TextTable& t, int table, const std::vector<MatchedRow>& rows,
                      const std::vector<std::string>& metrics) {
  bool downstream = false, mnli_column = false, mnli_any = false;
  for (const auto& m : metrics) {
    if (!is_downstream_metric(table, m)) continue;
    downstream = true;
    const bool mnli = m == "mnli_m_dev" || m == "mnli" || m == "mnlim_acc" || m == "mnlimm_acc";
    mnli_column = mnli_column || mnli;
    for (const auto& r : rows)
      if (mnli && !r.published_only && aggregate(r, m)) mnli_any = true;
  }
  if (downstream)
    t.notes.push_back("Downstream columns: dev-set scores of `thx finetune` (each task's best evaluation, "
                      "T5's and ALBERT's protocol), read from <run>/finetune/**/<task>.json; ours to two decimals.");
  if (mnli_column && !mnli_any)
    t.notes.push_back("MNLI: no run has it; MNLI's training data is not available offline "
                      "(../shared/data/README.md), so its columns stay empty.");
  if (table != 11 && table != 12) return;
  std::set<std::string> covered;  // the benchmark's tasks some run has
  for (const auto& r : rows)
    for (const auto& run : r.runs)
      if (run.contains("downstream"))
        for (const auto& task : average_tasks(table))
          if (run["downstream"].contains(task)) covered.insert(task);
  std::string names;
  for (const auto& task : average_tasks(table))
    if (covered.count(task)) names += (names.empty() ? "" : ", ") + task;
  t.notes.push_back(fmt::format("Average (ours): T5's {} average (a task with two metrics averages them "
                                "first) over the tasks a run has{}; the paper's printed average also "
                                "covers tasks its tables do not show, so it cannot be recomputed from the "
                                "printed columns, and a gap between the two is not an error.",
                                table == 11 ? "GLUE" : "SuperGLUE", names.empty() ? "" : " (here: " + names + ")"));
}

}  // namespace

TextTable results_table(int table, const std::vector<MatchedRow>& rows, const std::string& source) {
  TextTable t;
  std::vector<PaperRow> paper;
  for (const auto& r : rows) paper.push_back(r.paper);
  const std::vector<std::string> metrics = table_metrics(table, paper);
  const bool t5 = is_t5_table(table);
  table_header(t, t5, metrics);
  bool any_missing = false;
  for (const auto& r : rows) {
    std::vector<std::string> cells = {r.paper.label};
    if (t5) {
      cells.push_back(opt_cell(r.paper.h_k)), cells.push_back(opt_cell(r.paper.h)), cells.push_back(opt_cell(r.paper.h_v));
      cells.push_back(dim_cell(r, r.paper.d_k, "d_k")), cells.push_back(dim_cell(r, r.paper.d_v, "d_v"));
    } else {
      cells.push_back(opt_cell(r.paper.h)), cells.push_back(dim_cell(r, r.paper.d_k, "d_k"));
    }
    cells.push_back(r.published_only ? "baseline" : std::to_string(r.runs.size()));
    for (const auto& m : metrics) metric_cells(table, r, m, cells, &any_missing);
    t.rows.push_back(cells);
  }
  t.caption = fmt::format("Table {} of the paper, with {} beside the published values", table, source);
  t.notes.push_back("Ours: the mean over the runs (seeds) that match the row, ± their sample standard "
                    "deviation; paper: as printed, ± the standard deviation over its four short runs; "
                    "Δ = ours − paper.");
  if (t5) {
    t.notes.push_back("d_k (d_v): the runs' own sizes where they differ from the printed ones; a "
                      "run matches a row by variant, heads and h·d_k / d_model, so scaled-down "
                      "models fill the paper's rows.");
    t.notes.push_back("ln(PPL) short / full: runs with budget 'short' (the paper's 65536 steps) "
                      "and 'full' (524288). Step time, parameters and multiplies are the runs' "
                      "own (multiplies at n = m = their inputs length); no difference is taken.");
  }
  if (any_missing) t.notes.push_back("—: no run of this sweep has the value.");
  std::vector<json> all;
  for (const auto& r : rows) all.insert(all.end(), r.runs.begin(), r.runs.end());
  const std::string precision = results_precision(all, source);
  if (precision != "fp32")
    t.notes.push_back(fmt::format("Precision: {} (train.precision; master weights and normalizing reductions fp32).",
                                  precision));
  downstream_notes(t, table, rows, metrics);
  return t;
}

}  // namespace thx
