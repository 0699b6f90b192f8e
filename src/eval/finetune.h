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
//   metrics.jsonl          training loss per logged step
//   finetune.log           everything the console showed
//   model.h5 (T5) or <task>.h5   the fine-tuned parameters at the end (heads included)
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "eval/metrics.h"
#include "eval/tasks.h"
#include "training/checkpoint.h"
#include "training/pretrain.h"

namespace thx {

struct FinetuneConfig {
  std::string pretrained;  // checkpoint .h5, or a run directory (its newest checkpoint)
  std::string tokenizer;   // SentencePiece model; "": the one the pretraining data recorded
  std::string data = "../shared/data";
  std::vector<std::string> tasks;
  int64_t steps = 1000;
  int64_t batch_size = 32;
  int64_t inputs_length = 512;
  int64_t targets_length = 32;
  int64_t eval_every = 500;
  int64_t eval_examples = 0;       // 0: every dev example
  int64_t max_train_examples = 0;  // 0: every training example
  int64_t eval_batch_size = 64;
  double dropout = 0.1;
  std::optional<double> attention_dropout;  // default: dropout
  double classifier_dropout = 0.1;          // BERT/ALBERT: on the pooled vector before a head
  bool freeze_embedding = true;
  int64_t mixing_cap = 524288;
  int64_t seed = 1;
  int64_t log_every = 50;
  int64_t doc_stride = 128, max_query_length = 64, max_answer_length = 30, n_best = 20;
  bool skip_bad_rows = false;
};

template <class V>
void visit(V& v, FinetuneConfig& c) {
  v("pretrained", c.pretrained, "pretrained checkpoint (.h5) or run directory (its newest checkpoint)");
  v("tokenizer", c.tokenizer, "SentencePiece model; default: the one the pretraining data recorded");
  v("data", c.data, "root of the task data (glue/, superglue/, squad/, race/)");
  v("tasks", c.tasks, "tasks to fine-tune on and evaluate (see `thx finetune --help`)");
  v("steps", c.steps, "optimizer steps (T5: over the whole mixture; BERT/ALBERT: per task)");
  v("batch_size", c.batch_size, "examples per step");
  v("inputs_length", c.inputs_length, "tokens per input (longer inputs are truncated; SQuAD: windows)");
  v("targets_length", c.targets_length, "t5: target tokens (and the decoding limit)");
  v("eval_every", c.eval_every, "steps between dev evaluations (and one at the end)");
  v("eval_examples", c.eval_examples, "dev examples per task (0: all)");
  v("max_train_examples", c.max_train_examples, "training examples per task (0: all)");
  v("eval_batch_size", c.eval_batch_size);
  v("dropout", c.dropout, "on layer outputs, feed-forward hidden units and attention weights");
  v("attention_dropout", c.attention_dropout, "on attention weights (default: dropout); non-zero runs attention on the ATen path, not the fused CPU core");
  v("classifier_dropout", c.classifier_dropout, "bert/albert: dropout on the pooled vector before the head (ALBERT: 0.1)");
  v("freeze_embedding", c.freeze_embedding, "t5: keep the shared embedding fixed (the paper)");
  v("mixing_cap", c.mixing_cap, "t5: examples-proportional mixing cap K");
  v("seed", c.seed, "seed of heads' initialization, dropout and data order");
  v("log_every", c.log_every, "steps between progress lines");
  v("doc_stride", c.doc_stride, "SQuAD: tokens between window starts");
  v("max_query_length", c.max_query_length, "SQuAD: question tokens kept");
  v("max_answer_length", c.max_answer_length, "SQuAD: longest predicted answer, in tokens");
  v("n_best", c.n_best, "SQuAD: start and end candidates per window");
  v("skip_bad_rows", c.skip_bad_rows, "skip and count malformed data rows instead of stopping");
}
void validate(const FinetuneConfig& c, const std::string& path = "finetune");

struct FinetuneRunConfig {
  FinetuneConfig finetune;
  OptimizerConfig optimizer;
};

template <class V>
void visit(V& v, FinetuneRunConfig& c) {
  v("finetune", c.finetune, "fine-tuning and dev evaluation (issue 6)");
  v("optimizer", c.optimizer, "the paper's T5 fine-tuning: adafactor, schedule constant, 1e-3");
}

// The pretrained model: its configuration (from the checkpoint's YAML) and parameters.
struct Pretrained {
  PretrainConfig config;
  Checkpoint checkpoint;
  std::string path;
};

// One task's evaluation: metrics (percent) and the predictions behind them.
struct TaskEval {
  std::map<std::string, double> metrics;
  int64_t examples = 0;
  std::vector<std::string> predictions;  // per dev example: label name, score or answer text
  std::map<std::string, std::string> answers;  // SQuAD/ReCoRD: id -> answer
  std::map<std::string, double> na_probs;      // SQuAD v2 (encoders): id -> no-answer margin
};

// Score a task's dev predictions. labels: class / option index (-1 a miss); scores: STS-B;
// texts: SQuAD / ReCoRD answers.
std::map<std::string, double> score_task(const TaskSpec& spec, const std::vector<TaskExample>& dev,
                                         const std::vector<int>& labels, const std::vector<double>& scores,
                                         const std::vector<std::string>& texts,
                                         const std::map<std::string, double>* na_probs = nullptr);

// The task's first metric, or the mean of its metrics: what "best" means per task.
double selection_score(const std::map<std::string, double>& metrics);

// SQuAD span prediction over the windows of one example (exposed for tests).
struct SpanWindow {
  std::vector<int64_t> token_to_word;     // per feature position: the context word, or -1
  std::vector<bool> max_context;          // per feature position: this window is its best
  std::vector<float> start_logits, end_logits;
};
struct SpanAnswer {
  int64_t start_word = -1, end_word = -1;  // -1: no answer
  double score = -1e30, null_score = 1e30;
};
SpanAnswer best_span(const std::vector<SpanWindow>& windows, int64_t n_best, int64_t max_answer_tokens);

// Windows over a document of `doc_tokens` tokens with room for `room` per window: starts.
std::vector<std::pair<int64_t, int64_t>> doc_windows(int64_t doc_tokens, int64_t room, int64_t stride);
// Whether the token at `pos` of the document has its maximum context in window w (BERT's
// _check_is_max_context: min(left, right) + 0.01 * length, the first window wins ties).
bool is_max_context(const std::vector<std::pair<int64_t, int64_t>>& windows, size_t w, int64_t pos);

// A task's dev predictions in its official format, into dir (see the file list above).
void write_predictions(const std::string& dir, const TaskSpec& spec, const std::vector<TaskExample>& dev,
                       const TaskEval& ev);

// `thx finetune`: fine-tune and evaluate; writes out_dir as above.
void run_finetune(const FinetuneRunConfig& config, const Pretrained& pretrained, const std::string& out_dir);
// `thx eval`: evaluate a fine-tuned checkpoint (model.h5 or <task>.h5) on the tasks' dev sets.
void run_eval(const FinetuneRunConfig& config, const Pretrained& model_config, const std::string& checkpoint,
              const std::string& out_dir);

// The checkpoint a `pretrained` setting names (a file, or a run directory's newest).
std::string resolve_checkpoint(const std::string& pretrained);

}  // namespace thx
