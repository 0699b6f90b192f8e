#include "training/loop.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>

#include <unistd.h>

#include "common/error.h"
#include "common/log.h"
#include "common/precision.h"
#include "common/runtime.h"
#include "distributed/dist.h"
#include "distributed/grad_sync.h"
#include "distributed/launch.h"
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

Tensor rows(const Tensor& t, int64_t lo, int64_t hi) { return t.defined() ? t.slice(0, lo, hi) : t; }

// The newest checkpoint that reads back whole, read by rank 0 and sent to the others (who may
// have no run directory: another node): each rank gets the loaded checkpoint, or nullopt when
// there is none. A newer one that is truncated or fails its checksum is moved aside to
// <file>.corrupt (kept, out of the way of the next save) with a warning, and the one before it
// is used; if none can be read, nothing is moved and the newest one's error stops the run.
std::optional<Checkpoint> load_newest(const std::string& dir, std::string* file, const std::string& prefix) {
  std::optional<Checkpoint> mine;  // rank 0's, read once
  std::string bytes;
  // A checkpoint rank 0 cannot read stops every rank with rank 0's line.
  dist::on_rank0([&] {
    const auto existing = list_checkpoints(dir);
    std::vector<std::pair<std::string, std::string>> bad;  // newer unreadable ones: file, error
    for (auto it = existing.rbegin(); it != existing.rend() && !mine; ++it) {
      try {
        mine = load_checkpoint(*it);
        *file = *it;
      } catch (const InputError& e) {
        bad.emplace_back(*it, e.what());
      }
    }
    if (!mine && !bad.empty())
      throw InputError(bad.size() == 1 ? bad[0].second
                                       : fmt::format("{} (and no older checkpoint in {} reads back either)",
                                                     bad[0].second, dir));
    for (const auto& [f, why] : bad) {
      const std::string aside = f + ".corrupt";
      std::error_code ec;
      fs::rename(f, aside, ec);
      thx::log("train")->warn("{}{}; {}; resuming from the checkpoint before it, {}", prefix, why,
                              ec ? "left in place (cannot move it: " + ec.message() + ")" : "moved aside to " + aside,
                              *file);
    }
    if (!mine) return;
    if (!dist::active()) return;
    std::ifstream in(*file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  });
  if (!dist::active()) return mine;
  bytes = dist::broadcast_bytes(bytes);
  *file = dist::broadcast_bytes(*file);
  if (dist::rank() == 0 || bytes.empty()) return mine;
  const fs::path tmp = fs::temp_directory_path() / fmt::format("thx-resume-{}-rank{}.h5", ::getpid(), dist::rank());
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
  }
  std::optional<Checkpoint> ck;
  try {
    ck = load_checkpoint(tmp.string());
  } catch (...) {
    fs::remove(tmp);
    throw;
  }
  fs::remove(tmp);
  return ck;
}

// A seed for the CPU generator of rank r > 0 (dropout must differ between ranks).
uint64_t rank_seed(uint64_t base, int r) { return mix_seed(base + 0x9e3779b97f4a7c15ull * uint64_t(r)); }

// The generator dropout draws from on a GPU (CUDA's own Philox generator; the CPU one draws
// nothing there): kept in checkpoints beside the CPU one. None on the CPU.
std::optional<at::Generator> device_generator(const torch::Device& d) {
  if (!d.is_cuda()) return std::nullopt;
  return at::globalContext().defaultGenerator(d);
}

// One line for a device out of memory: where, with how large a micro-batch, what to change.
std::string out_of_memory(const LoopOptions& o, const std::string& prefix, const std::string& doing, int64_t step,
                          int world, const c10::OutOfMemoryError& e, const std::string& hint) {
  std::string what = e.what_without_backtrace();
  what = what.substr(0, what.find('\n'));
  const std::string micro = o.batch_size > 0 && doing == "training"
                                ? fmt::format(" with micro-batches of {} examples (batch {} / grad_accum {}{})",
                                              o.batch_size / (o.grad_accum * world), o.batch_size, o.grad_accum,
                                              world > 1 ? fmt::format(" / {} ranks", world) : "")
                                : "";
  return fmt::format("{}step {}: out of memory in {}{} ({}); {}; the checkpoints in {} are as they were", prefix,
                     step, doing, micro, what, hint, o.checkpoint_dir);
}

}  // namespace

