// sweep_results.h: a sweep's ledger. Each finished run has <run>/result.json (what its
// metrics.jsonl says, with the run's name, budget, seed, steps, wall time, config hash and the
// resolved attention of each layer type); <sweep>/results.jsonl holds them all, in sweep order,
// rewritten whenever a run finishes. Fine-tuning results found under a run
// (<run>/finetune/**/<task>.json, from `thx finetune`) are merged in as "downstream": {task:
// metrics}, also when they were written after the sweep finished.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace thx {

// <out>/results.jsonl, read back (downstream merged); InputError naming the file and line.
std::vector<nlohmann::json> read_results(const std::string& dir);

// A run's fine-tuning results: {task: metrics}.
nlohmann::json read_downstream(const std::string& run_dir);

// What a run's metrics.jsonl says: the last and best held-out ln(PPL), BERT/ALBERT accuracies
// (percent) at the last evaluation, median step time and tokens/s. *finished when an
// evaluation at step `steps` is there.
nlohmann::json summarize_metrics(const std::string& run_dir, int64_t steps, bool* finished);

// train.precision as <run>/config.yaml records it; fp32 where the key is absent.
std::string run_precision(const std::string& run_dir);

// Rewrite <out>/results.jsonl from the result.json of each run directory that has one; a
// result without "precision" gets run_precision().
void write_results_jsonl(const std::string& out, const std::vector<std::string>& run_dirs);

}  // namespace thx
