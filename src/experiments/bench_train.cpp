#include "experiments/bench_train.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <set>

#include "attention/costs.h"
#include "attention/cuda/th_args.h"
#include "attention/fused.h"

#include <functional>
#include "common/determinism.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/precision.h"
#include "common/runtime.h"
#include "common/text_table.h"
#include "experiments/bench_attention.h"
#include "experiments/step_profile.h"
#include "training/objective.h"

#include <ATen/record_function.h>
#include <optional>

namespace thx {
namespace {

using Clock = std::chrono::steady_clock;

// The parts this bench runs by ATen's composition (--aten, THX_ATEN: common/runtime.h), and
// whether under deterministic algorithms (train.deterministic), for its report.
std::string aten_note() {
  const std::vector<std::string> names = aten_part_names(aten_parts());
  const std::string deterministic =
      at::globalContext().deterministicAlgorithms()
          ? "; deterministic algorithms (train.deterministic: ATen's, cuBLAS's fixed workspace, no atomics in thx's "
            "kernels)"
          : "";
  if (names.empty()) return deterministic;
  return deterministic +
         fmt::format("; by ATen's composition, not thx's kernels (--aten, THX_ATEN): {}", fmt::join(names, ", "));
}

struct Timed {
  double step_s = 0;                     // median
  double fwd_s = 0, bwd_s = 0, opt_s = 0;  // medians of the parts
  int64_t params = 0;
  double peak_rss_mb = 0;                // the process's peak while the model was built and stepped
                                         // (on a GPU: the peak of its tensors)
  std::optional<StepProfile> profile;    // more steps under the profiler, if asked (step_profile.h)
  std::string repeats;                   // whether a step repeats to the bit (repeat_check), if asked
  bool out_of_memory = false;            // the device ran out of memory (no times)
};

// How a row's steps run beside its precision and device: one more step profiled (its trace
// written where trace_path is set); one more step's loss and gradients made twice from the same
// seed and compared bit for bit (--deterministic-cost).
struct StepRun {
  bool profile = false;
  std::string trace_path;
  bool repeat = false;
};

// Steps of the model at `precision` (common/precision.h): forward and backward in its scope, the
// optimizer on the fp32 master weights. The heap is trimmed first, so that the peak RSS is this
// configuration's and not an earlier one's high-water mark.
Timed time_steps(const PretrainConfig& c, const ModelSpec& spec, int64_t vocab, int64_t batch, int64_t steps,
                 int64_t warmup, const std::string& precision, const StepRun& run, const torch::Device& device) {
  trim_heap();
  reset_peak_rss();
  reset_device_peak(device);
  torch::manual_seed(0);
  // The model and a batch of random tokens in its objective's shapes (training/objective.h).
  const std::unique_ptr<Objective> objective = make_objective(spec, vocab, c.data.sentence_task != "none");
  torch::nn::Module* model = &objective->module();
  model->to(device);
  const std::unique_ptr<Optimizer> opt = make_optimizer(c.optimizer, optimized_params(*model, objective->params(), c.optimizer));
  const Batch batch_in = objective->random_batch(c.data, batch, vocab, device);
  auto loss_of = [&] {
    const Objective::Out o = objective->forward(batch_in);
    return o.second.defined() ? o.loss + o.second : o.loss;
  };
  model->train();
  std::vector<double> t, tf, tb, to;
  auto secs = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  // A GPU queues its work: each phase ends when the device has finished it.
  auto now = [&] {
    synchronize(device);
    return Clock::now();
  };
  for (int64_t i = 0; i < warmup + steps; ++i) {
    const auto t0 = now();
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
    torch::Tensor loss;
    PrecisionScope scope(precision);
    loss = loss_of();
    const auto t1 = now();
    loss.backward();
    const auto t2 = now();
    opt->step(1e-3);
    const auto t3 = now();
    if (i >= warmup) t.push_back(secs(t0, t3)), tf.push_back(secs(t0, t1)), tb.push_back(secs(t1, t2)), to.push_back(secs(t2, t3));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  Timed r;
  r.step_s = median(t), r.fwd_s = median(tf), r.bwd_s = median(tb), r.opt_s = median(to);
  for (auto& p : model->parameters()) r.params += p.numel();
  r.peak_rss_mb = device.is_cpu() ? peak_rss_mb() : device_peak_mb(device);
  if (run.repeat)  // (after the peak is read: the second set of gradients is not the row's memory)
    r.repeats = repeat_check([&] {
      torch::manual_seed(1);  // (dropout's draws, on the CPU's and every GPU's generator)
      for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
      PrecisionScope scope(precision);
      const torch::Tensor loss = loss_of();
      loss.backward();
      std::vector<torch::Tensor> made{loss.detach()};
      for (const auto& p : model->parameters())
        if (p.grad().defined()) made.push_back(p.grad());
      return made;
    });
  if (run.profile)
    r.profile = profile_step([&] {
      for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
      {
        PrecisionScope scope(precision);
        torch::Tensor loss;
        {
          RECORD_USER_SCOPE("thx::forward");  // (the parts a trace is read by: scripts/trace_summary.py)
          loss = loss_of();
        }
        RECORD_USER_SCOPE("thx::backward");
        loss.backward();
      }
      RECORD_USER_SCOPE("thx::optimizer");
      opt->step(1e-3);
    }, device, run.trace_path);
  return r;
}

// Runs the peer script; returns its median step time in seconds, or -1 with a warning.
// On glibc's defaults, as a PyTorch user runs it, or with its heap kept as thx keeps its own
// (runtime.h): glibc gives each large block back when freed and faults it in again, which made the
// peer's T5-base step 3.2x slower on a Zen 5 VM (docs/benchmarks.md, "The peer's heap").
double run_peer(const std::string& peer, const PretrainConfig& c, int64_t vocab, int64_t steps, bool bf16,
                bool kept_heap, const torch::Device& device) {
  const AttentionConfig& a = c.attention.encoder_self;
  const bool th = a.variant == "talking_heads";
  if (!(a.variant == "multi_head" || th) || c.model.encoder_layers != c.model.decoder_layers) {
    thx::log("bench")->warn("the peer supports only multi_head/talking_heads with equal encoder "
                            "and decoder depth; no peer run");
    return -1;
  }
  // On the CPU: Debian's python3 (the same ATen 1.13) in eager mode. On a GPU: the machine's
  // PyTorch 2 as its users run it, compiled, multi-head through SDPA (THX_PEER_PYTHON overrides).
  const char* python = std::getenv("THX_PEER_PYTHON");
  const std::string cmd = (kept_heap ? kept_heap_environment() : std::string()) + fmt::format(
      "{} {} --bench --attn {} --heads {} --d-model {} --d-ff {} --layers {} "
      "--batch {} --inputs-len {} --targets-len {} --threads {} --steps {} --vocab {}{}{} 2>&1",
      python ? python : device.is_cuda() ? "python3" : "/usr/bin/python3", peer, th ? "th" : "mha", a.h,
      c.model.d_model, c.model.d_ff, c.model.encoder_layers, c.train.batch_size, c.data.inputs_length,
      c.data.targets_length, torch::get_num_threads(), steps + 3, vocab - 100, bf16 ? " --bf16" : "",
      device.is_cuda() ? " --device cuda --sdpa --compile" : "");
  thx::log("bench")->info("peer: {}", cmd);
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  std::smatch m;
  if (std::regex_search(out, m, std::regex("median_step_s=([0-9.]+)"))) return std::stod(m[1]);
  thx::log("bench")->warn("the peer printed no RESULT line:\n{}", out);
  return -1;
}

}  // namespace

double t5_forward_multiplies(const ModelSpec& spec, int64_t n, int64_t t, int64_t vocab) {
  const ModelConfig& m = spec.model;
  const int64_t d = m.d_model;
  auto att = [&](const AttentionDims& a, int64_t q, int64_t k) { return multiplies(a, q, k, CostConvention::Full); };
  const double ff = double(d) * m.d_ff;
  const double enc = m.encoder_layers * (att(spec.encoder_self, n, n) + n * ff * 2);
  const double dec =
      m.decoder_layers * (att(spec.decoder_self, t, t) + att(spec.encoder_decoder, t, n) + t * ff * 2);
  return enc + dec + double(t) * d * vocab;
}

double encoder_forward_multiplies(const ModelSpec& spec, int64_t n, int64_t predictions, int64_t vocab) {
  const ModelConfig& m = spec.model;
  const int64_t d = m.d_model, E = m.embedding_size > 0 ? m.embedding_size : d;
  const double att = multiplies(spec.encoder_self, n, n, CostConvention::Full);
  const double layers = m.encoder_layers * (att + 2.0 * n * d * m.d_ff);
  const double embed = (m.type == "albert" || E != d) ? double(n) * E * d : 0.0;
  const double heads = double(predictions) * (double(d) * E + double(E) * vocab) + double(d) * d;
  return layers + embed + heads;
}

namespace {

// Every precision's matmul peak, the rows timed so far, and the tables they fill.
class TrainBench {
 public:
  explicit TrainBench(const BenchTrainOptions& o)
      : o_(o),
        precisions_(bench_precisions(o.precision.empty() ? o.config.train.precision : o.precision, "--precision",
                                     o.device)),
        gpu_(o.device.is_cuda()),
        peak_size_(gpu_ ? 8192 : 2048) {
    for (const auto& p : precisions_) {
      peak_[p] = matmul_peak_gflops(peak_size_, 5, p, o.device);
      thx::log("bench")->info("{} matmul peak ({}^3): {:.1f} GFLOP/s, {}", p, peak_size_, peak_[p],
                              device_description(o.device));
    }
    table_.header = {"config", "attention", "precision", "params", "batch", "s/step", "tokens/s", "model GFLOP/s",
                     "% of peak", gpu_ ? "peak GPU MB" : "peak RSS MB", "peer s/step", "thx / peer"};
    table_.align = "lllrrrrrrrrr";
    speedups_.header = {"config", "attention", "fp32 s/step", "bf16 s/step", "bf16 speed-up", "fp32 / bf16 peak RSS"};
    speedups_.align = "llrrrr";
    ratios_.header = {"h", "TH/MH step time", "paper's TPU ratio"};
    ratios_.align = "rrr";
    deterministic_.header = {"config", "attention", "precision", "s/step", "a step repeats",
                             "deterministic s/step", "a step repeats", "ratio"};
    deterministic_.align = "lllrlrlr";
  }

