// cli.cpp: the thx command line (cli_main, cli/command.h). Parses the command line, runs one
// subcommand, and turns failures into exit codes: 0 success, 2 bad input (one line naming the
// file, key or flag and what is allowed; nothing written), 1 anything else. main.cpp is the
// binary around it; the tests run it in forked copies of their own process (tests/cli/forked_cli.h).
#include <CLI/CLI.hpp>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <regex>

#include <nlohmann/json.hpp>

#include "attention/fused.h"
#include "attention/kernels.h"
#include "cli/command.h"
#include "common/host_memory.h"
#include "common/log.h"
#include "common/provenance.h"
#include "common/runtime.h"
#include "common/signals.h"

namespace {

// For "A subcommand is required": the command that wanted one, the word given in its place (if
// any) and the subcommands it has, e.g. "score: 'glue' is not a subcommand; one of: squad".
std::string missing_subcommand(CLI::App& app, int argc, char** argv) {
  CLI::App* cur = &app;
  std::string path, given;
  for (int i = 1; i < argc; ++i) {
    const std::string tok = argv[i];
    if (!tok.empty() && tok[0] == '-') {  // an option: skip its value if it takes one
      const CLI::Option* o = cur->get_option_no_throw(tok.substr(0, tok.find('=')));
      if (o && o->get_expected_min() > 0 && tok.find('=') == std::string::npos) ++i;
      continue;
    }
    CLI::App* sub = nullptr;
    for (CLI::App* s : cur->get_subcommands({}))
      if (s->check_name(tok)) sub = s;
    if (!sub) {
      given = tok;
      break;
    }
    cur = sub, path += (path.empty() ? "" : " ") + tok;
  }
  std::vector<std::string> names;
  for (const CLI::App* s : cur->get_subcommands({})) names.push_back(s->get_name());
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  const std::string where = path.empty() ? "" : path + ": ";
  if (given.empty()) return fmt::format("{}a subcommand is required, one of: {}", where, list);
  return fmt::format("{}'{}' is not a subcommand; one of: {}", where, given, list);
}

// Appends to the help of every subcommand, nested ones too, that thx's own options go there.
void name_global_options(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands({})) {
    const std::string footer = sub->get_footer();
    sub->footer(footer + (footer.empty() ? "" : "\n") +
                "Global options, before or after the subcommand: --threads N, --log-level LEVEL, --device DEVICE, "
                "--th-path PATH, --version "
                "(thx --help)");
    name_global_options(*sub);
  }
}

// Every subcommand, in the order --help lists them.
std::vector<std::unique_ptr<thx::Command>> make_commands(CLI::App& app) {
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
  commands.push_back(thx::make_predict_command(app));
  commands.push_back(thx::make_score_command(app));
  return commands;
}

// "Could not convert: --n = 1.5" (CLI11) in thx's words: "--n: 1.5 is invalid: must be a whole
// number", the type read from the option as the parsed subcommands (deepest first) declare it.
std::string conversion_error(CLI::App& app, const std::string& what) {
  static const std::regex conversion("^Could not convert: (\\S+) = (.*)$");
  std::smatch m;
  if (!std::regex_match(what, m, conversion)) return what;
  std::vector<CLI::App*> chain{&app};
  while (!chain.back()->get_subcommands().empty()) chain.push_back(chain.back()->get_subcommands().front());
  std::string type;
  for (auto it = chain.rbegin(); it != chain.rend() && type.empty(); ++it)
    if (const CLI::Option* o = (*it)->get_option_no_throw(m[1].str())) type = o->get_type_name();
  type = type.substr(0, type.find(':'));
  const std::string want = type == "INT"     ? "a whole number"
                           : type == "UINT"  ? "a whole number >= 0"
                           : type == "FLOAT" ? "a number"
                           : type.empty()    ? "a value of the option's type (thx --help)"
                                             : type;
  return fmt::format("{}: {} is invalid: must be {}", m[1].str(), m[2].str(), want);
}

