#include "training/pretrain.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attention/registry.h"
#include "common/determinism.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/h5.h"
#include "common/log.h"
#include "common/precision.h"
#include "common/runtime.h"
#include "common/signals.h"
#include "data/mlm.h"
#include "data/stream.h"
#include "distributed/dist.h"
#include "distributed/launch.h"
#include "training/checkpoint.h"
#include "training/loop.h"
#include "training/objective.h"
#include "training/run_dir.h"
#include "training/tensorboard.h"

// Shapes: Batch (data/stream.h): b examples, n input tokens, t target tokens (T5), P masked
// positions (BERT/ALBERT).
namespace thx {
namespace fs = std::filesystem;
using torch::Tensor;

namespace {

// The objective being trained (training/objective.h), and the device its model lives on:
// batches built on the CPU are moved there.
struct PretrainModel {
  std::unique_ptr<Objective> objective;
  torch::Device device{torch::kCPU};
  torch::nn::Module& module() { return objective->module(); }
  std::vector<std::pair<std::string, Tensor>> params() const { return objective->params(); }
  int64_t parameter_count() const {
    int64_t n = 0;
    for (const auto& [path, p] : params()) n += p.numel();
    return n;
  }
  Objective::Out forward(const Batch& batch) { return objective->forward(to_device(batch, device)); }
};

struct Setup {
  TokenCorpus train, heldout;
  PretrainModel model;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<ExampleStream> stream;
  std::vector<uint8_t> word_starts;  // MLM
  int64_t vocab = 0, outputs = 0;     // the model's vocabulary; predictions per example (memory bound)
  int64_t micro = 0;                  // examples per micro-batch of a process
  MemoryBound memory;                 // the memory check's bound, as the run is configured
  double memory_recomputed = 0;       // an encoder without model.recompute: the bound with it
};

MlmOptions mlm_options(const DataConfig& d) {
  MlmOptions o;
  o.max_seq_length = d.inputs_length;
  o.masked_lm_prob = d.masked_lm_prob;
  o.max_predictions = d.max_predictions_per_seq;
  o.max_ngram = d.max_ngram;
  o.short_seq_prob = d.short_seq_prob;
  o.sentence = d.sentence_task;
  o.whole_word = d.whole_word;
  return o;
}

// shuffle: the training stream (a generated task: its training class of examples).
std::unique_ptr<ExampleStream> make_stream(const PretrainConfig& c, const TokenCorpus& corpus,
                                           const std::vector<uint8_t>& word_starts, uint64_t seed,
                                           bool shuffle) {
  if (!c.data.synthetic.empty()) return std::make_unique<RecallStream>(recall_options(c.data), seed, !shuffle);
  if (c.model.encoder_only())
    return std::make_unique<MlmStream>(corpus, word_starts, mlm_options(c.data), seed, shuffle);
  return std::make_unique<SpanCorruptionStream>(corpus, c.data.inputs_length, c.data.targets_length,
                                                c.data.noise_density, c.data.mean_noise_span_length,
                                                seed, shuffle);
}

// The run's device: train.device, or --device where the config leaves it out.
torch::Device run_device(const PretrainConfig& c) {
  const bool own = !c.train.device.empty();
  const std::string where = own ? "train.device" : "--device";
  const torch::Device device = resolve_device(own ? c.train.device : device_request(), where);
  dist::check_device(device, where);
  return device;
}

// The model is initialized on the CPU (the same draws whatever the device), then moved.
Setup build(const PretrainConfig& c, const torch::Device& device) {
  Setup s;
  const bool synthetic = !c.data.synthetic.empty();
  if (synthetic) s.train.vocab_size = recall_options(c.data).vocab_size;  // no shards: an empty corpus
  else s.train = load_split(c.data.prepared, "train");
  const int64_t vocab = c.model.vocab_size > 0 ? c.model.vocab_size : s.train.vocab_size;
  if (!synthetic) check_data_tokenizer(c, s.train.vocab_size, s.train.convention);
  if (!synthetic && c.model.encoder_only()) s.word_starts = mlm_word_starts(s.train, c.data.prepared);
  check_spec(c);
  const ModelSpec& spec = c.spec;  // resolved when the config was read
  const int64_t micro = c.train.batch_size / (c.train.grad_accum * dist::world_size());
  MemoryKeys keys;
  if (c.model.encoder_only()) keys.outputs = synthetic ? "data.recall.queries" : "data.max_predictions_per_seq";
  const int64_t outputs = trained_outputs(c);
  StepMemory step = step_memory(c);
  step.data_parallel = dist::world_size() > 1;
  const std::map<std::string, int64_t> values = {
      {"train.batch_size", c.train.batch_size},
      {"data.max_predictions_per_seq", c.data.max_predictions_per_seq},
      {"model.d_ff", c.model.d_ff},
      {"model.vocab_size", vocab},
      {"model.d_model", c.model.d_model},
      {"data.inputs_length", c.data.inputs_length},
      {"data.targets_length", c.data.targets_length},
      {"model.encoder_layers", c.model.encoder_layers},
      {"model.decoder_layers", c.model.decoder_layers},
      {"attention.h", spec.encoder_self.h}};
  s.memory = check_training_memory(spec, vocab, micro, c.data.inputs_length, outputs, keys, values, device,
                                   c.train.precision == "bf16", step);
  if (c.model.encoder_only() && !c.model.recompute)
    s.memory_recomputed = training_memory_lower_bound(spec, vocab, micro, c.data.inputs_length, outputs, keys, true,
                                                      device, false, c.train.precision == "bf16", step)
                              .total();
  s.vocab = vocab, s.outputs = outputs, s.micro = micro;
  torch::manual_seed(uint64_t(c.train.seed));
  s.model.objective = make_objective(spec, vocab, c.data.sentence_task != "none");
  s.model.device = device;
  s.model.module().to(device);
  s.optimizer = make_optimizer(c.optimizer, optimized_params(s.model.module(), s.model.params(), c.optimizer));
  s.stream = make_stream(c, s.train, s.word_starts, uint64_t(c.train.seed), true);
  return s;
}

std::vector<Batch> heldout_batches(const PretrainConfig& c, const TokenCorpus& heldout,
                                   const std::vector<uint8_t>& word_starts) {
  auto s = make_stream(c, heldout, word_starts, uint64_t(c.eval.seed), false);
  const int64_t rows = eval_batch_rows(c.eval, c.train, dist::world_size());
  std::vector<Batch> out;
  for (int64_t done = 0; done < c.eval.examples; done += rows)
    out.push_back(s->next(std::min(rows, c.eval.examples - done)));
  return out;
}

// A step's `micro` micro-batches of train.batch_size / micro examples each.
std::vector<Batch> next_micro_batches(ExampleStream& s, const TrainConfig& t, int64_t micro) {
  std::vector<Batch> out;
  for (int64_t i = 0; i < micro; ++i) out.push_back(s.next(t.batch_size / micro));
  return out;
}

EvalMetrics evaluate_model(PretrainModel& model, const std::vector<Batch>& batches) {
  torch::NoGradGuard no_grad;
  const bool was_training = model.module().is_training();
  model.module().eval();
  EvalSums sum;
  // Data parallel: rank r evaluates batches r, r+W, ...; the sums are added over the ranks.
  for (size_t i = size_t(dist::rank()); i < batches.size(); i += size_t(dist::world_size())) {
    check_stop();  // a signal: stop within one batch
    const EvalSums e = model.forward(batches[i]).sums;
    sum.nll += e.nll, sum.tokens += e.tokens, sum.correct += e.correct;
    sum.sentence_count += e.sentence_count, sum.sentence_correct += e.sentence_correct;
  }
  if (dist::active()) {
    torch::Tensor t = torch::tensor({sum.nll, double(sum.tokens), double(sum.correct), double(sum.sentence_count),
                                     double(sum.sentence_correct)}, torch::kFloat64);  // [5]
    dist::all_reduce_sum(t);
    sum.nll = t[0].item<double>(), sum.tokens = int64_t(t[1].item<double>()), sum.correct = int64_t(t[2].item<double>());
    sum.sentence_count = int64_t(t[3].item<double>()), sum.sentence_correct = int64_t(t[4].item<double>());
  }
  model.module().train(was_training);
  return model.objective->metrics(sum);
}

}  // namespace


std::vector<OptimizedParam> optimized_params(T5Impl& model, const std::string& mode) {
  OptimizerConfig c;
  c.factor_attention = mode;
  return optimized_params(model, model.named_parameters_by_path(), c);
}

namespace {

// Pretraining behind the loop's interface: the stream is the data position (the loop keeps
// LibTorch's CPU generator, dropout's).
class PretrainTrainee : public Trainee {
 public:
  // Built before a checkpoint is restored: the mixing matrices it copies are the initial ones.
  PretrainTrainee(const PretrainConfig& c, Setup& s) : c_(c), s_(s) {
    for (const auto& [path, p] : s_.model.params()) {
      const std::string name = path.substr(path.find_last_of('/') + 1);
      if (name == "P_l" || name == "P_w") mixing_.push_back({name, p, p.detach().clone(), {}});
    }
  }

