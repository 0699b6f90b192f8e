// results_table.h: `thx table`, the paper's tables filled with a sweep's results, the
// published value beside each cell.
//
// A run reproduces a printed row when its attention matches the row's in every layer type:
// the same variant, the same h_k, h and h_v, the same dynamic projections, and the same key
// and value widths relative to the model (h_k·d_k / d_model and h_v·d_v / d_model equal the
// paper's, with d_model = 768). So a mini sweep at d_model 192 fills "multi-head, h = 6,
// d_k = 128" with its h = 6, d_k = 32 runs. Where the paper prints a row twice the runs fill
// both; the "[Raffel et al., 2019]" rows are published baselines and are never filled.
//
// Metrics of a result (one line of results.jsonl): ln_ppl_65536 and ln_ppl_524288 are the
// final held-out ln(PPL) of runs with budget "short" (or none) and "full"; step_time_s,
// params_per_att_layer and multiplies_per_att_layer come from the run; any other metric
// (squad11_dev_f1, mnli_m_dev, ...) is read under its tables.csv name when a fine-tuning run
// has added it. A cell is the mean over the matching runs, with the sample standard deviation
// over seeds when there are two or more. Cells without runs are marked, never filled.
#pragma once
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "common/text_table.h"
#include "experiments/paper_tables.h"

namespace thx {

struct Aggregate {
  int n = 0;         // runs (seeds) behind the value
  double mean = 0;
  std::optional<double> std;  // sample standard deviation, n >= 2; for published values the
                              // printed standard deviation, where there is one
  std::string text;           // non-numeric value ("various"), else empty
};

// One printed row and the results that reproduce it.
struct MatchedRow {
  PaperRow paper;
  std::vector<nlohmann::json> runs;
  bool published_only = false;  // a baseline row no run can fill
};

// The one train.precision of a sweep's results (runs from before the key count as fp32); an
// InputError naming `source` when they mix precisions, whose runs no table or claim may pool.
std::string results_precision(const std::vector<nlohmann::json>& results, const std::string& source);

// "table1" ... "table13" -> 1 ... 13; anything else is an InputError naming the layouts.
int parse_layout(const std::string& name);
// The table a sweep directory's sweep.yaml names (its `table:`); InputError if it names none.
std::string sweep_table_layout(const std::string& sweep_dir);

// The printed rows of `table` (in order), each with the results that match it.
std::vector<MatchedRow> match_rows(int table, const std::vector<PaperRow>& paper,
                                   const std::vector<nlohmann::json>& results);

// A note naming the results that fill no row of `table` (up to five, with the model, variant,
// heads and key width that kept them out), or "" when every result is in a row; `thx table`
// prints it under the table, so that no run is left out without a word.
std::string unmatched_note(int table, const std::vector<MatchedRow>& rows, const std::vector<nlohmann::json>& results);

// The value of one metric over a row's runs; nullopt when no run has it.
std::optional<Aggregate> aggregate(const MatchedRow& row, const std::string& metric);
// The published value of one metric (with its printed standard deviation, if any).
std::optional<Aggregate> published(const PaperRow& row, const std::string& metric);

// The paper's layout of `table` with our value, the published value and the difference.
TextTable results_table(int table, const std::vector<MatchedRow>& rows, const std::string& source);

// Downstream columns (SQuAD, MNLI, the appendix's per-task columns, Tables 5-7): the value a
// run's "downstream" block ({task: {metric: percent}}, from `thx finetune`) gives for a printed
// metric of a table; nullopt when the run lacks a task it needs. score_average of Tables 11
// and 12 is T5's GLUE / SuperGLUE average over the tasks present; Tables 5-6's average is
// ALBERT's mean of its five downstream columns.
std::optional<double> downstream_value(int table, const std::string& metric, const nlohmann::json& run);
bool is_downstream_metric(int table, const std::string& metric);

// Metrics of a table in the paper's column order.
std::vector<std::string> table_metrics(int table, const std::vector<PaperRow>& paper);

}  // namespace thx
