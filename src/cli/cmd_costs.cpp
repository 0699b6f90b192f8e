// thx costs: the cost table of the paper's T5 attention configurations.
#include "cli/command.h"
#include "common/text_table.h"
#include "experiments/cost_table.h"

namespace thx {
namespace {

struct CostsCommand : Command {
  bool computes() const override { return false; }  // (command.h)
  std::string format = "markdown", tables = default_tables_csv();
  int64_t d_model = 768, n = 512;

  explicit CostsCommand(CLI::App& parent) {
    app = parent.add_subcommand(
        "costs", "Parameters and multiplies of one attention layer for every configuration of "
                 "the paper's Tables 1-4 and 8-9, beside the printed values");
    app->add_option("--format", format, "markdown | csv | latex")->capture_default_str();
    app->add_option("--tables", tables, "the paper's tables.csv")->capture_default_str();
    app->add_option("--d-model", d_model, "d_X = d_M = d_Y")->capture_default_str()
        ->check(thx::positive_number());
    app->add_option("--n", n, "n = m, positions")->capture_default_str()->check(thx::positive_number());
  }

  int run() override {
    const TableFormat f = parse_table_format(format);
    const auto rows = cost_rows(load_paper_rows(tables), d_model, n);
    std::fputs(render(cost_table(rows, f, d_model, n), f).c_str(), stdout);
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> make_costs_command(CLI::App& parent) {
  return std::make_unique<CostsCommand>(parent);
}

}  // namespace thx