  // Every precision asked for, the peer beside the precisions in `peer_at`; returns the last
  // precision's step time (-1: out of memory).
  double measure(const std::string& name, const PretrainConfig& c, int64_t vocab, int64_t batch,
                 const std::set<std::string>& peer_at) {
    std::map<std::string, Timed> t;
    for (const auto& p : precisions_) t[p] = measure_one(name, c, vocab, batch, peer_at.count(p) > 0, p);
    if (t.count("fp32") && t.count("bf16") && !t["fp32"].out_of_memory && !t["bf16"].out_of_memory)
      speedups_.rows.push_back({name, summary(c), fmt::format("{:.3f}", t["fp32"].step_s),
                                fmt::format("{:.3f}", t["bf16"].step_s),
                                fmt::format("{:.2f}x", t["fp32"].step_s / t["bf16"].step_s),
                                fmt::format("{:.2f}", t["fp32"].peak_rss_mb / t["bf16"].peak_rss_mb)});
    return t.at(precisions_.back()).out_of_memory ? -1.0 : t.at(precisions_.back()).step_s;
  }

  void ratio(int64_t h, double tm, double tt, const std::string& paper) {
    ratios_.rows.push_back({std::to_string(h), tm > 0 && tt > 0 ? fmt::format("{:.2f}", tt / tm) : "-", paper});
  }

