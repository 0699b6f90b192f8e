#include "training/loop.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <unistd.h>

#include "common/determinism.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/precision.h"
#include "common/runtime.h"
#include "distributed/dist.h"
#include "distributed/grad_sync.h"
#include "distributed/launch.h"
#include "common/signals.h"
#include "training/tensorboard.h"

// Shapes: micro-batches are data/stream.h's Batch (b examples); losses are scalars.
namespace thx {
namespace fs = std::filesystem;
using json = nlohmann::json;
using torch::Tensor;

void check_stop() {
  if (stop_signal() && dist::world_size() == 1) throw EvaluationStopped(signal_name(stop_signal()));
}

namespace {

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

// One line for a micro-batch too large for the device (`kind`: out of its memory, or a product
// over cuBLAS's 32-bit sizes): where, with how large a micro-batch, what to change.
std::string too_large(const LoopOptions& o, const std::string& prefix, const std::string& kind,
                      const std::string& doing, int64_t step, int world, const c10::Error& e, const std::string& hint) {
  std::string what = e.what_without_backtrace();
  what = what.substr(0, what.find('\n'));
  const std::string micro = o.batch_size > 0 && doing == "training"
                                ? fmt::format(" with micro-batches of {} examples (batch {} / grad_accum {}{})",
                                              o.batch_size / (o.grad_accum * world), o.batch_size, o.grad_accum,
                                              world > 1 ? fmt::format(" / {} ranks", world) : "")
                                : "";
  return fmt::format("{}step {}: {} in {}{} ({}); {}; the checkpoints in {} are as they were", prefix, step, kind,
                     doing, micro, what, hint, o.checkpoint_dir);
}
std::string out_of_memory(const LoopOptions& o, const std::string& prefix, const std::string& doing, int64_t step,
                          int world, const c10::OutOfMemoryError& e, const std::string& hint) {
  return too_large(o, prefix, "out of memory", doing, step, world, e, hint);
}

// cuBLAS takes 32-bit sizes: ATen refuses a product with a dimension of 2^31 or more (its
// "argument n must be non-negative and less than 2147483647"), which a micro-batch reaches before
// a large GPU's memory runs out (the fifth GPU session's H200: the batched talking-heads
// path's mixing over 11,215 examples x 512 x 512 positions). As one line, like running out of
// memory; any other error returns, for the caller to rethrow.
void refuse_over_blas_sizes(const LoopOptions& o, const std::string& prefix, const std::string& doing, int64_t step,
                            int world, const c10::Error& e, const std::string& hint) {
  if (std::string(e.what_without_backtrace()).find(" must be non-negative and less than 2147483647") !=
      std::string::npos)
    throw InputError(too_large(o, prefix, "a product too large for cuBLAS's 32-bit sizes", doing, step, world, e,
                               hint));
}

// Under deterministic algorithms, ATen's refusal of an op (or of cuBLAS) as one line (InputError):
// the step, the op and what to change. Any other error returns, for the caller to rethrow.
void refuse_nondeterministic(const LoopOptions& o, const std::string& prefix, const std::string& doing, int64_t step,
                             const c10::Error& e) {
  if (o.deterministic_key.empty()) return;
  const std::string why = nondeterministic_op(e.what_without_backtrace(), o.deterministic_key);
  if (!why.empty())
    throw InputError(fmt::format("{}step {}: in {}: {}; the checkpoints in {} are as they were", prefix, step, doing,
                                 why, o.checkpoint_dir));
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

namespace {

// What every part of one loop shares: the trainee, the options, the ranks.
struct Run {
  Trainee& t;
  const LoopOptions& o;
  std::string prefix;  // "<task> " in fine-tuning's lines, else ""
  int world = 1, rank = 0;
  bool writer = true;  // only rank 0 writes checkpoints, metrics and TensorBoard
  std::vector<std::pair<std::string, Tensor>> params;  // fixed for the run: taken once
  std::vector<Tensor> tensors;
  std::optional<at::Generator> device_gen;  // dropout's on a GPU
  torch::Device device = torch::kCPU;        // the parameters'

  Run(Trainee& trainee, const LoopOptions& options)
      : t(trainee), o(options), prefix(options.tag.empty() ? "" : options.tag + " "), world(dist::world_size()),
        rank(dist::rank()), writer(rank == 0), params(trainee.parameters()) {
    for (const auto& [path, p] : params) tensors.push_back(p);
    if (!params.empty()) device = params.front().second.device();
    device_gen = device_generator(device);
  }
};

// One warning line where the learning-rate schedule is not what the config seems to say: a
// warmup longer than the run (the rate never reaches its peak, nor decays), or a resumed run
// whose `steps` changed (the schedule is stretched from the step it resumes at).
void warn_about_schedule(const Run& r, int64_t step, std::optional<int64_t> scheduled) {
  const OptimizerConfig& s = r.o.schedule;
  auto log = thx::log("train");
  if (s.schedule == "polynomial" && s.warmup_steps > r.o.steps)
    log->warn("{}optimizer.warmup_steps {} is more than {} {}: the learning rate rises for the whole run and "
              "peaks at {:.3g} at its last step (not optimizer.learning_rate {:.3g}), and never decays", r.prefix,
              s.warmup_steps, r.o.steps_key, r.o.steps, learning_rate(s, r.o.steps, r.o.steps), s.learning_rate);
  if (scheduled && *scheduled != r.o.steps && s.schedule != "constant" && step > 0 && step < r.o.steps)
    log->warn("{}{} changed from {} to {} at step {}: the learning rate goes from {:.3g} (step {}, as scheduled "
              "over {}) to {:.3g} (step {}, over {})", r.prefix, r.o.steps_key, *scheduled, r.o.steps, step,
              learning_rate(s, step, *scheduled), step, *scheduled, learning_rate(s, step + 1, r.o.steps), step + 1,
              r.o.steps);
}

// The checkpoints of a run: the newest restored on --resume (parameters, optimizer, the
// trainee's state, every generator), and a new one saved (after every rank's parameters were
// found equal).
struct Checkpointer {
  Run& r;
  std::optional<int64_t> schedule_steps;  // the restored run's `steps` (checkpoints that record it)

  // The step to start from: the checkpoint's, or 0 (then, data parallel, rank 0's
  // initialization is sent everywhere and every rank seeds its own dropout).
  int64_t restore() {
    auto log = thx::log("train");
    std::string file;
    const std::optional<Checkpoint> resumed = r.o.resume ? load_newest(r.o.checkpoint_dir, &file, r.prefix)
                                                         : std::nullopt;
    if (!resumed) {
      if (r.o.resume && r.writer)
        log->warn("{}--resume: no checkpoint in {}; starting from step 0", r.prefix, r.o.checkpoint_dir);
      if (r.world > 1) {
        dist::broadcast(r.tensors);
        at::Generator gen = at::detail::getDefaultCPUGenerator();
        if (r.rank > 0) gen.set_current_seed(rank_seed(gen.current_seed(), r.rank));
        if (r.device_gen && r.rank > 0) {
          at::Generator g = *r.device_gen;
          g.set_current_seed(rank_seed(g.current_seed(), r.rank));
        }
      }
      return 0;
    }
    const Checkpoint& ck = *resumed;
    if (auto it = ck.extra.find("schedule_steps"); it != ck.extra.end()) schedule_steps = std::stoll(it->second);
    copy_parameters(r.params, ck.params, file);
    r.t.optimizer().load_state(ck.optimizer, ck.optimizer_step);
    try {
      r.t.load_state(ck);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: {}", file, e.what()));
    } catch (const std::exception& e) {  // a JSON or stream error in the trainer's own state
      throw InputError(fmt::format("{}: the trainer's state in it is unreadable ({})", file, e.what()));
    }
    restore_generators(ck);
    log->info("{}resumed from {} at step {}", r.prefix, file, ck.step);
    if (ck.world_size != r.world)
      log->info("{}the checkpoint was written by {} process{}, this run has {}: the global batch is the same; "
                "ranks above 0 draw new dropout seeds", r.prefix, ck.world_size, ck.world_size > 1 ? "es" : "",
                r.world);
    return ck.step;
  }

  // LibTorch's CPU generator (dropout, initializers): the loop's, for every trainee; with
  // several ranks, each rank's own. A GPU's beside it (a run on the CPU before has none: the
  // GPU's continues from its seed).
  void restore_generators(const Checkpoint& ck) {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    const bool per_rank = ck.rng_ranks.defined() && ck.rng_ranks.size(0) == r.world;
    if (per_rank) gen.set_state(ck.rng_ranks[r.rank].clone());
    else if (ck.rng.defined()) gen.set_state(ck.rng);
    if (r.rank > 0 && !per_rank) gen.set_current_seed(rank_seed(uint64_t(ck.step), r.rank));
    if (!r.device_gen) return;
    at::Generator g = *r.device_gen;
    if (ck.rng_cuda.defined() && ck.rng_cuda.size(0) == r.world) g.set_state(ck.rng_cuda[r.rank].clone());
    else if (r.rank > 0) g.set_current_seed(rank_seed(uint64_t(ck.step), r.rank));
  }

  void save(int64_t at) {
    if (r.world > 1) {  // every rank must hold the same parameters, or nothing is written
      const uint64_t sum = dist::checksum(r.tensors);
      const auto all = dist::all_gather(torch::tensor({int64_t(sum)}));  // W x [1]
      for (int k = 1; k < r.world; ++k)
        if (all[size_t(k)].item<int64_t>() != all[0].item<int64_t>())
          throw RunError(fmt::format("{}step {}: rank {}'s parameters differ from rank 0's (checksum); no checkpoint "
                                     "was written (the last good one is kept in {})", r.prefix, at, k,
                                     r.o.checkpoint_dir));
    }
    const Tensor rng = at::detail::getDefaultCPUGenerator().get_state();
    const std::vector<Tensor> rngs = dist::all_gather(rng);
    std::vector<Tensor> device_rngs;
    if (r.device_gen) device_rngs = dist::all_gather(at::Generator(*r.device_gen).get_state());
    if (!r.writer) return;
    Checkpoint ck;
    ck.world_size = r.world;
    if (r.world > 1) ck.rng_ranks = torch::stack(rngs);        // [W, bytes]
    if (r.device_gen) ck.rng_cuda = torch::stack(device_rngs);  // [W, bytes]
    for (const auto& [path, p] : r.params) ck.params[path] = p;
    ck.optimizer = r.t.optimizer().state();
    ck.step = at, ck.optimizer_step = r.t.optimizer().steps();
    ck.rng = rng;
    r.t.save_state(ck);
    ck.extra["schedule_steps"] = std::to_string(r.o.steps);  // what the learning rate was scheduled over
    ck.config = r.o.config;
    const std::string path = checkpoint_path(r.o.checkpoint_dir, at);
    try {
      save_checkpoint(path, ck);
    } catch (const RunError& e) {  // disk full: one line, the earlier checkpoints untouched
      const std::string kept = list_checkpoints(r.o.checkpoint_dir).empty()
                                   ? fmt::format("there is no earlier checkpoint in {} (free some space, then run "
                                                 "again)", r.o.checkpoint_dir)
                                   : fmt::format("the earlier checkpoints in {} are intact (free some space, then "
                                                 "--resume)", r.o.checkpoint_dir);
      throw RunError(fmt::format("{}step {}: no checkpoint written: {}; {}", r.prefix, at, e.what(), kept));
    }
    prune_checkpoints(r.o.checkpoint_dir, r.o.keep);
    thx::log("train")->info("{}checkpoint {}", r.prefix, path);
  }
};

// metrics.jsonl and TensorBoard (rank 0), and the evaluations that go there.
// A resumed run's metrics.jsonl: the records this run's tag wrote after the step it resumes
// from (a killed run ran on past its last checkpoint) go, so that each step is recorded once,
// by the run that went on from there. Other tasks' records and unreadable lines stay.
void drop_records_after(const std::string& path, const std::string& tag, int64_t step) {
  if (!fs::exists(path)) return;
  std::istringstream in(read_file(path));
  std::string kept;
  size_t dropped = 0;
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line, nullptr, false);
    const bool mine = j.is_object() && (tag.empty() ? !j.contains("task") : j.value("task", "") == tag);
    if (mine && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() > step) {
      ++dropped;
      continue;
    }
    kept += line + "\n";
  }
  if (dropped) write_file_atomic(path, kept);
}

// A record's TensorBoard tag prefix: [task/]train/ for a training window's (it has a learning
// rate), [task/]eval/ for an evaluation's (tests/scripts/metrics_scalars.py reads them alike).
std::string event_prefix(const json& values, const std::string& task) {
  return (task.empty() ? "" : task + "/") + (values.contains("lr") ? "train/" : "eval/");
}

// metrics.jsonl's records as the events they were written as (EventWriter::restart), each at its
// step and wall time. Unreadable lines are left out, as they carried no event.
std::vector<EventWriter::Record> event_records(const std::string& path) {
  std::vector<EventWriter::Record> out;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) continue;
    const int64_t step = j["step"];
    const std::string task = j.contains("task") && j["task"].is_string() ? j["task"].get<std::string>() : "";
    const double time = j.contains("time") && j["time"].is_number() ? j["time"].get<double>() : 0;
    for (const char* key : {"step", "task", "time"}) j.erase(key);
    std::string prefix = event_prefix(j, task);
    out.push_back({step, std::move(prefix), std::move(j), time});
  }
  return out;
}

