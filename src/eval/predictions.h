// predictions.h: what fine-tuning and `thx eval` write per task: dev predictions in each
// benchmark's official submission format, <task>.json (scoring.h's record), and fine-tuned
// parameter files.
//   SQuAD: <task>_predictions.json {id: answer} (+ <task>_na_probs.json for v2 heads)
//   GLUE: <Task>.tsv "index\tprediction"; SuperGLUE: <Task>.jsonl {"idx", "label"} (MultiRC
//   nested by passage and question); RACE: race_predictions.json {id: "A".."D"}
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "eval/scoring.h"
#include "eval/tasks.h"

namespace thx {

// A task's dev predictions in its official format, into dir.
void write_predictions(const std::string& dir, const TaskSpec& spec, const std::vector<TaskExample>& dev,
                       const TaskEval& ev);
// dir/<task>.json; `weights` (fine-tuning), when given, says which file holds which step's
// parameters: {"best": {"file", "step"}, "last": {"file", "step"}}.
void write_record(const std::string& dir, const TaskRecord& r, const nlohmann::json& weights = nullptr);

// Fine-tuning keeps the parameters of each task's best evaluation, the step its reported score
// comes from (T5's and ALBERT's protocol; HF's load_best_model_at_end): <task>-best.h5 in the
// output directory, rewritten at each new best. For T5's mixture it is the whole model at that
// task's best step. `thx eval --checkpoint <dir>/<task>-best.h5` reproduces <task>.json's score.
std::string best_weights_file(const std::string& task);
// <task>.json's "weights" block: the best file (at the record's best step) and the last one.
nlohmann::json weights_block(const TaskRecord& r, const std::string& last_file, int64_t last_step);
// Fine-tuned parameters (model.h5, <task>.h5): a checkpoint file with the parameters, the step
// and the config, and no optimizer state.
void write_params(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& params,
                  const std::string& config, int64_t step);

}  // namespace thx
