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
// dir/<task>.json.
void write_record(const std::string& dir, const TaskRecord& r);
// Fine-tuned parameters (model.h5, <task>.h5): a checkpoint file with the parameters, the step
// and the config, and no optimizer state.
void write_params(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& params,
                  const std::string& config, int64_t step);

}  // namespace thx
