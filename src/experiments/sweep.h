// sweep.h: experiments as data (the grammar and expansion here; the process pool in
// sweep_runner.cpp, the results ledger in sweep_results.h). A sweep file names base configs and the axes to vary; each
// combination is one run with a stable name, its own run directory and resolved config.
//
//   sweep: table1-mini            # the sweep's name (run directories: runs/<name>/<run>)
//   table: table1                 # the paper layout its results fill (thx table)
//   base: ../t5/mini.yaml         # one config file or a list, relative to this file
//   set: {train.batch_size: 16}   # dotted-key overrides applied to every run
//   variants:                     # explicit named variants, each a set of overrides
//     - {name: mh, set: {attention.variant: multi_head}}
//   grid: {attention.h: [6, 12]}  # cartesian product of the listed values
//   zip: {attention.h: [6, 12], attention.d_k: [32, 16]}  # paired lists
//   budgets: {short: 2000, full: 16000}   # train.steps, one run per budget
//   seeds: [1, 2]                 # train.seed, one run per seed
//
// A budget may carry its own seeds, as the paper's four short runs and one full run:
//   budgets: {short: {steps: 65536, seeds: [1, 2, 3, 4]}, full: 524288}
//
// Runs are variants x grid x zip x budgets x seeds, in that nesting order. A run's name joins
// its variant name, its grid and zip values ("h12", or the bare value for attention.variant),
// its budget and "s<seed>". Overrides are applied in the order base < set < variant < grid <
// zip < budget < seed; each keeps its file and line, so a bad key or value in a sweep is
// reported at the line it was written on.
#pragma once
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/config_tree.h"
#include "experiments/sweep_results.h"
#include "models/spec.h"

namespace thx {

struct SweepOverride {
  std::string key;   // dotted, e.g. attention.h
  YAML::Node value;  // keeps its line in the sweep file
};

struct SweepRun {
  std::string name;
  std::string variant;  // the variant's name, "" without variants
  std::string budget;   // "" without budgets
  std::optional<int64_t> seed, steps;
  std::vector<SweepOverride> overrides;  // set, variant, grid, zip, in that order
};

struct Sweep {
  std::string file;  // the sweep file
  std::string name, table, description;
  std::vector<std::string> bases;  // resolved paths
  std::vector<SweepRun> runs;
};

// Parse and expand a sweep file. Throws InputError ("file:line: ...") for malformed YAML, an
// unknown key, an empty grid axis, zip lists of different lengths, or a duplicate run name.
// Config keys are not checked here: see sweep_run_tree().
Sweep load_sweep(const std::string& path);

// The run's config tree: the base files, then its overrides with their sweep-file origins,
// then train.steps and train.seed.
ConfigTree sweep_run_tree(const Sweep& sweep, const SweepRun& run);

// What the runner needs to know of a run's resolved config.
struct ResolvedRun {
  std::string yaml;       // the resolved config, written to <run>/run.yaml
  int64_t steps = 0;      // train.steps
  int64_t batch_size = 0, grad_accum = 1;  // train.batch_size, train.grad_accum
  double flops = 0;       // model FLOPs of the whole run (6 x forward multiply-adds x examples)
  std::string precision = "fp32";  // train.precision (the dry run's estimate uses its peak)
  std::string attention;  // one-line summary of the attention of each layer type
  std::map<std::string, std::string> info;  // JSON values copied into the results
  std::string prepared;   // data.prepared ("" for a generated task, data.synthetic)
  // The least memory the run holds while it trains, in one process (train.batch_size /
  // train.grad_accum rows): its parameters, gradients and optimizer state, and a micro-batch's
  // activations (models/spec.h's training_memory_lower_bound, the bound its own check refuses
  // by), on `device` ("cpu", "cuda"; "" where the sweep cannot tell, and the bound is 0).
  MemoryBound memory;
  std::string device;
};

struct SweepOptions {
  std::string out_dir;  // default: runs/<sweep name>
  int64_t jobs = 1;
  bool dry_run = false;
  std::string thx_binary;  // the executable each run starts: `thx pretrain`
  int64_t threads = 0;     // cores to share among the jobs (default: all)
  int64_t ranks_per_run = 1;  // > 1: each run is `torchrun --nproc_per_node N ... thx`, on its own port
  double memory_gb = 0;  // the memory the runs share (0: their device's: the machine's, or a GPU's)
};

// Resolve every run (errors name the sweep file and line), then run those not finished,
// `jobs` at a time, each with threads / jobs threads (with ranks_per_run N: N ranks of
// threads / (jobs * N) threads each, under torchrun; every run's batch must divide).
// Interrupted runs resume from their checkpoints. A run starts beside others only where their
// memory lower bounds together fit in the memory they share (sweep_memory_wait); else it waits
// for one to end, the sweep's log says so, and --dry-run lists each run's bound. Writes
// <out>/results.jsonl (one JSON object per finished run, in sweep order). Returns how many
// runs failed, and the signal (SIGINT, SIGTERM) that stopped the sweep (its runs checkpoint
// and stop; the same command resumes them), or 0.
struct SweepOutcome {
  int failed = 0;
  int signal = 0;
};
SweepOutcome run_sweep(const Sweep& sweep, const SweepOptions& options,
              const std::function<ResolvedRun(ConfigTree&)>& resolve);

// What a pretraining run's resolved config says for the sweep (sweep_plan.cpp): its YAML, the
// model FLOPs of the run, and the resolved attention of each layer type with its parameters
// and multiplies per layer (the row signatures thx table matches).
ResolvedRun resolve_pretrain_run(ConfigTree& tree);

// A run's memory lower bound as the sweep adds it up on its device, with `ranks` ranks of it,
// each rank's MemoryBound::total() of its share of the batch (with more than one, c10d's
// gradient buckets too): on the CPU its ranks share the machine (ranks x that); on a GPU each
// rank has its own (that).
double sweep_run_memory(const ResolvedRun& run, int64_t ranks);

// "" where run `name`, which needs at least `need` bytes, may start beside the running runs
// that need `beside` bytes each on its device (none running; together at most `budget` bytes,
// `what`, as "this machine's 25.3 GB"; or either unknown, 0), else the sweep's line saying
// that it waits for one to end: a run that starts where the bounds alone exceed the memory is
// ended by the out-of-memory killer or by thx's memory check, mid-step, and so is the run
// beside it.
std::string sweep_memory_wait(const std::string& name, double need, const std::vector<double>& beside,
                              double budget, const std::string& what);

// The step a started run resumes from: its newest checkpoint in <run_dir>/checkpoints (0: none).
// The sweep's ETA and the dry run's "To run" count only the steps after it.
int64_t sweep_resume_step(const std::string& run_dir);

}  // namespace thx