Batch Trainee::shard(const Batch& b, int rank, int world) {
  const int64_t n = b.inputs.size(0), lo = n * rank / world, hi = n * (rank + 1) / world;
  Batch s;
  s.inputs = rows(b.inputs, lo, hi), s.decoder_inputs = rows(b.decoder_inputs, lo, hi);
  s.targets = rows(b.targets, lo, hi), s.token_types = rows(b.token_types, lo, hi);
  s.positions = rows(b.positions, lo, hi), s.labels = rows(b.labels, lo, hi), s.scores = rows(b.scores, lo, hi);
  return s;
}

std::string batch_split_error(const std::string& key, int64_t batch_size, int64_t grad_accum, int world) {
  if (batch_size % (grad_accum * world) == 0) return "";
  return fmt::format("{} {} does not divide into grad_accum {} micro-batches of {} rank shards (world size {}): "
                     "it must be a multiple of {}", key, batch_size, grad_accum, world, world, grad_accum * world);
}

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

StepLoss accumulate_gradients(Trainee& t, const std::vector<Batch>& micro, dist::GradSync* sync) {
  StepLoss r;
  const int world = dist::world_size();
  std::vector<Batch> mine;  // this rank's shards (one process: the micro-batches themselves)
  double second = 0;
  for (const auto& b : micro) {
    r.weight += t.weight(b), second += t.second_weight(b);
    mine.push_back(world > 1 ? t.shard(b, dist::rank(), world) : b);
  }
  const double total = r.weight > 0 ? r.weight : 1.0, total2 = second > 0 ? second : 1.0;
  for (size_t i = 0; i < mine.size(); ++i) {
    const Batch& b = mine[i];
    const MicroLoss out = t.forward(b);
    const double share = t.weight(b) / total;
    Tensor scaled = out.loss * share;
    r.loss += out.loss.item<double>() * share;
    if (out.second.defined()) {
      const double share2 = t.second_weight(b) / total2;
      scaled = scaled + out.second * share2;
      r.loss += out.second.item<double>() * share2;
    }
    if (sync && i + 1 == mine.size()) sync->prepare(scaled);
    scaled.backward();
    r.nll += out.nll_sum / total;
    r.tokens += t.tokens(b);
  }
  if (sync) sync->finish();
  return r;
}

