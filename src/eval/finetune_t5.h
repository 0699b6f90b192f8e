// finetune_t5.h: T5 fine-tuning as text to text (the paper's section 7.1), on the training
// loop: one run over an examples-proportional mixture of every listed task (task k is drawn
// with probability min(n_k, cap) / sum_j min(n_j, cap), T5's rate_num_examples with cap K),
// dropout on layer outputs, feed-forward hidden units and attention weights, the shared
// embedding frozen unless freeze_embedding is false. Every dev set is decoded greedily with
// the incremental cache; the text maps to a label, and a miss is wrong.
//
// Checkpoints (<out>/checkpoints/step-N.h5) hold beyond the parameters and optimizer: the
// mixture sampler's generator, LibTorch's CPU generator (dropout) and every task's record of
// evaluations, so --resume continues bit for bit. At the end: <out>/model.h5.
#pragma once
#include <string>
#include <vector>

#include "eval/finetune_config.h"
#include "eval/scoring.h"
#include "training/checkpoint.h"

namespace thx {

// Fine-tune; returns 0 when finished, else the signal that stopped it after a checkpoint
// (LoopResult::signal).
int finetune_t5(const FinetuneJob& job);
// Evaluate fine-tuned parameters (model.h5) on every task's dev set into job.out.
void eval_t5(const FinetuneJob& job, const Checkpoint& finetuned, const std::string& file);
// The same evaluations without their files, one per task of the job (decoded answers kept).
std::vector<TaskEval> evaluate_t5(const FinetuneJob& job, const Checkpoint& finetuned, const std::string& file);

}  // namespace thx
