// main.cpp: the thx binary. Parses the command line, runs one subcommand, and turns failures
// into exit codes: 0 success, 2 bad input (one line naming the file, key or flag and what is
// allowed; nothing written), 1 anything else.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/command.h"
#include "common/log.h"
#include "common/runtime.h"

int main(int argc, char** argv) {
  thx::reexec_with_thread_environment(argv);  // see common/runtime.h
  CLI::App app{"thx: Talking-Heads Attention (Shazeer et al., 2020) experiments on LibTorch.\n"
               "Run 'thx SUBCOMMAND --help' for the options of each subcommand."};
  app.require_subcommand(1);
  std::string level = "info";
  app.add_option("--log-level", level, "debug | info | warn | error | off")
      ->check(CLI::IsMember({"debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  int64_t threads = 0;
  app.add_option("--threads", threads, "intra-op CPU threads (0: every core; under torchrun, cores / LOCAL_WORLD_SIZE)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();

  std::vector<std::unique_ptr<thx::Command>> commands;
  commands.push_back(thx::make_costs_command(app));
  commands.push_back(thx::make_probe_command(app));
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks; results go to docs/benchmarks.md");
  bench->require_subcommand(1);
  commands.push_back(thx::make_bench_attention_command(*bench));
  commands.push_back(thx::make_bench_train_command(*bench));
  commands.push_back(thx::make_spm_train_command(app));
  commands.push_back(thx::make_prepare_command(app));
  commands.push_back(thx::make_pretrain_command(app));
  commands.push_back(thx::make_step_probe_command(app));
  commands.push_back(thx::make_sweep_command(app));
  commands.push_back(thx::make_table_command(app));
  commands.push_back(thx::make_claims_command(app));
  commands.push_back(thx::make_finetune_command(app));
  commands.push_back(thx::make_eval_command(app));
  commands.push_back(thx::make_score_command(app));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help, or the parse error
    return code == 0 ? 0 : 2;
  }
  thx::set_log_level(level);
  thx::configure_runtime(threads);
  try {
    for (auto& c : commands)
      if (c->app->parsed()) return c->run();
  } catch (const thx::ConfigError& e) {  // a flag validated like a config key
    std::cerr << "thx: error: " << thx::error_prefix() << e.key << ": " << e.what() << "\n";
    return 2;
  } catch (const thx::InputError& e) {
    std::cerr << "thx: error: " << thx::error_prefix() << e.what() << "\n";
    return 2;
  } catch (const thx::RunError& e) {
    std::cerr << "thx: error: " << thx::error_prefix() << e.what() << "\n";
    return 1;
  } catch (const c10::Error& e) {
    std::cerr << "thx: internal error: " << thx::error_prefix() << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "thx: internal error: " << thx::error_prefix() << e.what() << "\n";
    return 1;
  }
  return 1;
}
