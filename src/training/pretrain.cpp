#include "training/pretrain.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <csignal>
#include <thread>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/fs.h"
#include "common/h5.h"
#include "common/log.h"
#include "data/mlm.h"
#include "data/stream.h"
#include "training/checkpoint.h"

namespace thx {
namespace fs = std::filesystem;
using torch::Tensor;

namespace {

volatile std::sig_atomic_t g_stop = 0;
// The first SIGINT/SIGTERM asks for a checkpoint and a clean stop after the current step; a
// second one, while that is pending, ends the process at once (signal and raise are both
// async-signal-safe).
void on_signal(int sig) {
  if (g_stop) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
  g_stop = 1;
}

// Installs SIGINT/SIGTERM handlers for the duration of a run.
struct SignalScope {
  using Handler = void (*)(int);
  Handler old_int, old_term;
  SignalScope() {
    g_stop = 0;
    old_int = std::signal(SIGINT, on_signal);
    old_term = std::signal(SIGTERM, on_signal);
  }
  ~SignalScope() {
    std::signal(SIGINT, old_int);
    std::signal(SIGTERM, old_term);
  }
};

// The model being trained: T5 (span corruption) or BERT/ALBERT (MLM + sentence task).
struct Trainee {
  T5 t5{nullptr};
  EncoderModel encoder{nullptr};
  torch::nn::Module& module() { return t5 ? static_cast<torch::nn::Module&>(*t5) : *encoder; }
  std::vector<std::pair<std::string, Tensor>> params() const {
    return t5 ? t5->named_parameters_by_path() : encoder->named_parameters_by_path();
  }
  int64_t parameter_count() {
    int64_t n = 0;
    for (const auto& [path, p] : params()) n += p.numel();
    return n;
  }
  struct Out {
    Tensor loss;
    EvalSums sums;
  };
  Out forward(const Batch& b) {
    Out o;
    if (t5) {
      auto r = t5->forward(b.inputs, b.decoder_inputs, b.targets);
      o.loss = r.loss;
      o.sums.nll = r.nll_sum.item<double>(), o.sums.tokens = r.tokens;
    } else {
      auto r = encoder->forward(b.inputs, b.token_types, b.positions, b.targets, b.labels);
      o.loss = r.loss;
      o.sums.nll = r.mlm_nll_sum.item<double>(), o.sums.tokens = r.mlm_tokens;
      o.sums.correct = r.mlm_correct;
      o.sums.sentence_count = r.sentence_count, o.sums.sentence_correct = r.sentence_correct;
    }
    return o;
  }
};

struct Setup {
  TokenCorpus train, heldout;
  Trainee model;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<ExampleStream> stream;
  std::vector<uint8_t> word_starts;  // MLM
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

std::unique_ptr<ExampleStream> make_stream(const PretrainConfig& c, const TokenCorpus& corpus,
                                           const std::vector<uint8_t>& word_starts, uint64_t seed,
                                           bool shuffle) {
  if (c.model.encoder_only())
    return std::make_unique<MlmStream>(corpus, word_starts, mlm_options(c.data), seed, shuffle);
  return std::make_unique<SpanCorruptionStream>(corpus, c.data.inputs_length, c.data.targets_length,
                                                c.data.noise_density, c.data.mean_noise_span_length,
                                                seed, shuffle);
}

Setup build(const PretrainConfig& c) {
  Setup s;
  s.train = load_split(c.data.prepared, "train");
  const int64_t vocab = c.model.vocab_size > 0 ? c.model.vocab_size : s.train.vocab_size;
  THX_CHECK(vocab >= s.train.vocab_size, "model.vocab_size {} is smaller than the data's vocabulary {}",
            vocab, s.train.vocab_size);
  if (c.model.encoder_only()) s.word_starts = mlm_word_starts(s.train, c.data.prepared);
  else if (s.train.convention != "t5")
    throw InputError(fmt::format(
        "{}: tokenized with {} ids; T5 needs T5's (eos 1 and 100 sentinels): train one with "
        "`thx spm-train --convention t5` and run `thx prepare` with it",
        c.data.prepared, s.train.convention));
  torch::manual_seed(uint64_t(c.train.seed));
  if (c.model.encoder_only())
    s.model.encoder = EncoderModel(c.model, c.attention.encoder_self, vocab, c.data.sentence_task != "none");
  else
    s.model.t5 = T5(c.model, c.attention, vocab);
  s.optimizer = make_optimizer(c.optimizer, optimized_params(s.model.module(), s.model.params(), c.optimizer));
  s.stream = make_stream(c, s.train, s.word_starts, uint64_t(c.train.seed), true);
  return s;
}

std::vector<Batch> heldout_batches(const PretrainConfig& c, const TokenCorpus& heldout,
                                   const std::vector<uint8_t>& word_starts) {
  auto s = make_stream(c, heldout, word_starts, uint64_t(c.eval.seed), false);
  std::vector<Batch> out;
  for (int64_t done = 0; done < c.eval.examples; done += c.eval.batch_size)
    out.push_back(s->next(std::min(c.eval.batch_size, c.eval.examples - done)));
  return out;
}

// One optimizer step's gradients: micro-batches weighted by their share of target (or masked)
// tokens, so that the gradient is that of the mean over the whole batch.
struct StepLoss {
  double loss = 0, nll = 0;
  int64_t tokens = 0;
};

int64_t target_tokens(const Batch& b) { return (b.targets != 0).sum().item<int64_t>(); }

StepLoss accumulate_gradients(Trainee& model, const std::vector<Batch>& micro) {
  int64_t total = 0;
  for (const auto& b : micro) total += target_tokens(b);
  StepLoss r;
  r.tokens = total;
  for (const auto& b : micro) {
    auto out = model.forward(b);
    const double share = double(out.sums.tokens) / std::max<int64_t>(total, 1);
    (out.loss * share).backward();
    r.loss += out.loss.item<double>() * share;
    r.nll += out.sums.nll / std::max<int64_t>(total, 1);
  }
  return r;
}

std::vector<Batch> next_micro_batches(ExampleStream& s, const TrainConfig& t) {
  std::vector<Batch> micro;
  for (int64_t i = 0; i < t.grad_accum; ++i) micro.push_back(s.next(t.batch_size / t.grad_accum));
  return micro;
}

EvalMetrics evaluate_trainee(Trainee& model, const std::vector<Batch>& batches) {
  torch::NoGradGuard no_grad;
  const bool was_training = model.module().is_training();
  model.module().eval();
  EvalSums sum;
  for (const auto& b : batches) {
    const EvalSums e = model.forward(b).sums;
    sum.nll += e.nll, sum.tokens += e.tokens, sum.correct += e.correct;
    sum.sentence_count += e.sentence_count, sum.sentence_correct += e.sentence_correct;
  }
  model.module().train(was_training);
  EvalMetrics m;
  m.ln_ppl = sum.nll / double(std::max<int64_t>(sum.tokens, 1));
  if (model.encoder) {
    m.mlm_accuracy = double(sum.correct) / double(std::max<int64_t>(sum.tokens, 1));
    if (sum.sentence_count > 0) m.sentence_accuracy = double(sum.sentence_correct) / double(sum.sentence_count);
  }
  return m;
}

void zero_grad(torch::nn::Module& m) {
  for (auto& p : m.parameters()) p.mutable_grad() = Tensor();
}

}  // namespace

std::vector<OptimizedParam> optimized_params(torch::nn::Module& model,
                                             const std::vector<std::pair<std::string, Tensor>>& params,
                                             const OptimizerConfig& c) {
  const std::string& mode = c.factor_attention;
  std::map<std::string, Variant> variants;  // attention module path -> its variant
  for (const auto& item : model.named_modules()) {
    if (auto a = std::dynamic_pointer_cast<Attention>(item.value()))
      variants[module_path(item.key())] = a->dims().variant;
  }
  std::vector<OptimizedParam> out;
  for (const auto& [path, p] : params) {
    OptimizedParam op{path, p, p.sizes().vec(), false};
    const auto slash = path.find_last_of('/');
    const std::string name = path.substr(slash + 1), owner = path.substr(0, slash);
    if (name == "P_l" || name == "P_w") op.never_factor = true;
    auto it = variants.find(owner);
    if (it != variants.end() && (name == "P_q" || name == "P_k" || name == "P_v" || name == "P_o")) {
      const bool combined = mode == "combined" || (mode == "mesh_tf" && it->second == Variant::multi_head);
      if (combined) op.view = {op.view[0], op.view[1] * op.view[2]};  // [d, d_k*h]
    }
    for (const auto& key : c.no_decay)
      if (!key.empty() && path.find(key) != std::string::npos) op.no_decay = true;
    out.push_back(op);
  }
  return out;
}

std::vector<OptimizedParam> optimized_params(T5Impl& model, const std::string& mode) {
  OptimizerConfig c;
  c.factor_attention = mode;
  return optimized_params(model, model.named_parameters_by_path(), c);
}

double evaluate(T5Impl& model, const std::vector<Batch>& batches) {
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  double nll = 0;
  int64_t tokens = 0;
  for (const auto& b : batches) {
    auto out = model.forward(b.inputs, b.decoder_inputs, b.targets);
    nll += out.nll_sum.item<double>(), tokens += out.tokens;
  }
  model.train(was_training);
  return nll / std::max<int64_t>(tokens, 1);
}

namespace {

// An exclusive lock on <run_dir>/.lock for the life of a run, so that two processes never
// train in one directory (a sweep restarted while a run it started is still saving). Waits up
// to a minute for the other to finish.
struct RunDirLock {
  int fd = -1;
  ~RunDirLock() {
    if (fd >= 0) ::close(fd);
  }
  void acquire(const std::string& dir) {
    if (fd >= 0) return;
    fd = ::open((fs::path(dir) / ".lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (fd < 0) throw InputError(fmt::format("{}: cannot create its lock file", dir));
    for (int i = 0; ::flock(fd, LOCK_EX | LOCK_NB) != 0; ++i) {
      if (i == 0) thx::log("train")->warn("{}: another process is training here; waiting", dir);
      if (i == 600)
        throw InputError(fmt::format("{}: another process is training in this run directory", dir));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
};

}  // namespace

PretrainResult run_pretrain(const PretrainConfig& c, const std::string& run_dir, bool resume) {
  auto log = thx::log("train");
  RunDirLock lock;
  if (fs::is_directory(run_dir)) lock.acquire(run_dir);
  const std::string ckpt_dir = (fs::path(run_dir) / "checkpoints").string();
  const auto existing = list_checkpoints(ckpt_dir);
  if (!resume && !existing.empty())
    throw InputError(fmt::format("{}: the run directory already has checkpoints; pass --resume to "
                                 "continue it, or choose another --run-dir", run_dir));
  Setup s = build(c);  // validates the data before anything is written
  s.heldout = load_split(c.data.prepared, "heldout");
  log->info("resolved config:\n{}", c.yaml);
  fs::create_directories(ckpt_dir);
  lock.acquire(run_dir);
  write_file_atomic((fs::path(run_dir) / "config.yaml").string(), c.yaml);
  add_log_file((fs::path(run_dir) / "train.log").string());
  struct LogFileScope {
    ~LogFileScope() { remove_log_file(); }
  } log_file_scope;

  PretrainResult result;
  int64_t step = 0;
  if (resume && !existing.empty()) {
    const Checkpoint ck = load_checkpoint(existing.back());
    torch::NoGradGuard g;
    for (const auto& [path, p] : s.model.params()) {
      auto it = ck.params.find(path);
      if (it == ck.params.end())
        throw InputError(fmt::format("{}: no parameter {} (was the model configured differently?)",
                                     existing.back(), path));
      if (it->second.sizes() != p.sizes())
        throw InputError(fmt::format("{}: {} has shape {}, the model has {} (was the model "
                                     "configured differently?)", existing.back(), path,
                                     c10::str(it->second.sizes()), c10::str(p.sizes())));
      p.copy_(it->second);
    }
    s.optimizer->load_state(ck.optimizer, ck.optimizer_step);
    s.stream->set_state(ck.stream);
    if (ck.rng.defined()) {
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      gen.set_state(ck.rng);
    }
    step = ck.step;
    log->info("resumed from {} at step {}", existing.back(), step);
  } else if (resume) {
    log->warn("--resume: no checkpoint in {}; starting from step 0", ckpt_dir);
  }

  const std::vector<Batch> eval_batches = heldout_batches(c, s.heldout, s.word_starts);
  std::ofstream metrics((fs::path(run_dir) / "metrics.jsonl").string(), std::ios::app);
  auto record = [&](const nlohmann::json& j) { metrics << j.dump() << "\n" << std::flush; };
  auto save = [&](int64_t at) {
    Checkpoint ck;
    for (const auto& [path, p] : s.model.params()) ck.params[path] = p;
    ck.optimizer = s.optimizer->state();
    ck.step = at;
    ck.optimizer_step = s.optimizer->steps();
    ck.stream = s.stream->state();
    ck.rng = at::detail::getDefaultCPUGenerator().get_state();
    ck.config = c.yaml;
    const std::string path = checkpoint_path(ckpt_dir, at);
    save_checkpoint(path, ck);
    prune_checkpoints(ckpt_dir, c.checkpoint.keep);
    log->info("checkpoint {}", path);
  };
  auto eval_now = [&](int64_t at) {
    const EvalMetrics m = evaluate_trainee(s.model, eval_batches);
    result.ln_ppl = m.ln_ppl;
    result.mlm_accuracy = m.mlm_accuracy, result.sentence_accuracy = m.sentence_accuracy;
    nlohmann::json j{{"step", at}, {"ln_ppl", m.ln_ppl}};
    if (m.mlm_accuracy) j["mlm_accuracy"] = *m.mlm_accuracy;
    if (m.sentence_accuracy) j[c.data.sentence_task + "_accuracy"] = *m.sentence_accuracy;
    record(j);
    if (s.model.encoder)
      log->info("step {}: held-out MLM ln(PPL) {:.4f}, MLM accuracy {:.2f}%{} ({} examples)", at,
                m.ln_ppl, 100 * m.mlm_accuracy.value_or(0),
                m.sentence_accuracy ? fmt::format(", {} accuracy {:.2f}%", c.data.sentence_task,
                                                  100 * *m.sentence_accuracy) : "",
                c.eval.examples);
    else
      log->info("step {}: held-out ln(PPL) {:.4f} ({} examples)", at, m.ln_ppl, c.eval.examples);
  };

  if (s.model.t5) {
    log->info("T5 {} parameters; {} steps of {} examples ({} x {} -> {}), {} threads",
              s.model.parameter_count(), c.train.steps, c.train.batch_size, c.data.inputs_length,
              span_lengths(c.data.inputs_length, c.data.noise_density, c.data.mean_noise_span_length).raw,
              c.data.targets_length, torch::get_num_threads());
  } else {
    log->info("{} {} parameters; {} steps of {} examples of {} tokens (MLM {} + {}), {} threads",
              c.model.type == "bert" ? "BERT" : "ALBERT", s.model.parameter_count(), c.train.steps,
              c.train.batch_size, c.data.inputs_length, c.data.max_predictions_per_seq,
              c.data.sentence_task, torch::get_num_threads());
    const int64_t micro = c.train.batch_size / c.train.grad_accum;
    const double gib = 1024.0 * 1024 * 1024;
    log->info("activation memory estimate per micro-batch of {}: {:.2f} GiB{}", micro,
              encoder_activation_bytes(c.model, c.attention.encoder_self, micro, c.data.inputs_length,
                                       c.model.recompute) / gib,
              c.model.recompute ? " (model.recompute: layers are recomputed in the backward pass)"
                                : fmt::format(" (with model.recompute: {:.2f} GiB)",
                                              encoder_activation_bytes(c.model, c.attention.encoder_self, micro,
                                                                       c.data.inputs_length, true) / gib));
  }
  if (step >= c.train.steps) {  // a finished run: report where it ended
    eval_now(step);
    result.step = step;
    return result;
  }
  SignalScope signals;
  s.model.module().train();
  const auto t_start = std::chrono::steady_clock::now();
  const int64_t first = step;
  double window_time = 0;
  int64_t window_tokens = 0, window_steps = 0;
  while (step < c.train.steps) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<Batch> micro = next_micro_batches(*s.stream, c.train);
    zero_grad(s.model.module());
    const StepLoss l = accumulate_gradients(s.model, micro);
    if (!std::isfinite(l.loss))
      throw RunError(fmt::format("step {}: the loss is {}; training stopped and no "
                                           "checkpoint was written (the last good one is kept in {})",
                                           step + 1, std::isnan(l.loss) ? "NaN" : l.loss > 0 ? "+inf" : "-inf", ckpt_dir));
    const double lr = learning_rate(c.optimizer, step + 1, c.train.steps);
    s.optimizer->step(lr);
    ++step;
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    int64_t tokens = 0;
    for (const auto& b : micro) tokens += b.inputs.numel() + b.targets.numel();
    window_time += dt, window_tokens += tokens, ++window_steps;
    if (step % c.train.log_every == 0 || step == c.train.steps) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
      const double eta = elapsed / double(step - first) * double(c.train.steps - step);
      record({{"step", step}, {"loss", l.loss}, {"nll", l.nll}, {"lr", lr},
              {"tokens_per_s", window_tokens / window_time}, {"step_time_s", window_time / window_steps}});
      log->info("step {}/{} loss {:.4f} nll {:.4f} lr {:.3g} | {:.0f} tok/s {:.3f} s/step ETA {}",
                step, c.train.steps, l.loss, l.nll, lr, window_tokens / window_time,
                window_time / window_steps, format_duration(eta));
      window_time = 0, window_tokens = 0, window_steps = 0;
    }
    const bool last = step == c.train.steps;
    if (step % c.eval.every == 0 || last) eval_now(step);
    if (step % c.checkpoint.every == 0 || last) save(step);
    if (g_stop) {
      if (!(step % c.checkpoint.every == 0 || last)) save(step);
      log->warn("stopped by a signal at step {}; resume with --resume", step);
      result.interrupted = true;
      break;
    }
  }
  result.step = step;
  return result;
}

void run_step_probe(const PretrainConfig& c, const std::string& out) {
  Setup s = build(c);
  const std::vector<Batch> micro = next_micro_batches(*s.stream, c.train);
  H5Writer w(out);
  const Batch& b = micro.front();
  if (s.model.encoder) {
    THX_CHECK(micro.size() == 1, "step-probe: BERT/ALBERT probes take train.grad_accum 1");
    w.write("/batch/inputs", b.inputs.to(torch::kInt32));
    w.write("/batch/token_types", b.token_types.to(torch::kInt32));
    w.write("/batch/positions", b.positions.to(torch::kInt32));
    w.write("/batch/targets", b.targets.to(torch::kInt32));
    w.write("/batch/labels", b.labels.to(torch::kInt32));
  } else if (micro.size() == 1) {
    w.write("/batch/inputs", b.inputs.to(torch::kInt32));
    w.write("/batch/decoder_inputs", b.decoder_inputs.to(torch::kInt32));
    w.write("/batch/targets", b.targets.to(torch::kInt32));
  } else {
    auto cat = [&](auto field) {
      std::vector<Tensor> t;
      for (const auto& m : micro) t.push_back(field(m).to(torch::kInt32));
      return torch::cat(t);
    };
    w.write("/batch/inputs", cat([](const Batch& m) { return m.inputs; }));
    w.write("/batch/decoder_inputs", cat([](const Batch& m) { return m.decoder_inputs; }));
    w.write("/batch/targets", cat([](const Batch& m) { return m.targets; }));
  }
  const auto params = s.model.params();
  for (const auto& [path, p] : params) w.write("/params_before/" + path, p);
  s.model.module().train();
  const StepLoss l = accumulate_gradients(s.model, micro);
  for (const auto& [path, p] : params)
    if (p.grad().defined()) w.write("/grads/" + path, p.grad());
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
