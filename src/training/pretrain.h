// pretrain.h: `thx pretrain` and `thx step-probe`: T5 span-corruption pretraining.
//
// Run directory:
//   config.yaml      the resolved configuration
//   metrics.jsonl    one record per logged step: step, loss, nll, lr, tokens_per_s,
//                    step_time_s; and per evaluation: step, ln_ppl
//   train.log        everything the console showed
//   checkpoints/     step-NNNNNNNN.h5 (checkpoint.h)
// --resume continues from the newest checkpoint bit for bit (parameters, optimizer, step,
// RNG and data position). SIGINT or SIGTERM saves a checkpoint and stops; a NaN or infinite
// loss stops with an error naming the step and writes nothing.
#pragma once
#include <string>

#include "data/stream.h"
#include "models/t5.h"
#include "training/config.h"
#include "training/optimizer.h"

namespace thx {

struct PretrainConfig {
  ModelConfig model;
  T5Attention attention;
  DataConfig data;
  TrainConfig train;
  OptimizerConfig optimizer;
  CheckpointConfig checkpoint;
  EvalConfig eval;
  std::string yaml;  // the resolved config, stored in the run directory and checkpoints
};

struct PretrainResult {
  int64_t step = 0;          // the last completed step
  double ln_ppl = 0;         // the last held-out evaluation
  bool interrupted = false;  // stopped by a signal (a checkpoint was saved)
};

PretrainResult run_pretrain(const PretrainConfig& config, const std::string& run_dir, bool resume);

// One optimizer step on the first batch; writes batch, parameters before and after,
// gradients, optimizer state, loss and nll to HDF5 (the layout in cmd_pretrain.cpp).
void run_step_probe(const PretrainConfig& config, const std::string& out);

// The parameters the optimizer updates, each with the shape that decides Adafactor's
// factoring under optimizer.factor_attention (see optimizer.h).
std::vector<OptimizedParam> optimized_params(T5Impl& model, const std::string& factor_attention);

// Held-out ln(PPL): mean NLL per target token over the given batches.
double evaluate(T5Impl& model, const std::vector<Batch>& batches);

}  // namespace thx