struct Recorder {
  Run& r;
  EventWriter* events = nullptr;
  std::ofstream metrics{};
  // The peaks of the current log window's steps before an evaluation inside it, which resets them
  // to measure its own (MB; the GPU's: the caching allocator's, on CUDA).
  double window_rss_peak = 0, window_gpu_peak = 0;

  void open(int64_t step) {
    set_stop_note("");  // (opening them writes: the setup's line would no longer be true)
    events = r.o.open_outputs ? r.o.open_outputs() : nullptr;
    if (!r.writer) return;
    fs::create_directories(r.o.checkpoint_dir);
    if (r.o.resume) drop_records_after(r.o.metrics_file, r.o.tag, step);
    // The earlier files' steps past `step` go from TensorBoard too (tensorboard.h), once per
    // file: the first trainer to open it is the one a killed run was in (a fine-tuning's later
    // tasks have no records yet). Nothing to do in a new folder with no records (a run begun
    // with --resume).
    if (events && r.o.resume && !events->restarted()) {
      std::vector<EventWriter::Record> history =
          fs::exists(r.o.metrics_file) ? event_records(r.o.metrics_file) : std::vector<EventWriter::Record>{};
      if (!history.empty() || !events->first_in_folder()) events->restart(history);
    }
    metrics.open(r.o.metrics_file, std::ios::app);
    if (!metrics)
      throw InputError(fmt::format("{}: cannot open for appending ({})", r.o.metrics_file, std::strerror(errno)));
  }
  // metrics.jsonl first: an event is never without its record, which a resume would drop.
  void record(json j, int64_t at) {
    if (!r.writer) return;
    const json values = j;
    j["step"] = at;
    if (!r.o.tag.empty()) j["task"] = r.o.tag;
    // Wall-clock seconds since the Unix epoch, as TensorBoard's events carry it (not a scalar).
    j["time"] = std::round(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() * 1000) / 1000;
    metrics << j.dump() << "\n" << std::flush;
    if (!metrics)  // (a full disk: the run's numbers must not go missing unsaid)
      throw RunError(fmt::format("{}: cannot write the step-{} {} record ({})", r.o.metrics_file, at,
                                 values.contains("lr") ? "train" : "eval", std::strerror(errno)));
    if (events) events->scalars(at, event_prefix(values, r.o.tag), values);
  }
  // Recorded unless `keep` is false (a finished run's evaluation: its record is there already).
  json evaluate(int64_t at, bool keep = true) {
    window_rss_peak = std::max(window_rss_peak, peak_rss_mb());
    reset_peak_rss();
    const bool gpu = r.device.is_cuda();
    if (gpu) window_gpu_peak = std::max(window_gpu_peak, device_peak_mb(r.device)), reset_device_peak(r.device);
    PrecisionScope precision(r.o.eval_precision.empty() ? r.o.precision : r.o.eval_precision);
    json values;
    try {
      values = r.t.evaluate(at);
    } catch (const EvaluationStopped& e) {  // the loop saves this step's checkpoint and stops next
      thx::log("train")->warn("{}step {}: the evaluation was stopped by {}; none is recorded for this step", r.prefix,
                              at, e.what());
      return json::object();
    } catch (const c10::OutOfMemoryError& e) {
      throw InputError(out_of_memory(r.o, r.prefix, "evaluation", at, r.world, e, r.o.eval_memory_hint));
    } catch (const c10::Error& e) {
      refuse_over_blas_sizes(r.o, r.prefix, "evaluation", at, r.world, e, r.o.eval_memory_hint);
      refuse_nondeterministic(r.o, r.prefix, "evaluation", at, e);
      throw;
    }
    json rec = values;
    rec["peak_rss_mb"] = std::round(peak_rss_mb());  // the evaluation's own peaks
    reset_peak_rss();
    if (gpu) rec["gpu_peak_mb"] = std::round(device_peak_mb(r.device)), reset_device_peak(r.device);
    if (keep) record(rec, at);
    return values;
  }
};