  torch::nn::Module& module() override { return s_.model.module(); }
  std::vector<std::pair<std::string, Tensor>> parameters() override { return s_.model.params(); }
  Optimizer& optimizer() override { return *s_.optimizer; }
  std::vector<Batch> next_step(int64_t micro) override {
    for (Mixing& m : mixing_) m.before_step = m.param.detach().clone();  // [h, h]: a few KB
    return next_micro_batches(*s_.stream, c_.train, micro);
  }
  double weight(const Batch& b) override { return s_.model.objective->weight(b); }
  int64_t tokens(const Batch& b) override { return b.inputs.numel() + b.targets.numel(); }
  MicroLoss forward(const Batch& b) override {
    auto o = s_.model.forward(b);
    return {o.loss, o.sums.nll, o.second};
  }
  double second_weight(const Batch& b) override { return s_.model.objective->second_weight(b); }
  nlohmann::json evaluate(int64_t at) override {
    if (eval_batches_.empty()) eval_batches_ = heldout_batches(c_, s_.heldout, s_.word_starts);
    const EvalMetrics m = evaluate_model(s_.model, eval_batches_);
    last = m;
    nlohmann::json j{{"ln_ppl", m.ln_ppl}};
    if (m.mlm_accuracy) j["mlm_accuracy"] = *m.mlm_accuracy;
    if (m.sentence_accuracy) j[c_.data.sentence_task + "_accuracy"] = *m.sentence_accuracy;
    mixing_movement(j);
    auto log = thx::log("train");
    if (!c_.data.synthetic.empty())
      log->info("step {}: held-out recall accuracy {:.2f}%, ln(PPL) {:.4f} ({} examples of {} queries)", at,
                100 * m.mlm_accuracy.value_or(0), m.ln_ppl, c_.eval.examples, recall_options(c_.data).queries);
    else if (c_.model.encoder_only())
      log->info("step {}: held-out MLM ln(PPL) {:.4f}, MLM accuracy {:.2f}%{} ({} examples)", at, m.ln_ppl,
                100 * m.mlm_accuracy.value_or(0),
                m.sentence_accuracy ? fmt::format(", {} accuracy {:.2f}%", c_.data.sentence_task,
                                                  100 * *m.sentence_accuracy) : "",
                c_.eval.examples);
    else
      log->info("step {}: held-out ln(PPL) {:.4f} ({} examples)", at, m.ln_ppl, c_.eval.examples);
    return j;
  }
  void save_state(Checkpoint& ck) override { ck.stream = s_.stream->state(); }
  void load_state(const Checkpoint& ck) override { s_.stream->set_state(ck.stream); }

