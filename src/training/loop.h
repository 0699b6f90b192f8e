// loop.h: the one training loop of thx. T5 span corruption, BERT/ALBERT MLM with SOP/NSP, the
// T5 text-to-text mixture and the encoder task heads all run on it; what differs between them
// sits behind `Trainee`. It does not know models, data formats or tasks.
//
// The loop owns, once:
//   - gradient accumulation: the step's micro-batches, each weighted by its share of the
//     step's weight (target tokens, masked tokens or examples), so the gradient is that of the
//     mean over the whole batch; and the learning-rate schedule (optimizer.h);
//   - the finiteness check of the loss, before the optimizer step (a NaN never reaches the
//     parameters, and the last good checkpoint stays the newest);
//   - progress lines with tokens/s, s/step and ETA; metrics.jsonl; TensorBoard scalars;
//   - periodic evaluation (every eval_every steps and at the last);
//   - atomic checkpoints every checkpoint_every steps and at the last, keeping the newest N;
//     a checkpoint on SIGINT/SIGTERM (a second signal ends the process at once);
//   - bit-exact resume: parameters, optimizer state, step and LibTorch's CPU generator (the
//     loop's own), and the trainee's data position and generators (Trainee::save_state /
//     load_state) come back from the newest checkpoint.
//
// Data parallel (distributed/dist.h, under torchrun): every rank draws the same global
// micro-batches (next_step), keeps its shard of each (Trainee::shard: rank r of W takes the
// r-th of W equal row ranges), and weights its loss by its shard's share of the whole step's
// weight; GradSync sums the gradients over the ranks while the last micro-batch's backward
// runs, so every rank holds the gradient one process would compute (up to summation order)
// and steps its optimizer identically. Each step one more all-reduce carries the loss sums,
// the tokens and any stop request. Only rank 0 writes metrics, TensorBoard, progress and
// checkpoints; a checkpoint first checks that every rank holds the same parameters
// (a checksum) and gathers every rank's CPU generator (dropout differs per rank). On resume
// rank 0 reads the checkpoint and sends it to the others, so only rank 0 needs the run
// directory; a checkpoint of another world size resumes when the batch divides.
//
// Records (one JSON object per line in metrics.jsonl, and the same scalars in TensorBoard):
//   train: {step, loss, nll, lr, tokens_per_s, step_time_s, rss_mb, peak_rss_mb}: loss and nll
//          are means over the steps since the previous record, peak_rss_mb the process's peak
//          in those steps (an evaluation among them left out: it has its own); on a GPU also
//          gpu_peak_mb (the caching allocator's peak of memory held by tensors, in the same
//          steps); with a tag, also {"task": tag}; data parallel, per
//          step as rank 0 saw it: backward_s (the last micro-batch's backward, all-reduce
//          included), allreduce_s (time with a bucket in flight), allreduce_exposed_s (of that,
//          after the last bucket was launched: what backward did not hide), allreduce_mb,
//          allreduce_buckets
//   eval:  {step, <metric>: value, ..., peak_rss_mb[, gpu_peak_mb]}: the metrics as
//          Trainee::evaluate returns them, and the evaluation's own peaks
#pragma once
#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/stream.h"
#include "training/checkpoint.h"
#include "training/config.h"
#include "training/optimizer.h"

