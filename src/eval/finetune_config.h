// finetune_config.h: the `finetune:` block and what fine-tuning resolves from it before any
// training: the pretrained checkpoint and the model configuration stored in it, the tokenizer,
// the model with fine-tuning's dropout, and each task's splits. Nothing here trains.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "eval/scoring.h"
#include "eval/tasks.h"
#include "models/encoder.h"
#include "training/checkpoint.h"
#include "training/config.h"
#include "training/spec.h"

namespace thx {

class EventWriter;

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
  int64_t eval_batch_size = 0;  // 0: batch_size / ranks (eval_rows)
  double dropout = 0.1;
  std::optional<double> attention_dropout;  // default: dropout
  double classifier_dropout = 0.1;          // BERT/ALBERT: on the pooled vector before a head
  bool freeze_embedding = true;
  int64_t mixing_cap = 524288;
  int64_t seed = 1;
  int64_t log_every = 50;
  int64_t doc_stride = 128, max_query_length = 64, max_answer_length = 30, n_best = 20;
  bool skip_bad_rows = false;
  std::string precision;       // "" (the pretrained run's train.precision) | fp32 | bf16
  std::string eval_precision;  // "" (precision) | fp32 | bf16
  std::string model_type;      // "" (any) | t5 | bert | albert: the pretrained model a recipe is for
  bool deterministic = false;  // common/determinism.h
};

template <class V>
void visit(V& v, FinetuneConfig& c) {
  v("pretrained", c.pretrained, "pretrained checkpoint (.h5) or run directory (its newest checkpoint)");
  v("tokenizer", c.tokenizer, "SentencePiece model; default: the one the pretraining data recorded");
  v("data", c.data, "root of the task data (glue/, superglue/, squad/, race/)");
  v("tasks", c.tasks, "tasks to fine-tune on and evaluate (see `thx finetune --help`)");
  v("steps", c.steps, "optimizer steps (T5: over the whole mixture; BERT/ALBERT: per task)");
  v("batch_size", c.batch_size, "examples per step");
  v("inputs_length", c.inputs_length, "tokens per input, at least 16 (longer inputs are cut, and counted in the log; "
    "SQuAD: windows)");
  v("targets_length", c.targets_length, "t5: target tokens with EOS, at least 2 (and the decoding limit)");
  v("eval_every", c.eval_every, "steps between dev evaluations (and one at the end)");
  v("eval_examples", c.eval_examples, "dev examples per task (0: all)");
  v("max_train_examples", c.max_train_examples, "training examples per task (0: all)");
  v("eval_batch_size", c.eval_batch_size, "dev examples (windows, options) per forward pass; 0: batch_size / ranks, "
                                         "so that evaluation never needs more memory than a training step");
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
  v("precision", c.precision, "\"\" (the pretrained run's train.precision) | fp32 | bf16 (common/precision.h)");
  v("eval_precision", c.eval_precision, "\"\" (precision) | fp32 | bf16: the precision of dev evaluation and decoding");
  v("model_type", c.model_type, "t5 | bert | albert: the pretrained model this recipe is for (another is refused); "
                                "\"\": any");
  v("deterministic", c.deterministic, "every step repeats to the bit on its device (train.deterministic)");
}
void validate(const FinetuneConfig& c, const std::string& path = "finetune");
// Dev rows per forward pass of one rank: eval_batch_size, or with 0 the training batch of one rank.
int64_t eval_rows(const FinetuneConfig& c);
// The precision of fine-tuning's steps (finetune.precision, else the pretrained run's
// train.precision) and of its evaluation (finetune.eval_precision, else the former).
std::string train_precision(const FinetuneConfig& c, const PretrainConfig& pretrained);
std::string eval_precision(const FinetuneConfig& c, const PretrainConfig& pretrained);

struct FinetuneRunConfig {
  FinetuneConfig finetune;
  OptimizerConfig optimizer;
  CheckpointConfig checkpoint;
};