LoopResult train(Trainee& t, const LoopOptions& o) {
  auto log = thx::log("train");
  const std::string prefix = o.tag.empty() ? "" : o.tag + " ";
  const std::string tb_prefix = o.tag.empty() ? "" : o.tag + "/";
  LoopResult result;
  const int world = dist::world_size(), rank = dist::rank();
  const bool writer = rank == 0;  // only rank 0 writes checkpoints, metrics and TensorBoard
  if (o.batch_size > 0) {
    const std::string e = batch_split_error("batch size", o.batch_size, o.grad_accum, world);
    if (!e.empty()) throw InputError(prefix + e);
  }
  // The parameter list is fixed for the run: taken once, not per step.
  const std::vector<std::pair<std::string, Tensor>> params = t.parameters();
  const std::optional<at::Generator> device_gen =
      device_generator(params.empty() ? torch::Device(torch::kCPU) : params.front().second.device());
  std::vector<Tensor> tensors;
  for (const auto& [path, p] : params) tensors.push_back(p);
  int64_t step = 0;
  std::string file;
  const std::optional<Checkpoint> resumed = o.resume ? load_newest(o.checkpoint_dir, &file, prefix) : std::nullopt;
  if (resumed) {
    const Checkpoint& ck = *resumed;
    copy_parameters(params, ck.params, file);
    t.optimizer().load_state(ck.optimizer, ck.optimizer_step);
    try {
      t.load_state(ck);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: {}", file, e.what()));
    } catch (const std::exception& e) {  // a JSON or stream error in the trainer's own state
      throw InputError(fmt::format("{}: the trainer's state in it is unreadable ({})", file, e.what()));
    }
    // LibTorch's CPU generator (dropout, initializers): the loop's, for every trainee; with
    // several ranks, each rank's own.
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    if (ck.rng_ranks.defined() && ck.rng_ranks.size(0) == world) gen.set_state(ck.rng_ranks[rank].clone());
    else if (ck.rng.defined()) gen.set_state(ck.rng);
    if (rank > 0 && !(ck.rng_ranks.defined() && ck.rng_ranks.size(0) == world))
      gen.set_current_seed(rank_seed(uint64_t(ck.step), rank));
    if (device_gen) {  // a run on the CPU before has none: the GPU's continues from its seed
      at::Generator g = *device_gen;
      if (ck.rng_cuda.defined() && ck.rng_cuda.size(0) == world) g.set_state(ck.rng_cuda[rank].clone());
      else if (rank > 0) g.set_current_seed(rank_seed(uint64_t(ck.step), rank));
    }
    step = ck.step;
    log->info("{}resumed from {} at step {}", prefix, file, step);
    if (ck.world_size != world)
      log->info("{}the checkpoint was written by {} process{}, this run has {}: the global batch is the same; "
                "ranks above 0 draw new dropout seeds", prefix, ck.world_size, ck.world_size > 1 ? "es" : "", world);
  } else {
    if (o.resume && writer) log->warn("{}--resume: no checkpoint in {}; starting from step 0", prefix, o.checkpoint_dir);
    if (world > 1) {
      dist::broadcast(tensors);  // rank 0's initialization everywhere
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      if (rank > 0) gen.set_current_seed(rank_seed(gen.current_seed(), rank));
      if (device_gen && rank > 0) {
        at::Generator g = *device_gen;
        g.set_current_seed(rank_seed(g.current_seed(), rank));
      }
    }
  }

  // Everything that can fail on bad input has been read; now the outputs are opened.
  EventWriter* const events = o.open_outputs ? o.open_outputs() : nullptr;
  if (writer) fs::create_directories(o.checkpoint_dir);
  if (!o.banner.empty()) log->info("{}", o.banner);
  std::ofstream metrics;
  if (writer) metrics.open(o.metrics_file, std::ios::app);
  auto record = [&](json j, const std::string& kind, int64_t at) {
    if (!writer) return;
    if (events) events->scalars(at, tb_prefix + kind + "/", j);
    j["step"] = at;
    if (!o.tag.empty()) j["task"] = o.tag;
    metrics << j.dump() << "\n" << std::flush;
  };
  auto evaluate = [&](int64_t at) {
    reset_peak_rss();
    PrecisionScope precision(o.eval_precision.empty() ? o.precision : o.eval_precision);
    try {
      result.last_eval = t.evaluate(at);
    } catch (const c10::OutOfMemoryError& e) {
      throw InputError(out_of_memory(o, prefix, "evaluation", at, world, e, o.eval_memory_hint));
    }
    json rec = result.last_eval;
    rec["peak_rss_mb"] = std::round(peak_rss_mb());  // the evaluation's own peak
    reset_peak_rss();
    record(rec, "eval", at);
  };
  auto save = [&](int64_t at) {
    if (world > 1) {  // every rank must hold the same parameters, or nothing is written
      const uint64_t sum = dist::checksum(tensors);
      const auto all = dist::all_gather(torch::tensor({int64_t(sum)}));  // W x [1]
      for (int r = 1; r < world; ++r)
        if (all[size_t(r)].item<int64_t>() != all[0].item<int64_t>())
          throw RunError(fmt::format("{}step {}: rank {}'s parameters differ from rank 0's (checksum); no checkpoint "
                                     "was written (the last good one is kept in {})", prefix, at, r, o.checkpoint_dir));
    }
    const Tensor rng = at::detail::getDefaultCPUGenerator().get_state();
    const std::vector<Tensor> rngs = dist::all_gather(rng);
    std::vector<Tensor> device_rngs;
    if (device_gen) device_rngs = dist::all_gather(at::Generator(*device_gen).get_state());
    if (!writer) return;
    Checkpoint ck;
    ck.world_size = world;
    if (world > 1) ck.rng_ranks = torch::stack(rngs);  // [W, bytes]
    if (device_gen) ck.rng_cuda = torch::stack(device_rngs);  // [W, bytes]
    for (const auto& [path, p] : params) ck.params[path] = p;
    ck.optimizer = t.optimizer().state();
    ck.step = at;
    ck.optimizer_step = t.optimizer().steps();
    ck.rng = rng;
    t.save_state(ck);
    ck.config = o.config;
    const std::string path = checkpoint_path(o.checkpoint_dir, at);
    try {
      save_checkpoint(path, ck);
    } catch (const RunError& e) {  // disk full: one line, the earlier checkpoints untouched
      throw RunError(fmt::format("{}step {}: no checkpoint written: {}; the earlier checkpoints in {} are intact (free "
                                 "some space, then --resume)", prefix, at, e.what(), o.checkpoint_dir));
    }
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
  std::unique_ptr<dist::GradSync> sync;
  if (world > 1) {  // the parameters that train (a frozen embedding is not reduced)
    std::vector<Tensor> trained;
    for (const auto& p : tensors)
      if (p.requires_grad()) trained.push_back(p);
    sync = std::make_unique<dist::GradSync>(trained, t.may_leave_parameters_unused());
  }
  const auto t_start = std::chrono::steady_clock::now();
  const int64_t first = step;
  double window_time = 0, window_loss = 0, window_nll = 0;
  int64_t window_tokens = 0, window_steps = 0;
  dist::SyncStats window_sync;  // data parallel: the gradient all-reduce, summed over the window
  while (step < o.steps) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<Batch> micro = t.next_step(o.grad_accum);
    for (const auto& [path, p] : params) p.mutable_grad() = Tensor();
    StepLoss l;
    bool stop = false;
    try {
      dist::guard("the gradient all-reduce", [&] {
        PrecisionScope precision(o.precision);
        l = accumulate_gradients(t, micro, sync.get());
      });
    } catch (const c10::OutOfMemoryError& e) {
      throw InputError(out_of_memory(o, prefix, "training", step + 1, world, e, o.train_memory_hint));
    }
    if (world > 1) {  // the step's sums over the ranks, and whether any rank was asked to stop
      Tensor sums = torch::tensor({l.loss, l.nll, double(l.tokens), double(g_stop)}, torch::kFloat64);  // [4]
      dist::all_reduce_sum(sums);
      l.loss = sums[0].item<double>(), l.nll = sums[1].item<double>(), l.tokens = int64_t(sums[2].item<double>());
      stop = sums[3].item<double>() > 0;
    }
    if (!std::isfinite(l.loss))
      throw RunError(fmt::format("{}step {}: the loss is {}; training stopped and no checkpoint was written "
                                 "(the last good one is kept in {})", prefix, step + 1,
                                 std::isnan(l.loss) ? "NaN" : l.loss > 0 ? "+inf" : "-inf", o.checkpoint_dir));
    const double lr = learning_rate(o.schedule, step + 1, o.steps);
    t.optimizer().step(lr);
    ++step;
    const int64_t tokens = l.tokens;
    window_time += seconds(std::chrono::steady_clock::now() - t0), window_tokens += tokens, ++window_steps;
    window_loss += l.loss, window_nll += l.nll;
    if (sync) {
      const dist::SyncStats& st = sync->stats();
      window_sync.backward_s += st.backward_s, window_sync.comm_s += st.comm_s;
      window_sync.exposed_s += st.exposed_s, window_sync.bytes += st.bytes, window_sync.buckets += st.buckets;
    }
    if (step % o.log_every == 0 || step == o.steps) {
      const double elapsed = seconds(std::chrono::steady_clock::now() - t_start);
      const double eta = elapsed / double(step - first) * double(o.steps - step);
      const double n = double(window_steps);
      json rec{{"loss", window_loss / n}, {"nll", window_nll / n}, {"lr", lr},
               {"tokens_per_s", double(window_tokens) / window_time}, {"step_time_s", window_time / n},
               {"rss_mb", std::round(rss_mb())}, {"peak_rss_mb", std::round(peak_rss_mb())}};  // the window's peak
      reset_peak_rss();
      std::string comm;
      if (sync) {  // rank 0's view of the gradient all-reduce, per step
        const dist::SyncStats& w = window_sync;
        rec["backward_s"] = w.backward_s / n, rec["allreduce_s"] = w.comm_s / n;
        rec["allreduce_exposed_s"] = w.exposed_s / n, rec["allreduce_mb"] = double(w.bytes) / n / 1e6;
        rec["allreduce_buckets"] = double(w.buckets) / n;
        comm = fmt::format(" | all-reduce {:.1f} MB {:.3f} s, {:.3f} s after backward", double(w.bytes) / n / 1e6,
                           w.comm_s / n, w.exposed_s / n);
      }
      record(rec, "train", step);
      log->info("{}step {}/{} loss {:.4f} nll {:.4f} lr {:.3g} | {:.0f} tok/s {:.3f} s/step{} ETA {}", prefix, step,
                o.steps, window_loss / n, window_nll / n, lr, double(window_tokens) / window_time,
                window_time / n, comm, format_duration(eta));
      window_time = window_loss = window_nll = 0, window_tokens = window_steps = 0;
      window_sync = {};
    }
    const bool last = step == o.steps;
    if (step % o.eval_every == 0 || last) evaluate(step);
    const bool saved = step % o.checkpoint_every == 0 || last;
    if (saved) save(step);
    if (world > 1 ? stop : bool(g_stop)) {
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
