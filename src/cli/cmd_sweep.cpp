// thx sweep: run a YAML sweep (experiments/sweep.h), each run a `thx pretrain` process.
#include <unistd.h>

#include "cli/command.h"
#include "common/runtime.h"
#include "experiments/sweep.h"

namespace thx {
namespace {

struct SweepCommand : Command {
  std::string config, out;
  int64_t jobs = 1, ranks_per_run = 1;
  double memory_gb = 0;
  bool dry_run = false;

  explicit SweepCommand(CLI::App& parent) {
    app = parent.add_subcommand("sweep", "Run a YAML sweep: every run not finished yet, several at "
                                         "once; interrupted runs resume, finished ones are skipped");
    app->add_option("--config", config, "sweep file (configs/paper/, configs/mini/)")
        ->required()->type_name("FILE");
    app->add_option("--jobs", jobs, "runs at once; the cores are shared among them")
        ->check(thx::positive_number())->capture_default_str();
    app->add_option("--ranks-per-run", ranks_per_run,
                    "data-parallel ranks per run, each run launched under torchrun (its own rendezvous port)")
        ->check(thx::positive_number())->capture_default_str();
    app->add_option("--memory-gb", memory_gb,
                    "memory the runs share, in GB (default: this machine's, or its cgroup's limit; a GPU's own "
                    "for runs on it): a run starts beside others only where the least each holds while it "
                    "trains (--dry-run lists it) fits in it together")
        ->check(thx::positive_number())->type_name("GB");
    app->add_option("--out", out, "sweep directory (default: runs/<sweep name>)")->type_name("DIR");
    app->add_flag("--dry-run", dry_run, "list the runs and their estimated cost; run nothing");
  }

  int run() override {
    const Sweep s = load_sweep(config);
    SweepOptions o;
    o.out_dir = out, o.jobs = jobs, o.dry_run = dry_run, o.ranks_per_run = ranks_per_run, o.memory_gb = memory_gb;
    char exe[4096];
    const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) throw RunError("sweep: cannot find the thx executable (/proc/self/exe)");
    o.thx_binary.assign(exe, size_t(len));
    o.threads = torch::get_num_threads();
    const SweepOutcome r = run_sweep(s, o, resolve_pretrain_run);
    if (r.signal) {  // the shell sees the signal (128 + N); the sweep's log said how to resume
      std::fprintf(stderr, "sweep %s: stopped by %s; run the same command to resume\n", s.name.c_str(),
                   signal_name(r.signal).c_str());
      return 128 + r.signal;
    }
    return r.failed ? 1 : 0;
  }
};

}  // namespace

std::unique_ptr<Command> make_sweep_command(CLI::App& parent) {
  return std::make_unique<SweepCommand>(parent);
}

}  // namespace thx
