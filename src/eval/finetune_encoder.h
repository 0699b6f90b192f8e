// finetune_encoder.h: BERT/ALBERT fine-tuning (sections 7.2, 7.3), on the training loop: one
// run per task from the pretrained weights, with a head on top (models/heads.h):
// classification or regression on the pooled [CLS] vector (GLUE, SuperGLUE), a span head
// (start/end logits over doc-stride windows, squad_spans.h; SQuAD v2: the [CLS] span is "no
// answer", its score margin the no-answer probability, thresholded as the official script's
// best threshold on dev), or multiple choice (RACE, COPA: one score per option from the
// pooled vector, softmax over the options).
//
// Checkpoints: <out>/checkpoints/<task>/step-N.h5, holding beyond the parameters (heads
// included, heads/<task>/{w,bias}) and optimizer: the data order and its generator, LibTorch's
// CPU generator (dropout) and the task's record of evaluations. At the end: <out>/<task>.h5.
// On --resume a task whose <task>.h5 exists is done and skipped.
#pragma once
#include <string>

#include "eval/finetune_config.h"
#include "eval/scoring.h"
#include "training/checkpoint.h"

namespace thx {

// Fine-tune every task in turn; returns 0 when finished, else the signal that stopped it after a
// checkpoint (LoopResult::signal).
int finetune_encoder(const FinetuneJob& job);
// The outputs of a task's head: classes, 1 (regression, a multiple-choice option's score) or
// 2 (a span's start and end logits).
int64_t head_outputs(const TaskSpec& s);
// Evaluate a task's fine-tuned parameters (<task>.h5) on its dev set into job.out.
void eval_encoder_task(const FinetuneJob& job, const std::string& task, const Checkpoint& finetuned,
                       const std::string& file);
// The same evaluation without its files: the task's dev examples in `job`, scored and predicted.
TaskEval evaluate_encoder_task(const FinetuneJob& job, const std::string& task, const Checkpoint& finetuned,
                               const std::string& file);

}  // namespace thx