template <class V>
void visit(V& v, FinetuneRunConfig& c) {
  v("finetune", c.finetune, "fine-tuning and dev evaluation");
  v("optimizer", c.optimizer, "the paper's T5 fine-tuning: adafactor, schedule constant, 1e-3");
  v("checkpoint", c.checkpoint, "fine-tuning checkpoints under <out>/checkpoints/ (BERT/ALBERT: one folder per task)");
}

// The pretrained model: its configuration (from the checkpoint's YAML) and parameters.
struct Pretrained {
  PretrainConfig config;
  Checkpoint checkpoint;
  std::string path;
};

// A fine-tuning config (finetune, optimizer and checkpoint blocks), read and validated; an
// InputError names the file and line of a bad key or value.
FinetuneRunConfig load_finetune_config(ConfigTree tree);

// The checkpoint a `pretrained` setting names (a file, or a run directory's newest).
std::string resolve_checkpoint(const std::string& pretrained);
// That checkpoint and the model configuration stored in it (old keys migrated, spec.h).
Pretrained load_pretrained(const std::string& setting);

// The SentencePiece model: finetune.tokenizer, or the one the pretraining data recorded.
std::string tokenizer_path(const FinetuneConfig& c, const PretrainConfig& pc);
// The model's configuration for fine-tuning: the pretrained one with dropout everywhere.
PretrainConfig with_dropout(PretrainConfig pc, const FinetuneConfig& c);

// A task's dev split (a seeded sample of eval_examples) and, if asked, its training split, as
// read (malformed rows stop the read or are counted: finetune.skip_bad_rows).
struct Splits {
  TaskData train, dev;
};
// SQuAD training: drop the questions whose (first) answer does not match the context at its
// answer_start, with a warning that counts them; InputError when that is every answer.
void skip_misplaced_answers(TaskData& d);
Splits read_splits(const FinetuneConfig& c, const std::string& task, bool need_train);
// The training split shuffled with rng, then cut to max_train_examples (a trainer's first use
// of its generator).
Splits shuffled(Splits s, const FinetuneConfig& c, std::mt19937_64& rng);

// Tokens for a text, cut to `max` (0: no cut); `was_cut`, where given, says whether it was.
std::vector<int32_t> cut(std::vector<int32_t> v, size_t max, bool* was_cut = nullptr);
// n as a percentage of `total` (0 where total is 0), for the log's counts of cut examples.
double percent_of(int64_t n, size_t total);

// What both fine-tuning trainers keep in a checkpoint beyond the loop's own state: the
// generator that samples and orders their data (/state/extra/sampler) and every task's record
// of evaluations (/state/extra/records), so a resumed run reports the same best-of-run.
// load_finetune_state throws InputError for a missing or unreadable entry, or records of other
// tasks than `records` holds.
void save_finetune_state(Checkpoint& c, const std::mt19937_64& sampler, const std::vector<TaskRecord>& records);
void load_finetune_state(const Checkpoint& c, std::mt19937_64& sampler, std::vector<TaskRecord>& records);

// What both kinds of fine-tuning are given: the config, the pretrained model, the output
// directory, the tokenizer, whether to resume, and the TensorBoard writer.
// What a trainer is given. Everything in it was read and checked before the output directory
// was touched (eval/finetune.cpp): the task rows are read once, there, into `data`.
// The pretrained model as fine-tuning's check built it (finetune.cpp: the checkpoint's
// parameters copied in, before anything is written), for the first trainer to take instead of
// building it again: under finetune.seed and with the run's dropout, as the trainer would.
struct CheckedModel {
  T5 t5{nullptr};
  EncoderModel encoder{nullptr};
};

struct FinetuneJob {
  const FinetuneRunConfig& config;
  const Pretrained& pretrained;
  std::string out, tokenizer, yaml;
  bool resume = false;
  std::function<EventWriter*()> open_outputs;  // opens out (once) and its TensorBoard writer (LoopOptions)
  std::map<std::string, Splits> data;           // every task's splits as read (read_splits)
  torch::Device device{torch::kCPU};            // where the model trains and evaluates (--device)
  CheckedModel checked;                         // (fine-tuning) the model, built and loaded once
};

}  // namespace thx