// The steps between two progress lines: their sums, then one record and one line.
struct Window {
  double time = 0, loss = 0, nll = 0;
  int64_t tokens = 0, steps = 0;
  dist::SyncStats sync;  // data parallel: the gradient all-reduce, summed over the window

  void add(const StepLoss& l, double seconds, const dist::GradSync* grad_sync) {
    time += seconds, tokens += l.tokens, ++steps, loss += l.loss, nll += l.nll;
    if (!grad_sync) return;
    const dist::SyncStats& st = grad_sync->stats();
    sync.backward_s += st.backward_s, sync.comm_s += st.comm_s;
    sync.exposed_s += st.exposed_s, sync.bytes += st.bytes, sync.buckets += st.buckets;
  }
  // The gradients' global norm before clipping: its mean over the window, and the fraction of
  // the window's steps it was clipped in (when optimizer.clip_global_norm is on).
  double grad_norm = 0;
  int64_t clipped = 0;
  bool clipping = false;
  void add_grad_norm(double norm, double max_norm) {
    grad_norm += norm, clipping = max_norm > 0, clipped += clipping && norm > max_norm;
  }
  void flush(Recorder& out, int64_t step, double lr, double eta, bool data_parallel) {
    const double n = double(steps);
    // The window's peaks: of its steps, before and after any evaluation among them.
    const double rss_peak = std::max(out.window_rss_peak, peak_rss_mb());
    json rec{{"loss", loss / n}, {"lr", lr}, {"grad_norm", grad_norm / n},
             {"tokens_per_s", double(tokens) / time}, {"step_time_s", time / n},
             {"rss_mb", std::round(rss_mb())}, {"peak_rss_mb", std::round(rss_peak)}};
    if (clipping) rec["clipped"] = double(clipped) / n;
    if (out.r.device.is_cuda()) {  // the allocator's peak of tensor memory
      rec["gpu_peak_mb"] = std::round(std::max(out.window_gpu_peak, device_peak_mb(out.r.device)));
      reset_device_peak(out.r.device);
    }
    const bool with_nll = out.r.o.reports_nll;
    if (with_nll) rec["nll"] = nll / n;
    reset_peak_rss();
    out.window_rss_peak = out.window_gpu_peak = 0;
    std::string comm;
    if (data_parallel) {  // rank 0's view of the gradient all-reduce, per step
      rec["backward_s"] = sync.backward_s / n, rec["allreduce_s"] = sync.comm_s / n;
      rec["allreduce_exposed_s"] = sync.exposed_s / n, rec["allreduce_mb"] = double(sync.bytes) / n / 1e6;
      rec["allreduce_buckets"] = double(sync.buckets) / n;
      comm = fmt::format(" | all-reduce {:.1f} MB {:.3f} s, {:.3f} s after backward", double(sync.bytes) / n / 1e6,
                         sync.comm_s / n, sync.exposed_s / n);
    }
    out.record(rec, step);
    const Run& r = out.r;
    thx::log("train")->info("{}step {}/{} loss {:.4f}{} lr {:.3g} | {:.0f} tok/s {:.3f} s/step{} ETA {}",
                            r.prefix, step, r.o.steps, loss / n, with_nll ? fmt::format(" nll {:.4f}", nll / n) : "",
                            lr, double(tokens) / time, time / n, comm, format_duration(eta));
    *this = Window{};
  }
};

