// config.h: the data, train, optimizer, checkpoint and eval blocks of a pretraining config.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/recall.h"

namespace thx {

struct DataConfig {
  std::string prepared;  // a directory written by `thx prepare`
  int64_t inputs_length = 512;
  int64_t targets_length = 114;
  double noise_density = 0.15;
  double mean_noise_span_length = 3.0;
  // BERT / ALBERT (data/mlm.h); inputs_length is max_seq_length.
  double masked_lm_prob = 0.15;
  int64_t max_predictions_per_seq = 20;
  int64_t max_ngram = 3;
  bool whole_word = true;
  double short_seq_prob = 0.1;
  std::string sentence_task = "sop";  // sop | nsp | none
  // A generated task instead of prepared shards (bert/albert): "" | associative_recall.
  std::string synthetic;
  std::optional<RecallOptions> recall;  // associative_recall (data/recall.h); length = inputs_length
};

// The generated task's options with its length: data.recall (defaults where absent) at
// data.inputs_length.
RecallOptions recall_options(const DataConfig& d);

template <class V>
void visit(V& v, RecallOptions& c) {
  v("vocab_size", c.vocab_size, "ids: 0 padding, 1 reserved, then keys and values, half each");
  v("pairs", c.pairs, "key-value pairs per example (distinct keys)");
  v("queries", c.queries, "queried keys per example, after the pairs (distinct, <= pairs)");
}

template <class V>
void visit(V& v, DataConfig& c) {
  v("prepared", c.prepared, "directory written by `thx prepare` (required)");
  v("inputs_length", c.inputs_length, "encoder tokens per example (paper: 512)");
  v("targets_length", c.targets_length, "decoder tokens per example (paper: 114)");
  v("noise_density", c.noise_density, "fraction of tokens corrupted");
  v("mean_noise_span_length", c.mean_noise_span_length);
  v("masked_lm_prob", c.masked_lm_prob, "bert/albert: fraction of tokens masked");
  v("max_predictions_per_seq", c.max_predictions_per_seq, "bert/albert: cap on masked tokens per sequence (ALBERT at 512: 20)");
  v("max_ngram", c.max_ngram, "bert/albert: longest masked n-gram, in whole words (ALBERT: 3; 1 = BERT)");
  v("whole_word", c.whole_word, "bert/albert: mask whole words (SentencePiece word starts)");
  v("short_seq_prob", c.short_seq_prob, "bert/albert: probability of a shorter example");
  v("sentence_task", c.sentence_task, "bert/albert: sop (ALBERT) | nsp (BERT) | none");
  v("synthetic", c.synthetic, "bert/albert: \"\" (prepared shards) | associative_recall (generated; data.recall)");
  v("recall", c.recall, "associative_recall: vocab_size, pairs, queries (data/recall.h)");
}

struct TrainConfig {
  int64_t steps = 524288;
  int64_t batch_size = 128;
  int64_t seed = 0;
  int64_t grad_accum = 1;  // micro-batches per step; batch_size is split among them
  int64_t log_every = 10;
  std::string device;              // cpu | cuda | auto; empty: the --device flag (common/runtime.h)
  std::string precision = "fp32";  // fp32 | bf16 (common/precision.h)
  bool deterministic = false;       // common/determinism.h
};

template <class V>
void visit(V& v, TrainConfig& c) {
  v("steps", c.steps, "optimizer steps (paper: 524288, or 65536 for the short runs)");
  v("batch_size", c.batch_size, "examples per step (paper: 128)");
  v("seed", c.seed, "seed of the initialization and of the data order");
  v("grad_accum", c.grad_accum, "micro-batches per step (batch_size must divide evenly)");
  v("log_every", c.log_every, "steps between progress lines and metrics records");
  v("device", c.device, "cpu | cuda | auto (empty: the --device flag)");
  v("precision", c.precision, "fp32 | bf16: bf16 matmuls with fp32 master weights, optimizer state and every "
                              "normalizing reduction (softmax, norms, losses); on the CPU it needs AMX-BF16 or "
                              "AVX512-BF16");
  v("deterministic", c.deterministic,
    "every step repeats to the bit on its device, so a killed run resumes bit for bit there (the CPU's always "
    "do): ATen's deterministic algorithms, cuBLAS's fixed workspace, thx's kernels without atomics "
    "(common/determinism.h)");
}

struct OptimizerConfig {
  std::string name = "adafactor";        // adafactor | adamw | lamb
  double learning_rate = 1.0;            // c in c * rsqrt(max(t, warmup)), or the peak
  std::string schedule = "inverse_sqrt"; // inverse_sqrt | constant | polynomial
  double power = 1.0;                    // polynomial decay exponent
  double end_learning_rate = 0.0;        // polynomial: the rate at the last step
  int64_t warmup_steps = 10000;
  double decay_fraction = 0.1;           // linear decay to 0 over this final fraction
  std::optional<double> beta1;           // Adafactor momentum; none by default
  double clipping_threshold = 1.0;
  std::optional<double> clip_global_norm;  // null: 1.0 for bert/albert, 0 (off) for t5
  std::string factor_attention = "mesh_tf";  // mesh_tf | combined | per_head
  double weight_decay = 0.0;             // AdamW, LAMB
  double adam_beta1 = 0.9, adam_beta2 = 0.999, adam_epsilon = 1e-8;
  bool adam_bias_correction = true;      // AdamW only; BERT's has none
  std::vector<std::string> no_decay = {"norm", "bias"};  // path substrings: no decay, no trust ratio
  double mixing_lr_multiplier = 1.0;     // P_l and P_w learn at this multiple of the rate
};

// optimizer.clip_global_norm as it applies to a model: its value, or by default 1.0 for an
// encoder (BERT, ALBERT) and 0 (off) for T5.
inline double clip_global_norm(const OptimizerConfig& c, bool encoder) {
  return c.clip_global_norm.value_or(encoder ? 1.0 : 0.0);
}

template <class V>
void visit(V& v, OptimizerConfig& c) {
  v("name", c.name, "adafactor | adamw | lamb (ALBERT)");
  v("learning_rate", c.learning_rate, "inverse_sqrt: lr_t = learning_rate * rsqrt(max(t, warmup_steps)) * decay; constant: the rate; polynomial: the peak");
  v("schedule", c.schedule, "inverse_sqrt | constant | polynomial (linear warmup, then (1-t/T)^power)");
  v("warmup_steps", c.warmup_steps, "inverse_sqrt: the rate is constant before this step; polynomial: linear warmup");
  v("power", c.power, "polynomial: decay exponent (BERT, ALBERT: 1)");
  v("end_learning_rate", c.end_learning_rate, "polynomial: the rate at the last step");
  v("decay_fraction", c.decay_fraction, "linear decay to 0 over this final fraction of the steps");
  v("beta1", c.beta1, "Adafactor momentum (null: none, as T5)");
  v("clipping_threshold", c.clipping_threshold, "Adafactor update clipping (RMS)");
  v("clip_global_norm", c.clip_global_norm,
    "clip the gradients' global norm to this before each update, as BERT's and ALBERT's optimizers do "
    "(tf.clip_by_global_norm); 0: off; null (default): 1.0 for bert and albert, off for t5, whose "
    "Adafactor clips its updates instead");
  v("factor_attention", c.factor_attention,
    "mesh_tf | combined | per_head: how P_q, P_k, P_v, P_o are seen when factoring second moments");
  v("weight_decay", c.weight_decay, "AdamW/LAMB decoupled weight decay (ALBERT: 0.01)");
  v("adam_beta1", c.adam_beta1);
  v("adam_beta2", c.adam_beta2);
  v("adam_epsilon", c.adam_epsilon, "AdamW/LAMB epsilon (BERT, ALBERT: 1e-6)");
  v("adam_bias_correction", c.adam_bias_correction, "AdamW bias correction (BERT's optimizer has none)");
  v("no_decay", c.no_decay, "parameters whose path contains one of these get no weight decay (and no LAMB trust ratio)");
  v("mixing_lr_multiplier", c.mixing_lr_multiplier,
    "the head-mixing projections P_l and P_w (talking_heads, project_logits, project_weights) learn at this "
    "multiple of the learning rate; everything else at the rate itself (default 1; 0 freezes them at their "
    "initialization)");
}

struct CheckpointConfig {
  int64_t every = 1000;
  int64_t keep = 3;
};

template <class V>
void visit(V& v, CheckpointConfig& c) {
  v("every", c.every, "steps between checkpoints (and one at the end)");
  v("keep", c.keep, "how many of the latest checkpoints to keep");
}

struct EvalConfig {
  int64_t every = 1000;
  int64_t examples = 128;
  int64_t batch_size = 0;  // 0: the training micro-batch of one rank (eval_batch_rows)
  int64_t seed = 1234;
  std::string precision;  // "" (train.precision) | fp32 | bf16
};

template <class V>
void visit(V& v, EvalConfig& c) {
  v("every", c.every, "steps between held-out ln(PPL) evaluations (and one at the end)");
  v("examples", c.examples, "held-out examples (fixed for the whole run)");
  v("batch_size", c.batch_size, "held-out examples per forward pass; 0: the training micro-batch of one rank "
                                "(train.batch_size / train.grad_accum / ranks), so that evaluation never needs "
                                "more memory than a training step");
  v("seed", c.seed, "seed of the held-out span corruption");
  v("precision", c.precision, "\"\" (the training precision) | fp32 | bf16: the precision of held-out evaluation");
}

// ConfigError for impossible values, naming the key.
void validate(const DataConfig& c);
void validate(const TrainConfig& c);
void validate(const OptimizerConfig& c);
void validate(const CheckpointConfig& c);
void validate(const EvalConfig& c);

// Held-out examples per forward pass: eval.batch_size, or with 0 the training micro-batch of one
// rank, so that evaluation (no gradients) never holds more rows than a training step does.
int64_t eval_batch_rows(const EvalConfig& e, const TrainConfig& t, int world_size);

}  // namespace thx
