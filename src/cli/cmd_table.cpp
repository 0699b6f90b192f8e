// thx table: a sweep's results in the paper's layouts (experiments/results_table.h).
#include "cli/command.h"
#include "common/log.h"
#include "common/text_table.h"
#include "experiments/cost_table.h"
#include "experiments/results_table.h"
#include "experiments/sweep.h"

namespace thx {
namespace {

struct TableCommand : Command {
  bool computes() const override { return false; }  // (command.h)
  std::string sweep, layout, format = "markdown", tables = default_tables_csv();

  explicit TableCommand(CLI::App& parent) {
    app = parent.add_subcommand("table", "The paper's Tables 1-13 filled from a sweep's results, "
                                         "the published value and the difference beside each cell");
    app->add_option("--sweep", sweep, "sweep directory (holds results.jsonl)")->type_name("DIR");
    app->add_option("--layout", layout, "table1 ... table13, or costs (default: the sweep's `table:`)");
    app->add_option("--format", format, "markdown | csv | latex")->capture_default_str();
    app->add_option("--tables", tables, "the paper's tables.csv")->capture_default_str();
  }

  int run() override {
    const TableFormat f = parse_table_format(format);
    const auto paper = load_paper_rows(tables);
    if (layout.empty() && !sweep.empty()) layout = sweep_table_layout(sweep);
    if (layout.empty() && sweep.empty())
      throw InputError("table: --sweep DIR is required (a sweep's directory, with results.jsonl), or --layout costs "
                       "(the paper's cost table, no sweep needed)");
    if (layout.empty()) throw InputError("table: --layout is required: table1 ... table13, or costs");
    if (layout == "costs") {
      std::fputs(render(cost_table(cost_rows(paper), f), f).c_str(), stdout);
      return 0;
    }
    if (sweep.empty()) throw InputError("table: --sweep DIR is required for --layout " + layout);
    const int t = parse_layout(layout);
    const auto results = read_results(sweep);
    results_precision(results, sweep);  // one precision per table
    const auto rows = match_rows(t, paper, results);
    TextTable table = results_table(t, rows, sweep);
    if (const std::string left = unmatched_note(t, rows, results); !left.empty()) {
      table.notes.push_back(left);
      log("table")->warn("{}", left);  // on stderr too: CSV has no notes, and stdout may be a file
    }
    std::fputs(render(table, f).c_str(), stdout);
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> make_table_command(CLI::App& parent) {
  return std::make_unique<TableCommand>(parent);
}

}  // namespace thx