  std::string peer_heap_note() const {
    if (o_.peer.empty()) return "";
    return o_.peer_kept_heap ? "; the peer's heap kept as thx keeps its own (--peer-heap kept: large blocks from "
                               "the heap, never trimmed, through GLIBC_TUNABLES)"
                             : "; the peer's heap on glibc's defaults (--peer-heap kept: as thx keeps its own)";
  }

  std::string report() const {
    std::string peaks;
    for (const auto& p : precisions_) peaks += fmt::format("{}{} {:.1f}", peaks.empty() ? "" : ", ", p, peak_.at(p));
    std::string r = fmt::format("{}. Matmul peak ({}^3, best of 5, measured in this run), GFLOP/s: {}. "
                                "Median of {} after {} warm-up; model FLOPs = 6 x forward multiply-adds; % of peak "
                                "is of the row's own precision's peak; {}{}{}.\n\n",
                                device_description(o_.device), peak_size_, peaks,
                                o_.steps == 1 ? std::string("1 step") : fmt::format("{} steps", o_.steps), o_.warmup,
                                gpu_ ? "peak GPU MB is the caching allocator's peak of tensors, reset before each row"
                                     : "peak RSS is the process's, the heap trimmed before each row",
                                aten_note(), peer_heap_note()) +
                    render(table_, TableFormat::markdown);
    if (!speedups_.rows.empty()) r += "\n" + render(speedups_, TableFormat::markdown);
    if (!deterministic_.rows.empty())
      r += "\nEach row again under train.deterministic (--deterministic-cost; common/determinism.h), in this run. "
           "\"A step repeats\": one more step's loss and gradients, made twice from the same seed, compared bit for "
           "bit:\n\n" +
           render(deterministic_, TableFormat::markdown);
    if (o_.base_sweep) r += "\n" + render(ratios_, TableFormat::markdown);
    return r + profiles_;
  }

