// paper_tables.h: the paper's published numbers (data/paper/tables.csv) as rows, and the
// attention configuration each T5 row stands for.
//
// tables.csv has one line per (table, row, metric); load_paper_rows() groups them back into
// printed rows. t5_attention() maps a row label of Tables 1-4 and 8-10 ("talking-heads",
// "dyn. proj. P_Xl", "TH-enc-self", ...) to thx attention settings.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "attention/config.h"

namespace thx {

struct PaperRow {
  int64_t table = 0, row = 0;
  std::string label;  // as printed, e.g. "dyn. proj. P_Xl"
  std::optional<int64_t> h_k, h, h_v, d_k, d_v;
  std::map<std::string, std::string> values;  // metric -> value as printed ("1.611e9")
  std::map<std::string, std::string> stddev;  // metric -> stddev as printed
  std::map<std::string, std::string> notes;   // metric -> note
  std::vector<std::string> metric_order;      // metrics in the printed column order
};

// The copy shipped with thx: <source>/data/paper/tables.csv.
std::string default_tables_csv();

// Rows in file order. Throws InputError (file:line) for a malformed file.
std::vector<PaperRow> load_paper_rows(const std::string& csv_path);

// Attention settings of one T5 row: `all` for every layer, except the layer types in
// `by_layer` ("encoder_self", "decoder_self", "encoder_decoder"; Tables 4 and 10).
struct PaperAttention {
  AttentionConfig all;
  std::map<std::string, AttentionConfig> by_layer;
};

// Throws InputError for a label that is not a T5 attention configuration.
PaperAttention t5_attention(const PaperRow& row);

// Tables 5-7 (ALBERT, BERT): the model type ("albert" for 5 and 6, "bert" for 7) and the
// attention of every layer ("Multi-head", "Talking-heads", "Logit-project-only",
// "Weight-project-only"; heads h, d_k = d_v). InputError for another label.
std::string encoder_table_model(int64_t table);
AttentionConfig encoder_attention(const PaperRow& row);

}  // namespace thx
