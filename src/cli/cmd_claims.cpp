// thx claims: the paper's claims checked on a sweep's results or on the published numbers
// (experiments/claims.h).
#include "cli/command.h"
#include "experiments/claims.h"
#include "experiments/results_table.h"
#include "experiments/sweep.h"

namespace thx {
namespace {

struct ClaimsCommand : Command {
  bool computes() const override { return false; }  // (command.h)
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
    std::vector<nlohmann::json> results;
    if (!published) results = read_results(sweep), results_precision(results, sweep);  // one precision
    const auto cells = published ? published_cells(paper) : sweep_cells(paper, results);
    const std::string source = published ? "the published numbers (" + tables + ")" : sweep;
    std::fputs(render_claims(evaluate_claims(paper, cells), source).c_str(), stdout);
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> make_claims_command(CLI::App& parent) {
  return std::make_unique<ClaimsCommand>(parent);
}

}  // namespace thx
