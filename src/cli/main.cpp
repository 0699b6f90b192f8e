// main.cpp: the thx binary. Parses the command line, runs one subcommand, and turns failures
// into exit codes: 0 success, 2 bad input (one line naming the file, key or flag and what is
// allowed; nothing written), 1 anything else.
#include <CLI/CLI.hpp>

#include <iostream>
#include <regex>

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

  std::string device = "auto";
  app.add_option("--device", device, "cpu | cuda | auto (CUDA when present); a config's train.device overrides it")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
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
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    // One line in the house format (CLI11 prints two, and a range check's limits in full).
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));
    what = std::regex_replace(what, std::regex("[0-9]{16,}(\\.[0-9]+)?"), "max");  // a range's open end
    what = std::regex_replace(what, std::regex("([0-9])\\.0+\\b"), "$1");
    std::cerr << "thx: error: " << what << " (thx --help lists the options)\n";
    return 2;
  }
  thx::set_log_level(level);
  thx::configure_runtime(threads);
  thx::set_device_request(device);
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