  bool gpu() const { return gpu_; }

 private:
  static std::string summary(const PretrainConfig& c) {
    return resolve(c.attention.encoder_self, c.model.d_model, c.model.d_model, c.model.d_model).summary();
  }

  Timed measure_one(const std::string& name, const PretrainConfig& c, int64_t vocab, int64_t batch, bool peer,
                    const std::string& precision) {
    auto log = thx::log("bench");
    const ModelSpec spec = resolve_model_spec(c.model, c.attention);  // this row's (a base size, a variant)
    Timed t;
    try {
      const StepRun run{o_.profile, trace_path(fmt::format("{} {} {}", name, summary(c), precision)),
                        o_.deterministic_cost};
      t = time_steps(c, spec, vocab, batch, o_.steps, o_.warmup, precision, run, o_.device);
    } catch (const c10::OutOfMemoryError&) {  // a row that does not fit the GPU (or the machine) says so
      log->warn("{} {} {}: out of memory at batch {}", name, summary(c), precision, batch);
      table_.rows.push_back({name, summary(c), precision, "-", std::to_string(batch), "out of memory", "-", "-", "-",
                             "-", "-", "-"});
      t.out_of_memory = true;
      return t;
    }
    const bool enc = c.model.encoder_only();
    const double flops = 6.0 * batch *
                         (enc ? encoder_forward_multiplies(spec, c.data.inputs_length, c.data.max_predictions_per_seq,
                                                           vocab)
                              : t5_forward_multiplies(spec, c.data.inputs_length, c.data.targets_length, vocab));
    const double gflops = flops / t.step_s / 1e9;
    const double tokens = double(batch) * (c.data.inputs_length + (enc ? 0 : c.data.targets_length)) / t.step_s;
    double peer_s = -1;
    if (peer) {
      trim_heap();  // thx keeps freed memory for reuse (runtime.h); the peer needs it (at base size, 17 GB)
      empty_device_cache(o_.device);  // and a GPU's, which LibTorch's caching allocator keeps
      PretrainConfig pc = c;
      pc.train.batch_size = batch;
      peer_s = run_peer(o_.peer, pc, vocab, o_.steps, precision == "bf16", o_.peer_kept_heap, o_.device);
    }
    const double of_peak = 100 * gflops / peak_.at(precision);
    table_.rows.push_back({name, summary(c), precision, std::to_string(t.params), std::to_string(batch),
                           fmt::format("{:.3f}", t.step_s), fmt::format("{:.0f}", tokens),
                           fmt::format("{:.1f}", gflops), fmt::format("{:.0f}%", of_peak),
                           fmt::format("{:.0f}", t.peak_rss_mb), peer_s > 0 ? fmt::format("{:.3f}", peer_s) : "-",
                           peer_s > 0 ? fmt::format("{:.2f}", t.step_s / peer_s) : "-"});
    if (o_.deterministic_cost) deterministic_row(name, c, spec, vocab, batch, precision, t);
    if (t.profile)
      profiles_ += "\n" + render_profile(*t.profile, fmt::format("Profile, {} {} {}", name, summary(c), precision));
    log->info("{} {} {}: {:.3f} s/step (forward {:.3f}, backward {:.3f}, optimizer {:.3f}), {:.0f}% of the {} "
              "peak, peak memory {:.0f} MB{}", name, summary(c), precision, t.step_s, t.fwd_s, t.bwd_s, t.opt_s,
              of_peak, precision, t.peak_rss_mb, peer_s > 0 ? fmt::format(", peer {:.3f} s/step", peer_s) : "");
    return t;
  }