// Step `step` + 1's gradients over the ranks; its sums over the ranks, and (data parallel)
// whether any rank was asked to stop (one process: false; the loop reads the signal itself).
// A device out of memory, and a loss that is not finite, stop the run with one line.
StepLoss one_step(Run& r, const std::vector<Batch>& micro, dist::GradSync* sync, int64_t step, bool* stop) {
  StepLoss l;
  try {
    dist::guard("the gradient all-reduce", [&] {
      PrecisionScope precision(r.o.precision);
      l = accumulate_gradients(r.t, micro, sync);
    });
  } catch (const c10::OutOfMemoryError& e) {
    throw InputError(out_of_memory(r.o, r.prefix, "training", step + 1, r.world, e, r.o.train_memory_hint));
  } catch (const c10::Error& e) {
    refuse_over_blas_sizes(r.o, r.prefix, "training", step + 1, r.world, e, r.o.train_memory_hint);
    refuse_nondeterministic(r.o, r.prefix, "training", step + 1, e);
    throw;
  }
  *stop = false;
  if (r.world > 1) {
    Tensor sums = torch::tensor({l.loss, l.nll, double(l.tokens), double(stop_signal())}, torch::kFloat64);  // [4]
    dist::all_reduce_sum(sums);
    l.loss = sums[0].item<double>(), l.nll = sums[1].item<double>(), l.tokens = int64_t(sums[2].item<double>());
    *stop = sums[3].item<double>() > 0;
  }
  if (!std::isfinite(l.loss))
    throw RunError(fmt::format("{}step {}: the loss is {}; training stopped and no checkpoint was written "
                               "(the last good one is kept in {})", r.prefix, step + 1,
                               std::isnan(l.loss) ? "NaN" : l.loss > 0 ? "+inf" : "-inf", r.o.checkpoint_dir));
  return l;
}

