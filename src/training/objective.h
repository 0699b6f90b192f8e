// objective.h: what pretraining trains, behind one interface: T5 span corruption (cross-entropy
// with z-loss over the targets; a step's mean is over its target tokens), or BERT/ALBERT's
// masked LM with a sentence task (the MLM mean over masked tokens, and the SOP/NSP mean over
// the examples that have a label). Pretraining's trainee, its evaluation and step probe, and
// `thx bench train` use only this; model.type decides which one, once, in make_objective.
#pragma once
#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/stream.h"
#include "models/spec.h"
#include "training/config.h"

namespace thx {

// Sums over held-out batches, and what they give.
struct EvalSums {
  double nll = 0;
  int64_t tokens = 0, correct = 0, sentence_count = 0, sentence_correct = 0;
};
struct EvalMetrics {
  double ln_ppl = 0;                                       // mean NLL per target/masked token
  std::optional<double> mlm_accuracy, sentence_accuracy;  // BERT/ALBERT
};

class Objective {
 public:
  virtual ~Objective() = default;
  virtual torch::nn::Module& module() = 0;
  // Every parameter by its path (checkpoints, the optimizer).
  virtual std::vector<std::pair<std::string, torch::Tensor>> params() const = 0;
  struct Out {
    torch::Tensor loss, second;  // the mean the step weights by weight(); the second mean, or undefined
    EvalSums sums;
  };
  // One micro-batch, on the model's device.
  virtual Out forward(const Batch& b) = 0;
  // What a micro-batch weighs in the step's means: target or masked tokens; and labelled
  // examples of the sentence task (0 without one).
  double weight(const Batch& b) const { return double((b.targets != 0).sum().item<int64_t>()); }
  virtual double second_weight(const Batch& b) const { return 0; }
  virtual EvalMetrics metrics(const EvalSums& s) const = 0;
  // A batch of `rows` random examples in this objective's shapes (benchmarks), on `device`.
  virtual Batch random_batch(const DataConfig& d, int64_t rows, int64_t vocab, const torch::Device& device) const = 0;
  // What a step probe writes of micro-batches (/batch/<name>, int32): the tensors this
  // objective reads, the micro-batches' rows concatenated.
  virtual std::vector<std::pair<std::string, torch::Tensor>> probe_fields(const std::vector<Batch>& micro) const = 0;
};

// The model of `spec` with `vocab` ids, built on the CPU from the current generator (so that a
// run draws the same initial weights on any device), and its objective. `sentence_head`: an
// encoder's SOP/NSP head.
std::unique_ptr<Objective> make_objective(const ModelSpec& spec, int64_t vocab, bool sentence_head);

}  // namespace thx