  // The row timed again under deterministic algorithms (--deterministic-cost), beside its time
  // without them, and whether a step repeats to the bit with and without them; an op they refuse
  // (a finding on a GPU) or memory they lack is the row's entry.
  void deterministic_row(const std::string& name, const PretrainConfig& c, const ModelSpec& spec, int64_t vocab,
                         int64_t batch, const std::string& precision, const Timed& plain) {
    std::string time = "-", repeats = "-", ratio = "-";
    try {
      const DeterminismScope on(true, o_.device, "train.deterministic");
      StepRun run;
      run.repeat = true;
      const Timed d = time_steps(c, spec, vocab, batch, o_.steps, o_.warmup, precision, run, o_.device);
      time = fmt::format("{:.3f}", d.step_s), repeats = d.repeats;
      ratio = fmt::format("{:.2f}", d.step_s / plain.step_s);
    } catch (const c10::OutOfMemoryError&) {
      time = "out of memory";
    } catch (const c10::Error& e) {
      const std::string why = nondeterministic_op(e.what_without_backtrace(), "train.deterministic");
      if (why.empty()) throw;
      thx::log("bench")->warn("{} {} {}: {}", name, summary(c), precision, why);
      time = "refused (the log says why)";
    }
    deterministic_.rows.push_back(
        {name, summary(c), precision, fmt::format("{:.3f}", plain.step_s), plain.repeats, time, repeats, ratio});
    thx::log("bench")->info("{} {} {}: under train.deterministic {} s/step ({}x), a step repeats: {} (without it: {})",
                            name, summary(c), precision, time, ratio, repeats, plain.repeats);
  }

  // Where --trace writes a row's timeline: its name with every run of other characters than letters and
  // digits one '-' (empty: no trace).
  std::string trace_path(const std::string& row) const {
    if (o_.trace_dir.empty() || !o_.profile) return "";
    std::string slug;
    for (const char ch : row)
      if (std::isalnum(static_cast<unsigned char>(ch))) slug += ch;
      else if (!slug.empty() && slug.back() != '-') slug += '-';
    while (!slug.empty() && slug.back() == '-') slug.pop_back();
    return o_.trace_dir + "/" + slug + ".json";
  }

