// finetune.h: `thx finetune` and `thx eval`: fine-tuning a pretrained T5, BERT or ALBERT on
// GLUE, SuperGLUE, SQuAD and RACE, and scoring dev sets with the official metrics.
//
// T5 (the paper's section 7.1): one text-to-text run over an examples-proportional mixture of
// every listed task (task k is drawn with probability min(n_k, cap) / sum_j min(n_j, cap), T5's
// rate_num_examples with its cap K), dropout on layer outputs, feed-forward hidden units and
// attention weights, the shared embedding (also the output projection) frozen, the optimizer
// block as given (the paper: Adafactor, constant 1e-3). Dev sets are decoded greedily with the
// incremental cache; the decoded text maps to a label, and a miss is wrong.
//
// BERT / ALBERT (sections 7.2, 7.3): one run per task from the pretrained weights, with a head
// on top: classification or regression on the pooled [CLS] vector (GLUE, SuperGLUE), a span
// head (start/end logits; doc-stride windows merged by maximum context, n-best, max answer
// length; SQuAD v2: the [CLS] span is "no answer", its score margin is the no-answer
// probability, thresholded as the official script's best threshold on dev), or multiple choice
// (RACE, COPA: one score per option from the pooled vector, softmax over the options).
//
// Reported numbers follow T5's and ALBERT's protocol: each task's dev set is evaluated every
// eval_every steps (and at the end), and the result is the best evaluation of that task, by
// the mean of its metrics (the checkpoint chosen per task). The history of every evaluation is
// kept beside it.
//
// Output directory:
//   <task>.json           {task, split, examples, metrics (percent), step (of the best),
//                          protocol, history: [{step, metrics}]}
//   <task>_predictions.json   SQuAD: {id: answer} of the best evaluation (official format)
//   <Task>.tsv / <Task>.jsonl GLUE / SuperGLUE dev predictions in the submission formats
//   finetune.yaml          the resolved config (written first; compared on --resume)
//   metrics.jsonl          the loop's records: training loss per logged step, dev metrics
//   tb/                    TensorBoard events of the same
//   finetune.log           everything the console showed
//   checkpoints/           the loop's checkpoints (T5: step-N.h5; BERT/ALBERT: <task>/step-N.h5)
//   model.h5 (T5) or <task>.h5   the fine-tuned parameters at the end (heads included)
//   <task>-best.h5         the parameters at the task's best evaluation (T5: the whole model at
//                          that step); <task>.json's "weights" says which step each file holds
//
// The files: finetune_config (the block, the pretrained model, splits), finetune_t5 and
// finetune_encoder (the two trainers, on training/loop.h), scoring (metrics, the best-of-run
// record), squad_spans (windows, best span), predictions (official formats).
#pragma once
#include <string>
#include <vector>

#include "eval/finetune_config.h"
#include "eval/predictions.h"
#include "eval/scoring.h"
#include "eval/squad_spans.h"

namespace thx {

struct FinetuneOptions {
  bool resume = false;                     // continue a killed run in out_dir bit for bit
  std::vector<std::string> allow_changes;  // --allow-config-change (training/run_dir.h)
};

// `thx finetune`: fine-tune and evaluate; writes out_dir as above. Every input is checked
// before out_dir is touched. Returns 0 when finished, else the signal that stopped it after a
// checkpoint (SIGINT, SIGTERM: --resume continues).
int run_finetune(const FinetuneRunConfig& config, const Pretrained& pretrained, const std::string& out_dir,
                  const FinetuneOptions& options = {});
// `thx eval`: evaluate a fine-tuned checkpoint (model.h5 or <task>.h5, or the finetune output
// directory) on the tasks' dev sets, into out_dir ("": eval/ beside the checkpoint).
void run_eval(const FinetuneRunConfig& config, const Pretrained& model_config, const std::string& checkpoint,
              const std::string& out_dir);

}  // namespace thx
