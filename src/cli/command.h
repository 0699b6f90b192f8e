// command.h: how a subcommand plugs into the thx binary.
//
// Each subcommand lives in its own cmd_*.cpp: it declares its flags on a CLI11 subcommand,
// and run() only validates, builds and calls into experiments/training/eval. Bad input
// throws InputError (exit 2, one line); cli_main (cli.cpp) owns the error reporting.
#pragma once
#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "common/config_tree.h"
#include "common/schema.h"

namespace thx {

// The thx command line, as the binary runs it (main.cpp): parses argv, re-executes thx with the
// thread environment where the subcommand computes and it is not set yet (Command::computes),
// runs the subcommand, and returns the exit code (cli.cpp says which).
int cli_main(int argc, char** argv);

struct Command {
  virtual ~Command() = default;
  virtual int run() = 0;
  // Whether the command computes: the thread pools' environment matters to it, so cli_main
  // re-executes thx with it once parsed (common/runtime.h). Those that only read and format
  // (table, claims, costs) start without that second load of LibTorch, as help and --version do.
  virtual bool computes() const { return true; }
  CLI::App* app = nullptr;
};

std::unique_ptr<Command> make_costs_command(CLI::App& parent);
std::unique_ptr<Command> make_probe_command(CLI::App& parent);
// `thx bench attention` and `thx bench train`, added to the `bench` group cli_main creates.
std::unique_ptr<Command> make_bench_attention_command(CLI::App& bench);
std::unique_ptr<Command> make_bench_train_command(CLI::App& bench);
std::unique_ptr<Command> make_spm_train_command(CLI::App& parent);
std::unique_ptr<Command> make_prepare_command(CLI::App& parent);
std::unique_ptr<Command> make_pretrain_command(CLI::App& parent);
std::unique_ptr<Command> make_step_probe_command(CLI::App& parent);
std::unique_ptr<Command> make_sweep_command(CLI::App& parent);
std::unique_ptr<Command> make_table_command(CLI::App& parent);
std::unique_ptr<Command> make_claims_command(CLI::App& parent);
std::unique_ptr<Command> make_finetune_command(CLI::App& parent);
std::unique_ptr<Command> make_eval_command(CLI::App& parent);
std::unique_ptr<Command> make_predict_command(CLI::App& parent);
std::unique_ptr<Command> make_score_command(CLI::App& parent);

// --config (repeatable, merged in order), --set KEY=VALUE (repeatable), --dump-config.
struct ConfigOptions {
  std::vector<std::string> files, sets;
  bool dump = false;

  void add_to(CLI::App* app);
  // Merge the files and overrides over `defaults_yaml`.
  ConfigTree tree(const std::string& defaults_yaml = "") const;
};

// --dump-config: print the resolved YAML; the command's exit code (0).
int dump_config(const std::string& yaml);

// Checks of numeric flags in thx's words: "--n: 0 is invalid: must be > 0", and of a word "--n: abc
// is invalid: must be a number > 0". (CLI11's PositiveNumber and NonNegativeNumber say "Value 0
// not in range 0 to max" of both.) Named as CLI11's are, so --help still shows INT:POSITIVE.
const CLI::Validator& positive_number();
const CLI::Validator& non_negative_number();

// The bench commands' options that choose or tune a GPU path of talking-heads (--tiled,
// --batched, --fma, --th-*): `name`, given, is refused in one line (InputError) where the device
// is the CPU, which runs talking-heads on thx's CPU cores and would ignore it.
void refuse_gpu_only_option(const std::string& name, bool on_gpu);

}  // namespace thx
