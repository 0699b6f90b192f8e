#include "experiments/bench_attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

#include "attention/costs.h"
#include "attention/cuda/th_args.h"
#include "attention/cuda/th_fused.h"
#include "attention/factory.h"
#include "attention/fused.h"
#include "attention/kernels.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/precision.h"
#include "common/text_table.h"
#include "reference/paper_attention.h"

namespace thx {
namespace {

using Clock = std::chrono::steady_clock;

// Median seconds of fn() over reps, after warmup calls.
template <class F>
double time_median(F&& fn, int64_t warmup, int64_t reps) {
  for (int64_t i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  for (int64_t i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    fn();
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

paper::Params params_of(const torch::nn::Module& m) {
  paper::Params p;
  for (const auto& kv : m.named_parameters()) p[kv.key()] = kv.value();
  return p;
}

// One layer, its inputs, and a forward+backward step.
struct Subject {
  AttentionDims dims;
  std::shared_ptr<Attention> layer;
  paper::Params params;
  // X: the queries' inputs; M: the memory's (X itself where m = n); B: the bias
  // (BenchAttentionOptions::bias), or undefined.
  torch::Tensor X, M, G, B;

  torch::Device device;
  // On a GPU, the most any production step held above what was allocated before it (its
  // activations, workspace and gradients), MB; where a step ran out of memory, what it had reached.
  double peak_mb = 0;
  bool inputs_fit = false;  // allocate_inputs did not run out of memory

  Subject(const AttentionDims& d, const BenchAttentionOptions& opt) : dims(d), device(opt.device) {
    layer = make_attention(d);
    layer->to(device);
    params = params_of(*layer);
  }
  // The step's inputs, on the device. Apart from the constructor, so that a device too small for
  // them (the bias at n = 8192 and 48 heads is 12.9 GB) puts this variant out of its cell alone.
  void allocate_inputs(const BenchAttentionOptions& opt) {
    const bool memory = opt.m != opt.n;
    const int64_t bytes =
        4 * ((2 * opt.n + (memory ? opt.m : 0)) * opt.batch * opt.d_model + (opt.bias ? dims.h * opt.n * opt.m : 0));
    try {
      if (bench_attention_inputs_hook()) bench_attention_inputs_hook()(dims, bytes);  // (tests only)
      X = torch::randn({opt.batch, opt.n, opt.d_model}).to(device).requires_grad_(true);
      M = memory ? torch::randn({opt.batch, opt.m, opt.d_model}).to(device).requires_grad_(true) : X;
      G = torch::randn({opt.batch, opt.n, opt.d_model}).to(device);
      if (opt.bias) B = torch::randn({1, dims.h, opt.n, opt.m}).to(device).requires_grad_(true);
    } catch (const c10::OutOfMemoryError&) {
      X = M = G = B = torch::Tensor();  // (what did fit leaves room for the other variant)
      throw;
    }
    inputs_fit = true;
  }
  template <class F>
  double step(F&& forward, bool production) {
    for (auto& p : layer->parameters()) p.mutable_grad() = torch::Tensor();
    X.mutable_grad() = M.mutable_grad() = torch::Tensor();
    if (B.defined()) B.mutable_grad() = torch::Tensor();
    synchronize(device);
    reset_device_peak(device);
    const double before = device_allocated_mb(device);
    Clock::time_point t0;
    try {
      if (production && bench_attention_step_hook()) bench_attention_step_hook()(dims, B, M);  // (tests only)
      t0 = Clock::now();
      torch::Tensor Y = forward();
      (Y * G).sum().backward();
      synchronize(device);
    } catch (const c10::OutOfMemoryError&) {
      if (production) peak_mb = std::max(peak_mb, device_peak_mb(device) - before);
      throw;
    }
    const double s = seconds_since(t0);
    if (production) peak_mb = std::max(peak_mb, device_peak_mb(device) - before);
    return s;
  }
  double production(const std::string& precision) {
    PrecisionScope scope(precision);
    return step([&] { return layer->forward(X, M, B); }, true);
  }
  double reference() {
    return step(
        [&] {
          return dims.name() == "multi_head" ? paper::multi_head(X, M, params, B)
                                             : paper::talking_heads(X, M, params, B);
        },
        false);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

double matmul_peak_gflops(int64_t size, int64_t reps, const std::string& precision, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  const torch::ScalarType dtype = precision_dtype(precision);
  const auto on = torch::TensorOptions().device(device);
  torch::Tensor a = torch::randn({size, size}, on).to(dtype), b = torch::randn({size, size}, on).to(dtype);
  torch::Tensor c = torch::mm(a, b);
  double best = 1e30;
  for (int64_t i = 0; i < reps; ++i) {
    synchronize(device);
    const auto t0 = Clock::now();
    torch::mm_out(c, a, b);
    synchronize(device);
    best = std::min(best, seconds_since(t0));
  }
  return 2.0 * size * size * size / best / 1e9;
}

std::vector<std::string> bench_precisions(const std::string& value, const std::string& flag,
                                          const torch::Device& device) {
  if (value != "fp32" && value != "bf16" && value != "both")
    throw InputError(fmt::format("{} {}: allowed: fp32, bf16, both", flag, value));
  std::vector<std::string> out = value == "both" ? std::vector<std::string>{"fp32", "bf16"}
                                                 : std::vector<std::string>{value};
  for (const auto& p : out) check_precision(p, device, flag);
  return out;
}

namespace {

// The tables of one `thx bench attention`, and whether its targets held.
struct AttentionTables {
  TextTable runs, ratios;
  bool all_ratios_ok = true;   // (over the cells where both variants ran)
  bool all_memory_ok = true;   // a GPU's: talking-heads' step at most 1.1x multi-head's memory
  std::vector<std::string> runs_out_of_memory;  // the cells where a variant did, and which
  double speedup24 = 0;  // production over the einsum reference at h = 24 (the slower variant's)
  bool fused = false;    // talking-heads ran on the fused kernels (a GPU's)
};

std::string launch_text(const ThLaunch& l) {
  static const char* const kSums[] = {"in-order", "staggered", "vector"};
  const char* pads = l.forward_padded && l.backward_padded ? ", heads padded"
                     : l.forward_padded                      ? ", forward's heads padded"
                     : l.backward_padded                     ? ", backward's heads padded"
                                                             : "";
  return fmt::format("{}x{} / {}x{}, {}, {}{}", l.forward.R, l.forward.C, l.backward.R, l.backward.C, l.threads,
                     kSums[static_cast<int>(l.key_sums)], pads);
}

// The forced tiles fit every cell's shared memory, or an InputError says which does not.
void check_forced_launch(const BenchAttentionOptions& opt, const std::vector<std::string>& precisions) {
  const cuda_th::Launcher* l = cuda_th_launcher();
  if (!l || (opt.th_launch.forward.R <= 0 && opt.th_launch.backward.R <= 0)) return;
  for (const int64_t h : opt.heads)
    for (const std::string& p : precisions) {
      const std::string why = fused_th_launch_unfit(opt.th_launch, int(h), int(opt.d_model / h), p == "bf16", *l);
      if (!why.empty()) throw InputError("--th-tiles: " + why);
    }
}

// "n = m = 512" (self-attention), or "n = 114 queries, m = 512 keys" (an encoder-decoder's).
std::string lengths_text(const BenchAttentionOptions& opt) {
  return opt.m == opt.n ? fmt::format("n = m = {}", opt.n) : fmt::format("n = {} queries, m = {} keys", opt.n, opt.m);
}

// The gradients a step computes: "dX and every parameter gradient", with the memory's dM (--m)
// and the bias's (--bias) where there are.
std::string gradients_text(const BenchAttentionOptions& opt) {
  std::vector<std::string> g = {"dX"};
  if (opt.m != opt.n) g.push_back("the memory's dM");
  g.push_back("every parameter gradient");
  if (opt.bias) g.push_back("the bias's");
  std::string text = g[0];
  for (size_t i = 1; i < g.size(); ++i) text += (i + 1 == g.size() ? " and " : ", ") + g[i];
  return text;
}

// The median of v, or -1 for none.
double median_or(const std::vector<double>& v) { return v.empty() ? -1 : median(v); }

// A variant's row: its median step (none: it ran out of memory), its reference's (none: not run,
// or out of memory) and on a GPU the most a step held.
void add_run_row(const BenchAttentionOptions& opt, const Subject& subject, int64_t h, const std::string& precision,
                 double peak, const std::vector<double>& t, const std::vector<double>& ref, bool reference,
                 AttentionTables& out) {
  const AttentionDims& d = subject.dims;
  const double secs = median_or(t), ref_s = median_or(ref);
  const double gflops = 6 * double(opt.batch) * multiplies(d, opt.n, opt.m, CostConvention::Full) / secs / 1e9;
  const std::string ref_text = !reference ? "-" : ref_s < 0 ? "out of memory" : fmt::format("{:.1f}", ref_s * 1e3);
  const bool both = secs >= 0 && ref_s >= 0;
  if (secs < 0)
    out.runs.rows.push_back({d.name(), std::to_string(h), std::to_string(d.d_k), precision, "out of memory", "-", "-",
                             ref_text, "-"});
  else
    out.runs.rows.push_back({d.name(), std::to_string(h), std::to_string(d.d_k), precision,
                             fmt::format("{:.1f}", secs * 1e3), fmt::format("{:.1f}", gflops),
                             fmt::format("{:.0f}%", 100 * gflops / peak), ref_text,
                             reference && both ? fmt::format("{:.2f}x", ref_s / secs) : "-"});
  if (opt.device.is_cuda())
    out.runs.rows.back().push_back(
        !subject.inputs_fit ? "inputs did not fit" : fmt::format("{:.0f}{}", subject.peak_mb, secs < 0 ? "+" : ""));
  if (secs >= 0)
    thx::log("bench")->info("{} h={} {}: {:.1f} ms ({:.0f}% of the {} peak){}", d.name(), h, precision, secs * 1e3,
                            100 * gflops / peak, precision,
                            reference && ref_s >= 0 ? fmt::format(", einsum reference {:.1f} ms", ref_s * 1e3) : "");
  if (h == 24 && reference) {
    const double speedup = both ? ref_s / secs : 0;  // (a variant out of memory: no speedup to claim)
    out.speedup24 = d.name() == "multi_head" ? speedup : std::min(out.speedup24, speedup);
  }
}

// The cell's ratios: TH/MH time against the multiplies, and on a GPU the steps' memory against
// the fused kernel's target (talking-heads' step at most 1.1x multi-head's); a variant out of
// memory leaves no time ratio, and misses the memory target where it is talking-heads alone.
void add_ratio_row(const BenchAttentionOptions& opt, const Subject (&subject)[2], int64_t h,
                   const std::string& precision, const bool (&oom)[2], double time_ratio, AttentionTables& out) {
  // The target compares with the paper's multiplies (section 5).
  const double mult_ratio = multiplies(subject[1].dims, opt.n, opt.m) / multiplies(subject[0].dims, opt.n, opt.m);
  const std::string none = oom[0] && oom[1] ? "both" : oom[0] ? "multi_head" : "talking_heads";
  if (oom[0] || oom[1]) {
    out.runs_out_of_memory.push_back(fmt::format("h = {} {}: {}", h, precision, none));
    out.ratios.rows.push_back(
        {std::to_string(h), precision, "-", fmt::format("{:.3f}", mult_ratio), "-", "out of memory: " + none});
  } else {
    const bool ok = time_ratio / mult_ratio <= 1.15;
    out.all_ratios_ok = out.all_ratios_ok && ok;
    out.ratios.rows.push_back({std::to_string(h), precision, fmt::format("{:.3f}", time_ratio),
                               fmt::format("{:.3f}", mult_ratio), fmt::format("{:.3f}", time_ratio / mult_ratio),
                               ok ? "met" : "MISSED"});
  }
  if (!opt.device.is_cuda()) return;
  const double memory = subject[1].peak_mb / subject[0].peak_mb;
  const bool memory_ok = !oom[1] && (oom[0] || memory <= 1.1);
  out.all_memory_ok = out.all_memory_ok && memory_ok;
  out.ratios.rows.back().push_back(oom[0] || oom[1] ? "-" : fmt::format("{:.2f}", memory));
  out.ratios.rows.back().push_back(memory_ok ? "met" : "MISSED");
  out.ratios.rows.back().push_back(out.fused ? launch_text(fused_th_last_launch()) : "-");
}

// One variant's step, timed, or -1 where the device ran out of memory: from then on the variant
// is out of the cell (`oom`), and the others go on.
template <class F>
double unless_out_of_memory(F&& step, const std::string& what, bool& oom, const torch::Device& device) {
  if (oom) return -1;
  try {
    return step();
  } catch (const c10::OutOfMemoryError& e) {
    const std::string why = e.what();
    thx::log("bench")->warn("{}: out of memory ({})", what, why.substr(0, why.find('\n')));
    oom = true;
    empty_device_cache(device);
    return -1;
  }
}

// Multi-head and talking-heads of h heads in one precision, interleaved: MH, TH, MH, TH, ... so
// that drift in the machine's speed hits both alike; the ratio is the median of the per-pair
// ratios. A variant that runs out of device memory says so in its row, and the cell has no ratio.
void measure_cell(const BenchAttentionOptions& opt, int64_t h, const std::string& precision, double peak,
                  AttentionTables& out) {
  auto log = thx::log("bench");
  const bool reference = opt.reference && precision == "fp32";  // the einsum reference is fp32
  AttentionConfig mh, th;
  mh.variant = "multi_head", th.variant = "talking_heads";
  mh.h = th.h = h;
  Subject subject[2] = {Subject(resolve(mh, opt.d_model, opt.d_model, opt.d_model), opt),
                        Subject(resolve(th, opt.d_model, opt.d_model, opt.d_model), opt)};
  std::vector<double> t[2], ref[2], pair;
  bool oom[2] = {false, false}, ref_oom[2] = {false, false};
  auto what = [&](int v) { return fmt::format("{} h={} {}", subject[v].dims.name(), h, precision); };
  for (int v = 0; v < 2; ++v) {
    auto inputs = [&] { return subject[v].allocate_inputs(opt), 0.0; };
    unless_out_of_memory(inputs, what(v) + " inputs", oom[v], opt.device);
    ref_oom[v] = oom[v];
  }
  for (int64_t r = 0; r < opt.warmup + opt.reps; ++r) {
    double s[2];
    for (int v = 0; v < 2; ++v)
      s[v] = unless_out_of_memory([&] { return subject[v].production(precision); }, what(v), oom[v], opt.device);
    if (r < opt.warmup) continue;
    for (int v = 0; v < 2; ++v)
      if (s[v] >= 0) t[v].push_back(s[v]);
    if (s[0] >= 0 && s[1] >= 0) pair.push_back(s[1] / s[0]);
  }
  if (reference)
    for (int64_t r = 0; r < 1 + std::max<int64_t>(1, opt.reps / 2); ++r)
      for (int v = 0; v < 2; ++v) {
        const double s = unless_out_of_memory([&] { return subject[v].reference(); }, what(v) + " reference",
                                              ref_oom[v], opt.device);
        if (r > 0 && s >= 0) ref[v].push_back(s);
      }
  for (int v = 0; v < 2; ++v) add_run_row(opt, subject[v], h, precision, peak, oom[v] ? std::vector<double>{} : t[v],
                                         ref_oom[v] ? std::vector<double>{} : ref[v], reference, out);
  add_ratio_row(opt, subject, h, precision, oom, median_or(pair), out);
}

// The report's last line: whether each target held, and the cells a variant ran out of memory in.
std::string targets_text(const BenchAttentionOptions& opt, const std::vector<std::string>& precisions,
                         const AttentionTables& tables) {
  std::string report;
  report += fmt::format("\nTargets: TH/MH time ratio within 1.15x of the multiplies ratio at every "
                        "h{}: {}.", tables.runs_out_of_memory.empty() ? "" : " where both ran",
                        tables.all_ratios_ok ? "met" : "MISSED");
  if (opt.device.is_cuda())
    report += fmt::format(" Talking-heads' step at most 1.1x multi-head's memory at every h: {}.",
                          tables.all_memory_ok ? "met" : "MISSED");
  if (!tables.runs_out_of_memory.empty()) {
    std::string cells;
    for (const std::string& c : tables.runs_out_of_memory) cells += (cells.empty() ? "" : "; ") + c;
    report += fmt::format(" Out of memory: {}.", cells);
  }
  const bool fp32 = std::find(precisions.begin(), precisions.end(), "fp32") != precisions.end();
  if (opt.reference && fp32 && std::find(opt.heads.begin(), opt.heads.end(), 24) != opt.heads.end())
    report += fmt::format(" Production at least 2x faster than the einsum reference at h = 24: "
                          "{:.2f}x, {}.", tables.speedup24, tables.speedup24 >= 2 ? "met" : "MISSED");
  return report;
}

}  // namespace

BenchAttentionStepHook& bench_attention_step_hook() {
  static BenchAttentionStepHook hook;
  return hook;
}

std::function<void(const AttentionDims&, int64_t)>& bench_attention_inputs_hook() {
  static std::function<void(const AttentionDims&, int64_t)> hook;
  return hook;
}

namespace {
// Which core took bf16 on the CPU (fused.h, Bf16Core), and where its head products ran: AMX tiles
// or VDPBF16PS (kernels.h), or fp32 kernels.
std::string cpu_tiles_note(const std::vector<std::string>& precisions) {
  namespace amx = kernels::amx;
  if (std::find(precisions.begin(), precisions.end(), "bf16") == precisions.end()) return "";
  if (bf16_core() == Bf16Core::fp32) return " (bf16 on the fp32 core, its operands widened: THX_BF16_CORE)";
  const bool tiles = amx::use() != amx::Use::off;
  const char* backend = amx::backend() == amx::Backend::tiles ? "AMX tiles" : "VDPBF16PS";
  std::string core;
  if (!amx::cpu_has_amx() && bf16_core() == Bf16Core::automatic)
    core = fmt::format("bf16 on the fp32 core, its operands widened, where no head is wider than {}{}: no AMX-BF16",
                       kBf16CoreFp32Width,
                       tiles ? fmt::format(", heads mixed on {} excepted where {} wide or h x m (keys) >= {}", backend,
                                           kBf16CoreFp32Width, kBf16CoreHeadRows)
                             : "");
  if (!amx::available()) return core.empty() ? "" : " (" + core + ")";
  if (!core.empty()) core += "; ";
  if (!tiles) return fmt::format(" ({}{} off: THX_KERNELS; the bf16 head products in fp32)", core, backend);
  return fmt::format(" ({}bf16 head mixings and grams on {} at {} or more heads)", core, backend, amx::kMinHeads);
}
}  // namespace

std::string bench_attention(const BenchAttentionOptions& options) {
  auto log = thx::log("bench");
  BenchAttentionOptions opt = options;  // its own path, else `thx --th-path`'s
  if (opt.m <= 0) opt.m = opt.n;  // (self-attention)
  if (!opt.markdown_out.empty()) check_output_file(opt.markdown_out, "--out");  // before the hours it may take
  const std::string path =
      opt.batched ? "batched" : opt.tiled && !tiled_path(th_path()) ? "tiled" : opt.fused ? "fused" : th_path();
  opt.batched = path == "batched", opt.tiled = tiled_path(path);
  const bool folded = path == "folded", gemm = heads_gemm_path(path);
  set_tiled_attention(!opt.batched);
  set_folded_attention(folded);
  set_heads_gemm_attention(gemm);
  set_th_kernels(!opt.batched && !opt.tiled && !folded && !gemm);
  set_th_tensor_cores(!opt.fma);
  set_th_padded_heads(!opt.unpadded);
  set_th_launch(opt.th_launch);
  torch::manual_seed(0);
  const std::vector<std::string> precisions = bench_precisions(opt.precision, "--precision", opt.device);
  const int threads = torch::get_num_threads();
  log->info("attention fwd+bwd: d_model {}, {}, batch {}{}, {} thread{}, median of {}", opt.d_model, lengths_text(opt),
            opt.batch, opt.bias ? ", T5's relative position bias" : "", threads, threads == 1 ? "" : "s", opt.reps);
  const bool gpu = opt.device.is_cuda();
  const std::string th_path = !gpu           ? "the CPU cores" + cpu_tiles_note(precisions)
                              : opt.batched ? "the batched ATen composition"
                              : folded ? folded_path_description()
                              : gemm ? heads_gemm_path_description()
                              : opt.tiled || !cuda_th_launcher() ? tiled_path_description()
                              : opt.fma ? "thx's fused CUDA kernels, bf16 products as fp32 FMAs (version 1)"
                                        : "thx's fused CUDA kernels (bf16 products on tensor cores, sm_80+)";
  log->info("talking-heads on {}", th_path);
  const bool fused = gpu && !opt.batched && !opt.tiled && !folded && !gemm && cuda_th_launcher();
  if (fused) check_forced_launch(opt, precisions);
  const int64_t peak_size = gpu ? 8192 : 2048;
  std::map<std::string, double> peaks;
  for (const auto& p : precisions) {
    peaks[p] = matmul_peak_gflops(peak_size, 5, p, opt.device);
    log->info("{} matmul peak ({}^3 mm, best of 5): {:.1f} GFLOP/s, {}", p, peak_size, peaks[p],
              device_description(opt.device));
  }
  AttentionTables tables;
  tables.runs.header = {"variant", "h", "d_k", "precision", "ms", "GFLOP/s", "% of peak", "einsum ref ms",
                        "speedup vs ref"};
  if (gpu) tables.runs.header.push_back("step peak MB");
  tables.runs.align = gpu ? "lrrlrrrrrr" : "lrrlrrrrr";
  tables.ratios.header = {"h", "precision", "TH/MH time", "TH/MH multiplies", "time ratio / multiplies ratio",
                          "target <= 1.15"};
  tables.ratios.align = "rlrrrl";
  tables.fused = fused;
  if (gpu) {
    tables.ratios.header.insert(tables.ratios.header.end(), {"TH/MH step peak memory", "memory target <= 1.1",
                                                              "fused tiles fwd / bwd, threads, atomics"});
    tables.ratios.align += "rll";
  }
  for (const int64_t h : opt.heads)
    for (const std::string& p : precisions) measure_cell(opt, h, p, peaks.at(p), tables);

  std::string peak_text;
  for (const auto& p : precisions) peak_text += fmt::format("{}{} {:.1f}", peak_text.empty() ? "" : ", ", p, peaks[p]);
  std::string report = fmt::format(
      "{}. Matmul peak ({}^3, best of 5, this run), GFLOP/s: {}; % of peak is of the "
      "row's own precision.\n"
      "One attention layer, forward + backward ({}), d_model {}, "
      "{}, batch {}{}; median of {} runs, multi-head and talking-heads interleaved; "
      "TH/MH time is the median of the per-pair ratios. Talking-heads ran on {}.{}\n"
      "GFLOP/s counts 6 x batch x the layer's multiplies per example (all of them, section 5 extended).\n\n",
      device_description(opt.device), peak_size, peak_text, gradients_text(opt), opt.d_model, lengths_text(opt),
      opt.batch,
      opt.bias ? ", with T5's relative position bias (a learned [1,h,n,m] fp32 bias on the logits)" : "",
      opt.reps, th_path,
      gpu ? " Step peak MB: the most a step held above what was allocated before it (its activations, "
            "workspace and gradients; + where it ran out of memory, what it had reached; where the cell's "
            "inputs did not fit, it says so)."
          : "");
  report += render(tables.runs, TableFormat::markdown) + "\n" + render(tables.ratios, TableFormat::markdown);
  report += targets_text(opt, precisions, tables);
  report += "\n";
  std::fputs(report.c_str(), stdout);
  if (!opt.markdown_out.empty()) write_file_atomic(opt.markdown_out, report);
  return report;
}

}  // namespace thx
