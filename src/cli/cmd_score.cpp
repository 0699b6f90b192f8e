// thx score squad: a predictions file scored with SQuAD's official rules (eval/score_files.h).
#include "cli/command.h"
#include "eval/score_files.h"

namespace thx {
namespace {

struct ScoreCommand : Command {
  std::string data, predictions, na_probs;
  bool as_json = false;

  explicit ScoreCommand(CLI::App& parent) {
    app = parent.add_subcommand("score", "Score a predictions file with a task's official rules");
    auto* squad = app->add_subcommand("squad", "SQuAD v1.1 or v2.0 (read from the data file) EM and F1");
    squad->add_option("--data", data, "the SQuAD dev JSON")->type_name("FILE")->required();
    squad->add_option("--predictions", predictions, "{question id: answer} JSON")->type_name("FILE")->required();
    squad->add_option("--na-probs", na_probs, "v2.0: {question id: no-answer probability}, for the best threshold")
        ->type_name("FILE");
    squad->add_flag("--json", as_json, "print the scores as JSON");
    app->require_subcommand(1);
  }

  int run() override {
    const ScoreReport r = score_squad_files(data, predictions, na_probs, as_json);
    std::fputs(r.out.c_str(), stdout);
    std::fputs(r.warnings.c_str(), stderr);
    return 0;
  }
};
}  // namespace

std::unique_ptr<Command> make_score_command(CLI::App& parent) { return std::make_unique<ScoreCommand>(parent); }

}  // namespace thx