  EvalMetrics last;

 private:
  // Talking-heads' mixing matrices (P_l, P_w): how far they moved from their initialization,
  // ||P - P_0|| / ||P_0||, and the size of the last step's update, ||dP|| / ||P|| (Frobenius),
  // each the mean over the model's matrices of that name: <name>_drift, <name>_update.
  struct Mixing {
    std::string name;
    Tensor param, init, before_step;
  };
  void mixing_movement(nlohmann::json& j) const {
    for (const char* name : {"P_l", "P_w"}) {
      double drift = 0, update = 0;
      int n = 0, updates = 0;
      for (const Mixing& m : mixing_) {
        if (m.name != name) continue;
        const Tensor p = m.param.detach();
        drift += (p - m.init).norm().item<double>() / std::max(m.init.norm().item<double>(), 1e-30), ++n;
        if (m.before_step.defined())
          update += (p - m.before_step).norm().item<double>() / std::max(p.norm().item<double>(), 1e-30), ++updates;
      }
      if (n) j[std::string(name) + "_drift"] = drift / n;
      if (updates) j[std::string(name) + "_update"] = update / updates;
    }
  }

  const PretrainConfig& c_;
  Setup& s_;
  std::vector<Batch> eval_batches_;
  std::vector<Mixing> mixing_;
};

void describe_model(const PretrainConfig& c, PretrainModel& model, int64_t vocab) {
  auto log = thx::log("train");
  // Where it trains: the CPU's threads, or the GPU (whose run would otherwise say "1 thread").
  const int threads = torch::get_num_threads();
  const std::string on = (model.device.is_cpu()
                              ? fmt::format("{} thread{}", threads, threads == 1 ? "" : "s")
                              : fmt::format("on {} ({})", model.device.str(), device_description(model.device))) +
                         (c.train.deterministic ? ", deterministic algorithms (train.deterministic)" : "");
  if (!c.model.encoder_only()) {
    log->info("T5 {} parameters; {} steps of {} examples ({} x {} -> {}), {}", model.parameter_count(),
              c.train.steps, c.train.batch_size, c.data.inputs_length,
              span_lengths(c.data.inputs_length, c.data.noise_density, c.data.mean_noise_span_length).raw,
              c.data.targets_length, on);
    return;
  }
  if (!c.data.synthetic.empty()) {
    const RecallOptions r = recall_options(c.data);
    log->info("{} {} parameters; {} steps of {} examples of associative recall ({} tokens: {} pairs, {} queries; "
              "{} keys, {} values), {}", c.model.type == "bert" ? "BERT" : "ALBERT", model.parameter_count(),
              c.train.steps, c.train.batch_size, c.data.inputs_length, r.pairs, r.queries, recall_keys(r),
              recall_values(r), on);
  } else {
    log->info("{} {} parameters; {} steps of {} examples of {} tokens (MLM {} + {}), {}",
              c.model.type == "bert" ? "BERT" : "ALBERT", model.parameter_count(), c.train.steps, c.train.batch_size,
              c.data.inputs_length, c.data.max_predictions_per_seq, c.data.sentence_task, on);
  }
  // The published totals (BERT-base 109,482,240; ALBERT-base 11,683,584) count the
  // embeddings at the unpadded vocabulary, the layers and the pooler: not the pretraining
  // heads, nor the word embedding's padding rows (to a multiple of 128).
  int64_t encoder = 0, heads = 0, padding = 0;
  for (const auto& [path, p] : model.params()) {
    if (path.rfind("mlm/", 0) == 0 || path.rfind("sentence/", 0) == 0) {
      heads += p.numel();
    } else if (path == "embeddings/word") {
      encoder += vocab * p.size(1), padding += p.numel() - vocab * p.size(1);
    } else {
      encoder += p.numel();
    }
  }
  log->info("of which the encoder {} (embeddings at V = {}, layers and pooler: what the published BERT-base "
            "109,482,240 and ALBERT-base 11,683,584 count), the pretraining heads {} and the word embedding's "
            "padding to a multiple of 128 {}", encoder, vocab, heads, padding);
}

// The memory check's bound (models/spec.h), as the run is configured, against what it checked:
// the first line of the loop's banner, so that train.log keeps it.
std::string memory_line(const PretrainConfig& c, const Setup& s) {
  const std::string recompute =
      s.memory_recomputed > 0
          ? "; with model.recompute: true, at least " + format_gb(s.memory_recomputed)
      : c.model.encoder_only() && c.model.recompute ? " (model.recompute: layers recomputed in the backward pass)"
                                                    : "";
  return memory_line(s.memory, s.micro, s.model.device) + recompute;
}

}  // namespace

PretrainResult run_pretrain(const PretrainConfig& c, const std::string& run_dir, bool resume,
                            const std::vector<std::string>& allow_changes) {
  RunDirOptions ro;
  ro.dir = run_dir, ro.yaml = c.yaml, ro.resume = resume, ro.allow_changes = allow_changes;
  ro.normalize = [](const std::string& yaml, const std::string& origin) {
    return normalize_pretrain_yaml(yaml, origin);
  };
  ro.checkpoint_dirs = {(fs::path(run_dir) / "checkpoints").string()};
  ro.log_file = "train.log";
  const torch::Device device = run_device(c);
  const DeterminismScope determinism(c.train.deterministic, device, "train.deterministic");  // before any product
  {
    check_precision(c.train.precision, device, "train.precision");
    if (!c.eval.precision.empty()) check_precision(c.eval.precision, device, "eval.precision");
    const std::string e = batch_split_error("train.batch_size", c.train.batch_size, c.train.grad_accum,
                                            dist::world_size());
    if (!e.empty()) throw InputError(e);
  }
  // Only rank 0 has the run directory (the others may be on other nodes).
  std::optional<RunDirectory> dir;
  dist::on_rank0([&] { dir.emplace(ro); });
  Setup s = build(c, device);  // validates the data before anything is written
  if (c.data.synthetic.empty()) s.heldout = load_split(c.data.prepared, "heldout");
  std::optional<EventWriter> events;

  LoopOptions o;
  o.steps = c.train.steps, o.grad_accum = c.train.grad_accum, o.log_every = c.train.log_every;
  o.batch_size = c.train.batch_size;
  o.eval_every = c.eval.every, o.checkpoint_every = c.checkpoint.every, o.keep = c.checkpoint.keep;
  o.schedule = c.optimizer;
  o.clip_global_norm = clip_global_norm(c.optimizer, c.model.encoder_only());
  o.checkpoint_dir = ro.checkpoint_dirs.front();
  o.metrics_file = (fs::path(run_dir) / "metrics.jsonl").string();
  o.open_outputs = [&]() -> EventWriter* {  // once the checkpoint to resume from was read and restored
    if (!dir) return nullptr;
    events.emplace((fs::path(run_dir) / "tb").string());  // first: an unwritable tb/ stops before config.yaml
    dir->open();
    return &*events;
  };
  o.config = c.yaml;
  o.resume = resume;
  o.precision = c.train.precision, o.eval_precision = c.eval.precision;
  if (c.train.deterministic) o.deterministic_key = "train.deterministic";
  o.train_memory_hint = with_th_path_advice(o.train_memory_hint, c.spec, s.model.device);
  o.banner = memory_line(c, s) + "\nresolved config:\n" + c.yaml;
  describe_model(c, s.model, s.vocab);
  PretrainTrainee trainee(c, s);
  const LoopResult r = train(trainee, o);
  PretrainResult result;
  result.step = r.step, result.interrupted = r.interrupted, result.signal = r.signal;
  result.ln_ppl = trainee.last.ln_ppl;
  result.mlm_accuracy = trainee.last.mlm_accuracy, result.sentence_accuracy = trainee.last.sentence_accuracy;
  return result;
}


std::string result_line(const PretrainConfig& c, const std::string& run_dir, const PretrainResult& r) {
  if (!c.data.synthetic.empty())
    return fmt::format("{} step {} held-out recall accuracy {:.2f}%, ln(PPL) {:.4f}", run_dir, r.step,
                       100 * r.mlm_accuracy.value_or(0), r.ln_ppl);
  std::string extra;
  if (r.mlm_accuracy) extra += fmt::format(", MLM accuracy {:.2f}%", 100 * *r.mlm_accuracy);
  if (r.sentence_accuracy) extra += fmt::format(", {} accuracy {:.2f}%", c.data.sentence_task, 100 * *r.sentence_accuracy);
  return fmt::format("{} step {} held-out {}ln(PPL) {:.4f}{}", run_dir, r.step, r.mlm_accuracy ? "MLM " : "", r.ln_ppl,
                     extra);
}

PretrainResult evaluate_pretrained(const PretrainConfig& c, const std::map<std::string, Tensor>& params, int64_t step,
                                   const std::string& file) {
  const torch::Device device = run_device(c);
  const std::string precision = c.eval.precision.empty() ? c.train.precision : c.eval.precision;
  check_precision(precision, device, c.eval.precision.empty() ? "train.precision" : "eval.precision");
  Setup s = build(c, device);  // the run's model, built as it was (then its parameters copied in)
  if (c.data.synthetic.empty()) s.heldout = load_split(c.data.prepared, "heldout");
  copy_parameters(s.model.params(), params, file);
  const SignalScope signals;  // a signal stops it within a batch (check_stop)
  PrecisionScope scope(precision);
  EvalMetrics m;
  try {
    m = evaluate_model(s.model, heldout_batches(c, s.heldout, s.word_starts));
  } catch (const EvaluationStopped&) {
    throw Interrupted(stop_signal(), fmt::format("eval: interrupted by {} while evaluating {} on the held-out split",
                                                 signal_name(stop_signal()), file));
  }
  PretrainResult r;
  r.step = step, r.ln_ppl = m.ln_ppl, r.mlm_accuracy = m.mlm_accuracy, r.sentence_accuracy = m.sentence_accuracy;
  return r;
}

void run_step_probe(const PretrainConfig& c, const std::string& out) {
  const torch::Device device = run_device(c);
  const DeterminismScope determinism(c.train.deterministic, device, "train.deterministic");
  check_precision(c.train.precision, device, "train.precision");
  Setup s = build(c, device);
  const std::vector<Batch> micro = next_micro_batches(*s.stream, c.train, c.train.grad_accum);
  const auto fields = s.model.objective->probe_fields(micro);
  H5Writer w(out);
  for (const auto& [name, t] : fields) w.write("/batch/" + name, t);
  const auto params = s.model.params();
  for (const auto& [path, p] : params) w.write("/params_before/" + path, p);
  s.model.module().train();
  PretrainTrainee trainee(c, s);
  StepLoss l;
  {  // the step at train.precision; its gradients are the fp32 ones on the master weights
    PrecisionScope precision(c.train.precision);
    l = accumulate_gradients(trainee, micro);
  }
  for (const auto& [path, p] : params)
    if (p.grad().defined()) w.write("/grads/" + path, p.grad());
  // /grads: as the backward pass left them; the update uses them clipped (as the loop does).
  std::vector<Tensor> tensors;
  for (const auto& [path, p] : params) tensors.push_back(p);
  w.write_scalar("/grad_norm", clip_grad_global_norm(tensors, clip_global_norm(c.optimizer, c.model.encoder_only())));
  const double lr = learning_rate(c.optimizer, 1, c.train.steps);
  s.optimizer->step(lr);
  for (const auto& [path, p] : params) w.write("/params_after/" + path, p);
  for (const auto& [k, v] : s.optimizer->state()) w.write("/optimizer/" + k, v);
  w.write_scalar("/loss", l.loss);
  w.write_scalar("/nll", l.nll);
  w.write_scalar("/learning_rate", lr);
  w.attr("/", "config", c.yaml);
  w.commit();
  thx::log("probe")->info("wrote {}: loss {:.6f}, nll {:.6f}, lr {:.3g}", out, l.loss, l.nll, lr);
}

}  // namespace thx
