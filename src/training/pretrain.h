// pretrain.h: `thx pretrain` and `thx step-probe`: T5 span-corruption pretraining, and
// BERT/ALBERT masked-LM pretraining with SOP or NSP (model.type picks).
//
// Run directory:
//   config.yaml      the resolved configuration
//   metrics.jsonl    one record per logged step: step, loss, nll (means since the previous
//                    record), lr, tokens_per_s, step_time_s, memory (training/loop.h); and per
//                    evaluation: step, ln_ppl (T5: per target token;
//                    BERT/ALBERT: per masked token), and for BERT/ALBERT mlm_accuracy and
//                    sop_accuracy or nsp_accuracy (fractions)
//   train.log        everything the console showed
//   tb/              TensorBoard events: train/* and eval/* scalars (tensorboard.h)
//   checkpoints/     step-NNNNNNNN.h5 (checkpoint.h)
// The loop (loop.h) trains: --resume continues from the newest checkpoint bit for bit
// (parameters, optimizer, step, RNG and data position). SIGINT or SIGTERM saves a checkpoint
// and stops; a NaN or infinite loss stops with an error naming the step and writes nothing.
#pragma once
#include <optional>
#include <string>

#include "data/stream.h"
#include "models/encoder.h"
#include "models/t5.h"
#include "training/config.h"
#include "training/objective.h"
#include "training/optimizer.h"
#include "training/spec.h"

namespace thx {

struct PretrainResult {
  int64_t step = 0;          // the last completed step
  double ln_ppl = 0;         // the last held-out evaluation
  std::optional<double> mlm_accuracy, sentence_accuracy;  // BERT/ALBERT
  bool interrupted = false;  // stopped by a signal (a checkpoint was saved): no result
  int signal = 0;            // which (LoopResult::signal)
};

// The run directory is prepared by RunDirectory (run_dir.h): --resume compares the stored
// config with this one, and `allow_changes` names the keys that may differ.
PretrainResult run_pretrain(const PretrainConfig& config, const std::string& run_dir, bool resume,
                            const std::vector<std::string>& allow_changes = {});

// The command's final line: "<run_dir> step N held-out [MLM ]ln(PPL) x[, accuracies]".
std::string result_line(const PretrainConfig& config, const std::string& run_dir, const PretrainResult& r);

// The held-out evaluation a run makes (its eval block, on the held-out split of its data, at
// eval.precision) of the parameters `params` of a checkpoint `file` of that run: the number the
// run recorded at that step, recomputed (`thx eval --checkpoint RUN` without --config).
PretrainResult evaluate_pretrained(const PretrainConfig& config, const std::map<std::string, torch::Tensor>& params,
                                   int64_t step, const std::string& file);

// One optimizer step on the first batch; writes batch, parameters before and after,
// gradients, optimizer state, loss and nll to HDF5 (the layout in cli/cmd_step_probe.cpp).
void run_step_probe(const PretrainConfig& config, const std::string& out);

// The parameters the optimizer updates, each with the shape that decides Adafactor's
// factoring under optimizer.factor_attention (see optimizer.h).
std::vector<OptimizedParam> optimized_params(T5Impl& model, const std::string& factor_attention);

}  // namespace thx