// CLI::Range's "--x: Value 2 not in range 0.500000 to 1.000000" in the words of thx's own checks:
// "--x: 2 is invalid: must be in [0.5, 1]" (an open end, printed as a number of 16 or more
// digits: "must be >= 0"). Other messages are left as they are: a file name may hold "1.0".
std::string range_error(const std::string& what) {
  static const std::regex range("^(\\S+): Value (.*) not in range (\\S+) to (\\S+)$");
  std::smatch m;
  if (!std::regex_match(what, m, range)) return what;
  const double lo = std::strtod(m[3].str().c_str(), nullptr), hi = std::strtod(m[4].str().c_str(), nullptr);
  if (hi >= 1e15) return fmt::format("{}: {} is invalid: must be >= {}", m[1].str(), m[2].str(), lo);
  return fmt::format("{}: {} is invalid: must be in [{}, {}]", m[1].str(), m[2].str(), lo, hi);
}

// A parse error as one line in the house format (CLI11 prints two, and a range check's limits
// in full); exit 2. --help and the like exit as CLI11 says.
int parse_error(CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  if (e.get_exit_code() == 0) return app.exit(e);
  std::string what = e.what();
  what = what.substr(0, what.find('\n'));
  if (what.rfind("A subcommand is required", 0) == 0) what = missing_subcommand(app, argc, argv);
  what = conversion_error(app, what);
  what = range_error(what);
  // "--n: 1 required INT:POSITIVE missing" (an option given without its value, "--n=").
  what = std::regex_replace(what, std::regex("^(--\\S+): [0-9]+ required (\\S+) missing$"),
                            "$1: a value is required ($2)");
  std::cerr << "thx: error: " << what << " (thx --help lists the options)\n";
  return 2;
}

// The one line of a failure, on stderr; exit `code`. Under torchrun it also goes to the error
// file torchrun names (TORCHELASTIC_ERROR_FILE, the format of torch.distributed.elastic's
// error handler), so that torchrun prints it as the root cause at the end of its report instead
// of a link, after its own traceback rather than buried above it.
int fail(int code, const std::string& line) {
  std::cerr << line << "\n";
  if (const char* file = std::getenv("TORCHELASTIC_ERROR_FILE"); file && *file) {
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    std::ofstream(file) << nlohmann::json{{"message", line},
                                          {"timestamp", std::chrono::duration_cast<std::chrono::seconds>(now).count()}}
                               .dump();
  }
  return code;
}

// The parsed subcommand's run: bad input is one line and exit 2; a failed run, exit 1.
int run_parsed(const std::vector<std::unique_ptr<thx::Command>>& commands) {
  // The rank prefix is known once the run joined its group: read when a failure comes.
  const auto error = [] { return "thx: error: " + thx::error_prefix(); };
  const auto internal = [] { return "thx: internal error: " + thx::error_prefix(); };
  try {
    thx::aten_parts();  // (a bad THX_ATEN is one line before any work)
    if (const std::string bad = thx::kernels::kernels_env_error(); !bad.empty()) throw thx::InputError(bad);
    if (const std::string bad = thx::bf16_core_env_error(); !bad.empty()) throw thx::InputError(bad);
    if (const std::string bad = thx::host_memory_env_error(); !bad.empty()) throw thx::InputError(bad);
    if (const std::string bad = thx::omp_num_threads_env_error(); !bad.empty()) throw thx::InputError(bad);
    thx::guard_host_memory();  // the machine's memory running out: one line, not Linux's SIGKILL
    for (auto& c : commands)
      if (c->app->parsed()) return c->run();
  } catch (const thx::Interrupted& e) {  // not an error: the shell sees the signal (128 + N)
    std::cerr << e.what() << "\n";
    return 128 + e.signal;
  } catch (const thx::ConfigError& e) {  // a flag validated like a config key
    return fail(2, error() + e.line());
  } catch (const thx::InputError& e) {
    return fail(2, error() + e.what());
  } catch (const thx::RunError& e) {
    return fail(1, error() + e.what());
  } catch (const c10::OutOfMemoryError& e) {  // outside a training step or evaluation (they say more)
    const std::string what = e.what_without_backtrace();
    return fail(2, error() + "out of memory: " + what.substr(0, what.find('\n')));
  } catch (const c10::Error& e) {
    return fail(1, internal() + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return fail(1, internal() + e.what());
  }
  return 1;
}

}  // namespace

