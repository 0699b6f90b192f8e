// thx table and thx claims: a sweep's results in the paper's layouts, and the paper's claims
// checked on them (or on the published numbers).
#include <filesystem>

#include "cli/command.h"
#include "common/text_table.h"
#include "experiments/claims.h"
#include "experiments/cost_table.h"
#include "experiments/results_table.h"
#include "experiments/sweep.h"

namespace thx {
namespace {

struct TableCommand : Command {
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
    if (layout.empty() && !sweep.empty()) {
      // The table the sweep file names, from the copy thx sweep keeps in its directory.
      const std::string copy = (std::filesystem::path(sweep) / "sweep.yaml").string();
      // (Not load_sweep: the copy's relative base paths do not resolve from here.)
      if (std::filesystem::exists(copy)) {
        try {
          const YAML::Node n = YAML::LoadFile(copy)["table"];
          if (n && n.IsScalar()) layout = n.as<std::string>();
        } catch (const YAML::Exception& e) {
          throw InputError(fmt::format("{}:{}: {}", copy, e.mark.line + 1, e.msg));
        }
      }
      if (layout.empty())
        throw InputError(fmt::format("table: --layout is required ({} names no table)", copy));
    }
    if (layout.empty()) throw InputError("table: --layout is required: table1 ... table13, or costs");
    if (layout == "costs") {
      std::fputs(render(cost_table(cost_rows(paper), f), f).c_str(), stdout);
      return 0;
    }
    const int t = parse_layout(layout);
    if (sweep.empty()) throw InputError("table: --sweep DIR is required for --layout " + layout);
    const auto results = read_results(sweep);
    const auto rows = match_rows(t, paper, results);
    std::fputs(render(results_table(t, rows, sweep), f).c_str(), stdout);
    return 0;
  }
};

struct ClaimsCommand : Command {
  std::string sweep, tables = default_tables_csv();
  bool published = false;

  explicit ClaimsCommand(CLI::App& parent) {
    app = parent.add_subcommand("claims", "Check the paper's claims on a sweep's results, or on the "
                                          "published numbers: holds / fails / not enough data");
    app->add_option("--sweep", sweep, "sweep directory (holds results.jsonl)")->type_name("DIR");
    app->add_flag("--published", published, "check the paper's own numbers (tables.csv)");
    app->add_option("--tables", tables, "the paper's tables.csv")->capture_default_str();
  }

  int run() override {
    if (published == !sweep.empty())
      throw InputError("claims: give exactly one of --sweep DIR and --published");
    const auto paper = load_paper_rows(tables);
    if (published) {
      std::fputs(render_claims(evaluate_claims(paper, published_cells(paper)), "the published numbers (" + tables + ")").c_str(), stdout);
    } else {
      const auto results = read_results(sweep);
      std::fputs(render_claims(evaluate_claims(paper, sweep_cells(paper, results)), sweep).c_str(), stdout);
    }
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> make_table_command(CLI::App& parent) {
  return std::make_unique<TableCommand>(parent);
}
std::unique_ptr<Command> make_claims_command(CLI::App& parent) {
  return std::make_unique<ClaimsCommand>(parent);
}

}  // namespace thx
