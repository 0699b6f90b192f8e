// thx predict: a model's output for lines of text (eval/predict.h).
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/command.h"
#include "common/fs.h"
#include "common/runtime.h"
#include "data/corpus.h"
#include "eval/finetune.h"
#include "eval/predict.h"

namespace thx {
namespace {

struct PredictCommand : Command {
  ConfigOptions config;
  std::string checkpoint, task, input = "-", out = "-", tokenizer;
  int64_t max_length = 0;

  explicit PredictCommand(CLI::App& parent) {
    app = parent.add_subcommand(
        "predict",
        "A model's output for lines of text: a fine-tuned model's predictions (--task, with the fine-tuning "
        "--config, as thx eval), or a pretrained T5's fill of the <extra_id_N> spans of each line");
    app->footer(task_help());
    config.add_to(app);
    app->add_option("--checkpoint", checkpoint,
                    "fine-tuned parameters (model.h5, <task>.h5, <task>-best.h5, a finetune directory), or "
                    "without --task a pretraining checkpoint or run directory")
        ->type_name("PATH");
    app->add_option("--task", task, "the fine-tuned task; each line holds its text fields, tab-separated");
    app->add_option("--input", input, "text file, one example per line (-: stdin)")->capture_default_str();
    app->add_option("--out", out, "output file, one line per input line (-: stdout)")->capture_default_str();
    app->add_option("--tokenizer", tokenizer,
                    "without --task: the SentencePiece model (default: the one the pretraining data recorded)");
    app->add_option("--max-length", max_length,
                    "without --task: target tokens to decode at most (default: the pretraining data.targets_length)")
        ->check(thx::positive_number());
  }

  std::vector<std::string> read_lines(std::string* where) const {
    std::vector<std::string> lines;
    std::ifstream file;
    if (input != "-") {
      file.open(input);
      if (!file) throw InputError(fmt::format("{}: cannot read the input (--input)", input));
    }
    std::istream& in = input == "-" ? std::cin : file;
    *where = input == "-" ? "stdin" : input;
    for (std::string line; std::getline(in, line);) {
      if (!valid_utf8(line))  // as a corpus's lines (data/corpus.h); the tokenizer was trained on UTF-8 text
        throw InputError(fmt::format("{}:{}: not valid UTF-8; thx predict reads UTF-8 text", *where,
                                     lines.size() + 1));
      lines.push_back(line);
    }
    return lines;
  }

  void write(const std::vector<std::string>& predictions) const {
    std::string text;
    for (const auto& p : predictions) text += p + "\n";
    if (out == "-") {
      std::fputs(text.c_str(), stdout);
    } else {
      write_file_atomic(out, text);
    }
  }

  int run() override {
    if (checkpoint.empty()) throw InputError("predict: --checkpoint PATH is required");
    if (!std::filesystem::exists(checkpoint)) throw InputError(fmt::format("{}: no such checkpoint", checkpoint));
    if (out != "-") check_output_file(out, "--out");  // before any model is loaded
    if (task.empty()) {
      if (!config.files.empty() || !config.sets.empty())
        throw InputError("predict: --config and --set go with --task (a fine-tuned model); a pretrained T5 needs "
                         "only --checkpoint");
      const Pretrained p = load_pretrained(checkpoint);
      FinetuneConfig f;
      f.tokenizer = tokenizer;
      const std::string tok = tokenizer_path(f, p.config);
      if (!std::filesystem::is_regular_file(tok)) throw InputError(fmt::format("{}: no such tokenizer model", tok));
      std::string where;
      const auto lines = read_lines(&where);
      const auto filled =
          fill_spans(p, tok, lines, max_length > 0 ? max_length : p.config.data.targets_length, where);
      write(filled);
      return 0;
    }
    if (!tokenizer.empty() || max_length > 0)
      throw InputError("predict: --tokenizer and --max-length go without --task (a pretrained T5); a fine-tuned "
                       "model's tokenizer is its recipe's finetune.tokenizer");
    const ConfigTree tree = config.tree();
    const FinetuneRunConfig c = load_finetune_config(tree);
    if (config.dump) return dump_config(cfg::to_yaml(c));
    const Pretrained p = load_pretrained(c.finetune.pretrained);
    std::string where;
    const auto lines = read_lines(&where);
    write(tree.told([&] { return predict_task(c, p, checkpoint, task, lines, where); }));  // (as eval's)
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> make_predict_command(CLI::App& parent) { return std::make_unique<PredictCommand>(parent); }

}  // namespace thx