int thx::cli_main(int argc, char** argv) {
  // A write past the file-size limit (ulimit -f) then fails with EFBIG, reported as one line
  // like a full disk, instead of killing the process with SIGXFSZ mid-checkpoint.
  std::signal(SIGXFSZ, SIG_IGN);
  thx::install_crash_report();
  thx::set_command_line(argc, argv);          // provenance (common/provenance.h)
  thx::stop_at_once_with_a_line("thx");       // a signal says so (its command's name once parsed)
  CLI::App app{"thx: Talking-Heads Attention (Shazeer et al., 2020) experiments on LibTorch.\n"
               "Run 'thx SUBCOMMAND --help' for the options of each subcommand."};
  app.require_subcommand(1);
  app.set_version_flag("--version", thx::version_line(), "thx's version and the git commit it was built from");
  std::string level = "info";
  app.add_option("--log-level", level, "debug | info | warn | error | off")
      ->check(CLI::IsMember({"debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  int64_t threads = 0;
  app.add_option("--threads", threads,
                 "intra-op CPU threads (0: OMP_NUM_THREADS where set, else every core this process may run on; "
                 "under torchrun, cores / LOCAL_WORLD_SIZE)")
      ->check(thx::non_negative_number())
      ->check(CLI::Validator(
          [](std::string& value) {
            const double v = std::strtod(value.c_str(), nullptr);
            return v <= double(thx::kMaxThreads)
                       ? std::string()
                       : fmt::format("{} is invalid: at most {} (this process may run on {} of this machine's "
                                     "cores; past them threads only wait on each other)",
                                     value, thx::kMaxThreads, thx::available_cores());
          },
          ""))
      ->capture_default_str();
  std::string device = "auto";
  app.add_option("--device", device, "cpu | cuda | auto (CUDA when present); a config's train.device overrides it")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  std::string th_path = "tiled";
  CLI::Option* th_path_option =
      app.add_option("--th-path", th_path, "on a GPU, the talking-heads family's path: tiled (blocks of query rows, "
                                           "cuBLAS's products, thx's row kernels between them: the default), flash "
                                           "(nothing of size [b,h,n,m] kept: the least memory) or another, each "
                                           "described in docs/gpu.md, \"Talking-heads paths\"")
      ->check(CLI::IsMember({"fused", "tiled", "tiled-fma", "tiled-aten", "tiled-gemm", "flash", "folded", "gemm",
                             "gemm-aten", "batched"}))
      ->capture_default_str();
  // The global options above are also taken after the subcommand (unknown to it, they fall
  // through to thx's own), and each subcommand's help names them.
  app.fallthrough();
  const auto commands = make_commands(app);
  name_global_options(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return parse_error(app, e, argc, argv);
  }
  // Parsed, so help, --version and a bad command line have ended without a second start; a bad
  // OMP_NUM_THREADS is refused below in this first one (libgomp, loaded again, would repeat its
  // own line about it).
  for (const auto& c : commands)
    if (c->app->parsed() && c->computes() && thx::omp_num_threads_env() >= 0)
      thx::reexec_with_thread_environment(argv);
  thx::set_log_level(level);
  thx::configure_runtime(threads);
  thx::set_device_request(device);
  thx::set_th_path(th_path, th_path_option->count() > 0);
  for (const auto& c : commands)
    if (c->app->parsed()) thx::stop_at_once_with_a_line("thx " + c->app->get_name());
  return run_parsed(commands);
}
