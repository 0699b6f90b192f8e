// cost_table.h: `thx costs`, the parameters and multiplies of one attention layer for every
// configuration of the paper's T5 tables (1-4, 8-9), beside the printed values.
//
// Parameters are counted from an instantiated layer; multiplies follow section 5 (see
// attention/costs.h for the conventions). Configurations that repeat across tables are
// printed once, with the tables they appear in.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "common/text_table.h"
#include "experiments/paper_tables.h"

namespace thx {

struct CostRow {
  std::string label;           // the first printed label of this configuration
  PaperAttention attention;
  std::vector<std::string> appears;  // "1.2" = table 1, row 2
  std::optional<int64_t> params;     // unset for the per-layer-type rows ("various")
  std::optional<double> multiplies;  // paper convention
  std::optional<double> multiplies_full;
  std::string paper_params, paper_multiplies;  // as printed; "" where printed as "various"
};

// Rows of Tables 1-4 and 8-9 at d_model, n = m.
std::vector<CostRow> cost_rows(const std::vector<PaperRow>& paper, int64_t d_model = 768,
                               int64_t n = 512);

// "1.611e9": the paper's four significant digits.
std::string paper_number(double x);

TextTable cost_table(const std::vector<CostRow>& rows, TableFormat format, int64_t d_model = 768,
                     int64_t n = 512);

}  // namespace thx
