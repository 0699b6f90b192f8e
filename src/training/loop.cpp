#include "training/loop.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "common/log.h"
#include "training/tensorboard.h"

// Shapes: micro-batches are data/stream.h's Batch (b examples); losses are scalars.
namespace thx {
namespace fs = std::filesystem;
using json = nlohmann::json;
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

// Installs SIGINT/SIGTERM handlers for the duration of a loop.
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

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

void copy_parameters(const std::vector<std::pair<std::string, Tensor>>& params,
                     const std::map<std::string, Tensor>& saved, const std::string& file) {
  torch::NoGradGuard g;
  for (const auto& [path, p] : params) {
    auto it = saved.find(path);
    if (it == saved.end())
      throw InputError(fmt::format("{}: no parameter {} (was the model configured differently?)", file, path));
    if (it->second.sizes() != p.sizes())
      throw InputError(fmt::format("{}: {} has shape {}, the model has {} (was the model configured "
                                   "differently?)", file, path, c10::str(it->second.sizes()), c10::str(p.sizes())));
    p.copy_(it->second);
  }
}

StepLoss accumulate_gradients(Trainee& t, const std::vector<Batch>& micro) {
  StepLoss r;
  std::vector<double> weights;
  for (const auto& b : micro) weights.push_back(t.weight(b)), r.weight += weights.back();
  const double total = r.weight > 0 ? r.weight : 1.0;
  for (size_t i = 0; i < micro.size(); ++i) {
    const Batch& b = micro[i];
    const MicroLoss out = t.forward(b);
    const double share = weights[i] / total;
    (out.loss * share).backward();
    r.loss += out.loss.item<double>() * share;
    r.nll += out.nll_sum / total;
  }
  return r;
}

LoopResult train(Trainee& t, const LoopOptions& o) {
  auto log = thx::log("train");
  const std::string prefix = o.tag.empty() ? "" : o.tag + " ";
  const std::string tb_prefix = o.tag.empty() ? "" : o.tag + "/";
  LoopResult result;
  fs::create_directories(o.checkpoint_dir);
  const auto existing = list_checkpoints(o.checkpoint_dir);
  // The parameter list is fixed for the run: taken once, not per step.
  const std::vector<std::pair<std::string, Tensor>> params = t.parameters();
  int64_t step = 0;
  if (o.resume && !existing.empty()) {
    const std::string& file = existing.back();
    const Checkpoint ck = load_checkpoint(file);
    copy_parameters(params, ck.params, file);
    t.optimizer().load_state(ck.optimizer, ck.optimizer_step);
    try {
      t.load_state(ck);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: {}", file, e.what()));
    } catch (const std::exception& e) {  // a JSON or stream error in the trainer's own state
      throw InputError(fmt::format("{}: the trainer's state in it is unreadable ({})", file, e.what()));
    }
    // LibTorch's CPU generator (dropout, initializers): the loop's, for every trainee.
    if (ck.rng.defined()) {
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      gen.set_state(ck.rng);
    }
    step = ck.step;
    log->info("{}resumed from {} at step {}", prefix, existing.back(), step);
  } else if (o.resume) {
    log->warn("{}--resume: no checkpoint in {}; starting from step 0", prefix, o.checkpoint_dir);
  }

  std::ofstream metrics(o.metrics_file, std::ios::app);
  auto record = [&](json j, const std::string& kind, int64_t at) {
    if (o.events) o.events->scalars(at, tb_prefix + kind + "/", j);
    j["step"] = at;
    if (!o.tag.empty()) j["task"] = o.tag;
    metrics << j.dump() << "\n" << std::flush;
  };
  auto evaluate = [&](int64_t at) {
    result.last_eval = t.evaluate(at);
    record(result.last_eval, "eval", at);
  };
  auto save = [&](int64_t at) {
    Checkpoint ck;
    for (const auto& [path, p] : params) ck.params[path] = p;
    ck.optimizer = t.optimizer().state();
    ck.step = at;
    ck.optimizer_step = t.optimizer().steps();
    ck.rng = at::detail::getDefaultCPUGenerator().get_state();
    t.save_state(ck);
    ck.config = o.config;
    const std::string path = checkpoint_path(o.checkpoint_dir, at);
    save_checkpoint(path, ck);
    prune_checkpoints(o.checkpoint_dir, o.keep);
    log->info("{}checkpoint {}", prefix, path);
  };

  if (step >= o.steps) {  // a finished run: report where it ended
    if (o.eval_if_finished) evaluate(step);
    result.step = step, result.finished = true;
    return result;
  }
  SignalScope signals;
  t.module().train();
  const auto t_start = std::chrono::steady_clock::now();
  const int64_t first = step;
  double window_time = 0, window_loss = 0, window_nll = 0;
  int64_t window_tokens = 0, window_steps = 0;
  while (step < o.steps) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<Batch> micro = t.next_step(o.grad_accum);
    for (const auto& [path, p] : params) p.mutable_grad() = Tensor();
    const StepLoss l = accumulate_gradients(t, micro);
    if (!std::isfinite(l.loss))
      throw RunError(fmt::format("{}step {}: the loss is {}; training stopped and no checkpoint was written "
                                 "(the last good one is kept in {})", prefix, step + 1,
                                 std::isnan(l.loss) ? "NaN" : l.loss > 0 ? "+inf" : "-inf", o.checkpoint_dir));
    const double lr = learning_rate(o.schedule, step + 1, o.steps);
    t.optimizer().step(lr);
    ++step;
    int64_t tokens = 0;
    for (const auto& b : micro) tokens += t.tokens(b);
    window_time += seconds(std::chrono::steady_clock::now() - t0), window_tokens += tokens, ++window_steps;
    window_loss += l.loss, window_nll += l.nll;
    if (step % o.log_every == 0 || step == o.steps) {
      const double elapsed = seconds(std::chrono::steady_clock::now() - t_start);
      const double eta = elapsed / double(step - first) * double(o.steps - step);
      const double n = double(window_steps);
      record({{"loss", window_loss / n}, {"nll", window_nll / n}, {"lr", lr},
              {"tokens_per_s", double(window_tokens) / window_time}, {"step_time_s", window_time / n}},
             "train", step);
      log->info("{}step {}/{} loss {:.4f} nll {:.4f} lr {:.3g} | {:.0f} tok/s {:.3f} s/step ETA {}", prefix, step,
                o.steps, window_loss / n, window_nll / n, lr, double(window_tokens) / window_time,
                window_time / n, format_duration(eta));
      window_time = window_loss = window_nll = 0, window_tokens = window_steps = 0;
    }
    const bool last = step == o.steps;
    if (step % o.eval_every == 0 || last) evaluate(step);
    const bool saved = step % o.checkpoint_every == 0 || last;
    if (saved) save(step);
    if (g_stop) {
      if (!saved) save(step);
      log->warn("{}stopped by a signal at step {}; resume with --resume", prefix, step);
      result.interrupted = true;
      break;
    }
  }
  result.step = step, result.finished = step == o.steps;
  return result;
}

}  // namespace thx