  const BenchTrainOptions& o_;
  std::vector<std::string> precisions_;
  bool gpu_;
  int64_t peak_size_;
  std::map<std::string, double> peak_;  // GFLOP/s of a peak_size_^3 matmul, per precision, measured now
  TextTable table_, speedups_, ratios_, deterministic_;
  std::string profiles_;  // --profile: one per row
};

void set_variant(PretrainConfig& p, const char* v) {
  for (AttentionConfig* a : {&p.attention.encoder_self, &p.attention.decoder_self, &p.attention.encoder_decoder})
    a->variant = v, a->h_k.reset(), a->h_v.reset(), a->dynamic.clear();
}

// BERT-base or ALBERT-base (E = 128) at length 512, batch 4, multi-head and talking-heads.
void encoder_base_rows(TrainBench& bench, const PretrainConfig& c, std::vector<int64_t> heads) {
  if (heads.empty()) heads = {12, 48};
  for (int64_t h : heads) {
    PretrainConfig b = c;
    ModelConfig m;
    m.type = c.model.type, m.recompute = c.model.recompute;
    m.embedding_size = c.model.type == "albert" ? 128 : 0;
    m.positions = c.model.type == "bert" ? "relative" : "absolute";
    b.model = m;
    b.data.inputs_length = 512, b.data.max_predictions_per_seq = c.model.type == "bert" ? 80 : 20;
    b.attention.encoder_self.h = h, b.attention.encoder_self.d_k.reset(), b.attention.encoder_self.d_v.reset();
    PretrainConfig bm = b, bt = b;
    set_variant(bm, "multi_head");
    set_variant(bt, "talking_heads");
    const std::string name = fmt::format("{}-base h={}", c.model.type, h);
    const double tm = bench.measure(name, bm, 30000, 4, {});
    bench.ratio(h, tm, bench.measure(name, bt, 30000, 4, {}), "-");
  }
}

// The paper's T5-base (12+12 layers, 768, 3072) at 512/114, h = 12, 24, 48.
void t5_base_rows(TrainBench& bench, const PretrainConfig& c, int64_t batch, bool peer, std::vector<int64_t> heads,
                  const std::vector<int64_t>& peer_heads) {
  const std::map<int64_t, std::string> paper = {{12, "0.18/0.15 = 1.20"}, {24, "0.22/0.17 = 1.29"},
                                                {48, "0.32/0.21 = 1.52"}};
  if (heads.empty()) heads = {12, 24, 48};
  for (int64_t h : heads) {
    PretrainConfig b = c;
    b.model = ModelConfig{};
    b.data.inputs_length = 512, b.data.targets_length = 114;
    for (AttentionConfig* a : {&b.attention.encoder_self, &b.attention.decoder_self, &b.attention.encoder_decoder})
      a->h = h, a->d_k.reset(), a->d_v.reset();
    PretrainConfig bm = b, bt = b;
    set_variant(bm, "multi_head");
    set_variant(bt, "talking_heads");
    // The peer at base size in bf16 only, at h = 12 and 48 by default (its fp32 steps would
    // add 20 minutes and measure no target).
    const bool beside = peer && std::find(peer_heads.begin(), peer_heads.end(), h) != peer_heads.end();
    const std::set<std::string> base_peer = beside ? std::set<std::string>{"bf16"} : std::set<std::string>{};
    const double tm = bench.measure(fmt::format("base h={}", h), bm, 32128, batch, base_peer);
    bench.ratio(h, tm, bench.measure(fmt::format("base h={}", h), bt, 32128, batch, base_peer),
                paper.count(h) ? paper.at(h) : "-");
  }
}

}  // namespace

std::string bench_train(const BenchTrainOptions& options) {
  BenchTrainOptions o = options;
  if (!o.markdown_out.empty()) check_output_file(o.markdown_out, "--out");  // before the hours it may take
  // The peer runs after each row: a script that is not there would be found only then, row by row.
  if (std::error_code ec; !o.peer.empty() && !std::filesystem::is_regular_file(o.peer, ec))
    throw InputError(fmt::format("--peer {}: {} (the PyTorch peer, a Python script such as "
                                 "../shared/bench/peer_t5.py)", o.peer,
                                 std::filesystem::exists(o.peer, ec) ? "not a file" : "no such file"));
  o.tiled = o.tiled || th_path() != "fused";  // `--th-path tiled|batched|folded|gemm...`: not the fused kernels
  set_th_kernels(!o.tiled);
  // --aten's parts, read where each runs (common/runtime.h), for this bench (with THX_ATEN's).
  struct AtenScope {
    explicit AtenScope(const std::vector<std::string>& names) { set_aten_parts(parse_aten_parts(names, "--aten")); }
    ~AtenScope() { set_aten_parts({}); }
  } aten_scope(o.aten);
  // (before the matmul peak: cuBLAS's workspace is fixed at its first product)
  const DeterminismScope determinism(o.config.train.deterministic, o.device, "train.deterministic");
  if (o.deterministic_cost) {  // (only cuBLAS's workspace stays: each row's second timing takes the scope)
    const DeterminismScope workspace(true, o.device, "--deterministic-cost (train.deterministic)");
  }
  TrainBench bench(o);
  // (under train.deterministic attention_core routes the fused kernels' problems to the tiled path)
  const bool fused = !o.tiled && cuda_th_launcher() && !at::globalContext().deterministicAlgorithms();
  if (bench.gpu())
    thx::log("bench")->info("talking-heads on the GPU: {}",
                            th_path() == "batched"       ? "the batched ATen composition"
                            : th_path() == "folded"      ? folded_path_description()
                            : heads_gemm_path(th_path()) ? heads_gemm_path_description()
                            : fused                      ? "thx's fused CUDA kernels"
                                                         : tiled_path_description());
  const PretrainConfig& c = o.config;
  const int64_t vocab = c.model.vocab_size > 0 ? c.model.vocab_size : c.model.encoder_only() ? 30000 : 8100;
  // The configured model, as multi-head and as talking-heads of the same h.
  PretrainConfig mh = c, th = c;
  set_variant(mh, "multi_head");
  set_variant(th, "talking_heads");
  const bool peer = !o.peer.empty() && !c.model.encoder_only();  // the peer is a T5
  const std::set<std::string> every = peer ? std::set<std::string>{"fp32", "bf16"} : std::set<std::string>{};
  if (!(o.base_only && o.base_sweep)) {
    bench.measure("configured", mh, vocab, c.train.batch_size, every);
    bench.measure("configured", th, vocab, c.train.batch_size, every);
  }
  if (o.base_sweep && c.model.encoder_only()) encoder_base_rows(bench, c, o.base_heads);
  else if (o.base_sweep)
    t5_base_rows(bench, c, o.base_batch > 0 ? o.base_batch : bench.gpu() ? 32 : 8, peer, o.base_heads, o.peer_heads);
  const std::string report = bench.report();
  std::fputs(report.c_str(), stdout);
  if (!o.markdown_out.empty()) write_file_atomic(o.markdown_out, report);
  return report;
}

}  // namespace thx