// Step `step` + 1's update: the gradients clipped (returns their norm before clipping), then the
// optimizer's step at `lr`. An op refused here under deterministic algorithms is one line too.
double apply_update(Run& r, int64_t step, double lr) {
  try {
    const double norm = clip_grad_global_norm(r.tensors, r.o.clip_global_norm);
    r.t.optimizer().step(lr);
    return norm;
  } catch (const c10::Error& e) {
    refuse_nondeterministic(r.o, r.prefix, "the update", step + 1, e);
    throw;
  }
}

}  // namespace

LoopResult train(Trainee& t, const LoopOptions& o) {
  Run r(t, o);
  if (o.batch_size > 0) {
    const std::string e = batch_split_error("batch size", o.batch_size, o.grad_accum, r.world);
    if (!e.empty()) throw InputError(r.prefix + e);
  }
  Checkpointer checkpoints{r, std::nullopt};
  int64_t step = checkpoints.restore();
  if (r.writer) warn_about_schedule(r, step, checkpoints.schedule_steps);
  // Everything that can fail on bad input has been read; now the outputs are opened.
  Recorder out{r};
  out.open(step);
  if (!o.banner.empty()) thx::log("train")->info("{}", o.banner);
  LoopResult result;
  if (step >= o.steps) {  // a finished run: report where it ended
    if (o.eval_if_finished) result.last_eval = out.evaluate(step, false);
    result.step = step, result.finished = true;
    return result;
  }
  SignalScope signals;
  t.module().train();
  std::unique_ptr<dist::GradSync> sync;
  if (r.world > 1) {  // the parameters that train (a frozen embedding is not reduced)
    std::vector<Tensor> trained;
    for (const auto& p : r.tensors)
      if (p.requires_grad()) trained.push_back(p);
    sync = std::make_unique<dist::GradSync>(trained, t.may_leave_parameters_unused());
  }
  const auto t_start = std::chrono::steady_clock::now();
  const int64_t first = step;
  Window window;
  while (step < o.steps) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<Batch> micro = t.next_step(o.grad_accum);
    for (const auto& [path, p] : r.params) p.mutable_grad() = Tensor();
    bool stop = false;
    const StepLoss l = one_step(r, micro, sync.get(), step, &stop);
    const double lr = learning_rate(o.schedule, step + 1, o.steps);
    const double grad_norm = apply_update(r, step, lr);  // after the all-reduce
    ++step;
    window.add(l, seconds(std::chrono::steady_clock::now() - t0), sync.get());
    window.add_grad_norm(grad_norm, o.clip_global_norm);
    if (step % o.log_every == 0 || step == o.steps) {
      const double elapsed = seconds(std::chrono::steady_clock::now() - t_start);
      window.flush(out, step, lr, elapsed / double(step - first) * double(o.steps - step), sync != nullptr);
    }
    const bool last = step == o.steps;
    if (step % o.eval_every == 0 || last) result.last_eval = out.evaluate(step);
    const bool saved = step % o.checkpoint_every == 0 || last;
    if (saved) checkpoints.save(step);
    if (r.world > 1 ? stop : stop_signal() != 0) {
      if (!saved) checkpoints.save(step);
      result.interrupted = true, result.signal = stop_signal() ? stop_signal() : SIGTERM;
      thx::log("train")->warn("{}stopped by {} at step {}; resume with --resume", r.prefix,
                              signal_name(result.signal), step);
      break;
    }
  }
  result.step = step, result.finished = step == o.steps;
  return result;
}

}  // namespace thx