namespace thx {

class EventWriter;

// One micro-batch's forward pass: the loss to differentiate (a mean over the micro-batch),
// and the sums the loop reports.
// A loss of two means over different units (BERT/ALBERT: MLM over masked tokens, the
// sentence task over examples) gives the second in `second`; the loop weights each mean by
// its own share (Trainee::second_weight), so that micro-batches and rank shards add up to
// the means over the whole step.
struct MicroLoss {
  torch::Tensor loss;    // scalar: the mean over the micro-batch's weight units
  double nll_sum = 0;    // summed NLL over the micro-batch's weight units (0: not reported)
  torch::Tensor second;  // scalar mean over second_weight units, or undefined
};

// The model-specific part of training.
class Trainee {
 public:
  virtual ~Trainee() = default;
  // The module whose train()/eval() mode the loop switches.
  virtual torch::nn::Module& module() = 0;
  // Every tensor a checkpoint holds (the model's parameters and any heads), by path.
  virtual std::vector<std::pair<std::string, torch::Tensor>> parameters() = 0;
  virtual Optimizer& optimizer() = 0;
  // The next step's `micro` micro-batches; advances the data position.
  virtual std::vector<Batch> next_step(int64_t micro) = 0;
  // What a micro-batch weighs in the step's mean (target or masked tokens, or examples).
  virtual double weight(const Batch& b) = 0;
  // Whether some parameter may get no gradient in a step (a part of the model a task does not
  // use): data parallel then finds them each step (c10d::Reducer's find_unused_parameters,
  // one traversal of the autograd graph); otherwise every parameter must get a gradient.
  virtual bool may_leave_parameters_unused() const { return false; }
  // The units of MicroLoss::second (0 when there is none).
  virtual double second_weight(const Batch& b) { return 0; }
  // This rank's part of a global micro-batch (data parallel only): by default rows
  // [r*b/W, (r+1)*b/W) of every tensor. A trainee whose rows come in groups overrides it.
  virtual Batch shard(const Batch& b, int rank, int world);
  // Tokens the micro-batch moves through the model, for tokens/s.
  virtual int64_t tokens(const Batch& b) = 0;
  virtual MicroLoss forward(const Batch& b) = 0;
  // Held-out or dev evaluation after `step`: named values (a JSON object of numbers, or
  // nested objects whose numbers are scalars too). The trainee logs its own result line.
  virtual nlohmann::json evaluate(int64_t step) = 0;
  // State beyond parameters, optimizer and LibTorch's CPU generator (which the loop keeps): the
  // data position and the trainee's own generators. load_state throws InputError for a state
  // it cannot take (the loop adds the file's name).
  virtual void save_state(Checkpoint& c) = 0;
  virtual void load_state(const Checkpoint& c) = 0;
};

struct LoopOptions {
  int64_t steps = 0, grad_accum = 1;
  int64_t batch_size = 0;        // global examples per step (checked against the world size)
  int64_t log_every = 10, eval_every = 1000, checkpoint_every = 1000, keep = 3;
  OptimizerConfig schedule;      // the learning-rate schedule (learning_rate(), optimizer.h)
  double clip_global_norm = 0;   // > 0: clip_grad_global_norm (optimizer.h) before each update
  bool reports_nll = true;       // false: the trainee has no nll (an encoder's task head), so
                                 // progress records and lines leave it out
  std::string checkpoint_dir;    // step-NNNNNNNN.h5 files
  std::string metrics_file;      // metrics.jsonl (appended)
  // Called once the run can start (the checkpoint to resume from, if any, is read and restored
  // into the trainee) and before the loop writes anything: opens the run's outputs (its
  // directory and log, TensorBoard) and returns the event writer (nullptr: none). A bad
  // checkpoint or one of another model is thus one line with nothing written.
  std::function<EventWriter*()> open_outputs;
  // TensorBoard tags are prefixed with tag + "/" if tag is set.
  std::string tag;               // a fine-tuning task: in records, log lines and TB tags
  std::string steps_key = "train.steps";  // the key `steps` came from, for warnings
  std::string config;            // the resolved YAML, stored in every checkpoint
  bool resume = false;           // continue from the newest checkpoint in checkpoint_dir
  bool eval_if_finished = true;  // a run already at `steps`: evaluate once and report
  std::string banner;            // logged once the checkpoint to resume from has been read (so
                                 // that a bad one's error is not buried under it)
  // The compute dtype of every training step and of evaluation (common/precision.h): fp32 |
  // bf16; eval_precision "" is precision. Parameters, gradients and optimizer stay fp32.
  std::string precision = "fp32", eval_precision;
  // What an out-of-memory error (c10::OutOfMemoryError: a GPU's, or the machine's memory on the
  // CPU, common/host_memory.h) tells the user to change, in a training step and in an
  // evaluation. The run stops with one line (exit 2) naming the step and the micro-batch; the
  // last checkpoint is left as it was.
  std::string train_memory_hint = "raise train.grad_accum (smaller micro-batches, the same batch) or lower "
                                  "train.batch_size";
  std::string eval_memory_hint = "lower eval.batch_size";
  // The config key that asked for deterministic algorithms ("": none; its caller's
  // DeterminismScope, common/determinism.h, holds them): an op without a deterministic
  // implementation stops the run with one line naming it and the key (exit 2), the last
  // checkpoint left as it was.
  std::string deterministic_key;
};

struct LoopResult {
  int64_t step = 0;          // the last completed step
  nlohmann::json last_eval;  // the last evaluation's values ({} if none ran)
  bool interrupted = false;  // stopped by a signal; a checkpoint was saved
  int signal = 0;            // which: SIGINT or SIGTERM (another rank's, seen as SIGTERM)
  bool finished = false;     // step == steps
};

LoopResult train(Trainee& trainee, const LoopOptions& options);

// SIGINT/SIGTERM during an evaluation: evaluations call check_stop() between batches, which in
// a single process throws EvaluationStopped once a signal came (the loop then records no
// evaluation, saves the step's checkpoint and stops), so that a stop waits for one forward pass,
// not a whole evaluation. With several ranks an evaluation runs to its end: a rank leaving it
// alone would leave the others waiting in its collectives.
struct EvaluationStopped : std::runtime_error {
  using std::runtime_error::runtime_error;
};
void check_stop();

// One step's gradients, accumulated into .grad() over the micro-batches (the loop's own rule;
// also what `thx step-probe` runs): returns the step's mean loss and mean NLL per weight unit.
// Data parallel: `micro` are the global micro-batches; this rank runs its shards, `sync`
// sums the gradients over the ranks, and loss, nll and tokens are this rank's parts (their
// sums over the ranks are the step's).
struct StepLoss {
  double loss = 0, nll = 0, weight = 0;
  int64_t tokens = 0;
};
namespace dist {
class GradSync;
}
// Runs at the caller's precision (a PrecisionScope; the loop opens one with LoopOptions::precision).
StepLoss accumulate_gradients(Trainee& trainee, const std::vector<Batch>& micro, dist::GradSync* sync = nullptr);

// The error for a batch that does not split into grad_accum micro-batches of world-size
// shards: "" when it does.
std::string batch_split_error(const std::string& key, int64_t batch_size, int64_t grad_accum, int world_size);

// Restore parameters from a checkpoint's map: every path must be there with its shape, or an
// InputError names the file and the parameter.
void copy_parameters(const std::vector<std::pair<std::string, torch::Tensor>>& params,
                     const std::map<std::string, torch::Tensor>& saved, const std::string& file);

}  // namespace thx
