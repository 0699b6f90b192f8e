#include "experiments/step_profile.h"

#include <ATen/record_function.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstddef>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

#include "common/log.h"
#include "common/runtime.h"
#include "common/text_table.h"
#include "common/torch_compat.h"

namespace thx {
namespace {

namespace prof = torch::autograd::profiler;

enum Phase { kGemms, kCore, kCasts, kNorms, kLoss, kOptimizer, kOther, kUnattributed, kPhaseCount };

// The phase an op's time belongs to, by its name (kOther: none).
Phase phase_of(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (name == "thx::optimizer" || has("Adafactor") || has("Lamb") || has("AdamW")) return kOptimizer;
  if (name == "aten::mm" || name == "aten::bmm" || name == "aten::addmm" || name == "aten::baddbmm" ||
      has("mkldnn_matmul") || has("linear"))
    return kGemms;
  // (the core's forward runs in thx's scope; its backward in its autograd node, one a path: the CPU's
  // AttentionCore*Fn, a GPU's TiledFn (tiled, tiled-*, flash), HeadsGemmFn, FoldedFn, FusedThFn, SDPA's)
  if (has("AttentionCore") || has("HeadsSoftmax") || has("thx::attention_core") || has("scaled_dot_product") ||
      has("ScaledDotProduct") || has("TiledFn") || has("HeadsGemmFn") || has("FoldedFn") || has("FusedThFn"))
    return kCore;
  if (name == "aten::to" || name == "aten::_to_copy" || has("(cast)") || has("ToCopyBackward")) return kCasts;
  if (has("RMSNorm") || has("layer_norm") || has("thx::rms_norm")) return kNorms;
  if (has("CrossEntropyZ") || has("thx::loss")) return kLoss;
  return kOther;
}

// The phases' names: on the CPU (self time of ops) and on a GPU (time of the kernels they launched).
const char* const kCpuPhases[kPhaseCount] = {"GEMMs", "attention core rows", "casts", "norms", "loss",
                                             "optimizer (fp32)", "other (elementwise, copies, autograd)", ""};
const char* const kDevicePhases[kPhaseCount] = {"GEMMs",
                                                "attention core (its own kernels; its GEMMs are GEMMs)",
                                                "casts",
                                                "norms",
                                                "loss",
                                                "optimizer (fp32)",
                                                "other (elementwise, copies)",
                                                "unattributed (no op known to have launched it)"};

// The ops' parents: on each thread, the innermost op whose span holds this one's (an op's span on a
// thread holds its callees', in Kineto's record and the legacy profiler's; at equal times the op
// recorded first, the lower correlation, is outside).
std::vector<ptrdiff_t> parents_of(const std::vector<OpSpan>& ops) {
  std::vector<size_t> order(ops.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const OpSpan &x = ops[a], &y = ops[b];
    if (x.thread != y.thread) return x.thread < y.thread;
    if (x.start_us != y.start_us) return x.start_us < y.start_us;
    if (x.end_us != y.end_us) return x.end_us > y.end_us;
    return x.correlation < y.correlation;
  });
  std::vector<ptrdiff_t> parent(ops.size(), -1);
  std::vector<size_t> open;
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    if (k > 0 && ops[order[k - 1]].thread != ops[i].thread) open.clear();
    while (!open.empty() && ops[open.back()].end_us < ops[i].end_us) open.pop_back();
    parent[i] = open.empty() ? -1 : ptrdiff_t(open.back());
    open.push_back(i);
  }
  return parent;
}

// The forward op that made each backward node (the same sequence number on the thread the node
// names), or -1. Ops that make no node (views: reshape) carry the number of the next node made,
// so of the ops with one number the last to start made it (the outer one where two start at once).
std::vector<ptrdiff_t> forwards_of(const std::vector<OpSpan>& ops) {
  std::map<std::pair<uint64_t, int64_t>, size_t> forward;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].sequence < 0 || ops[i].fwd_thread != 0) continue;
    const auto [it, added] = forward.emplace(std::make_pair(ops[i].thread, ops[i].sequence), i);
    const OpSpan& was = ops[it->second];
    if (!added && (ops[i].start_us > was.start_us || (ops[i].start_us == was.start_us && ops[i].end_us > was.end_us)))
      it->second = i;
  }
  std::vector<ptrdiff_t> made_by(ops.size(), -1);
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].sequence >= 0 && ops[i].fwd_thread != 0) {
      const auto it = forward.find({ops[i].fwd_thread, ops[i].sequence});
      if (it != forward.end()) made_by[i] = ptrdiff_t(it->second);
    }
  return made_by;
}

// A kernel's phase from the op that launched it (index i, or -1): the optimizer's if any op around
// it is "thx::optimizer", else the first op from it outward whose name names a phase, where a
// backward node that names none stands for its forward op's phase (found the same way).
Phase kernel_phase(const std::vector<OpSpan>& ops, const std::vector<ptrdiff_t>& parent,
                   const std::vector<ptrdiff_t>& made_by, ptrdiff_t i, int depth = 0) {
  if (i < 0) return kUnattributed;
  Phase found = kOther;
  for (ptrdiff_t j = i; j >= 0; j = parent[size_t(j)]) {
    Phase ph = phase_of(ops[size_t(j)].name);
    if (ph == kOther && made_by[size_t(j)] >= 0 && depth < 4) {  // (a forward op inside a backward: recomputation)
      ph = kernel_phase(ops, parent, made_by, made_by[size_t(j)], depth + 1);
      if (ph == kOptimizer) ph = kOther;  // (only the backward's own scopes make it the optimizer's)
    }
    if (ph == kOptimizer) return kOptimizer;
    if (found == kOther) found = ph;
  }
  return found;
}

std::vector<StepProfile::Op> by_time(const std::map<std::string, StepProfile::Op>& m) {
  std::vector<StepProfile::Op> v;
  for (const auto& [k, op] : m) v.push_back(op);
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.self_ms > b.self_ms; });
  return v;
}

// What the legacy profiler recorded on the thread that ran the step (the list that holds thx::step),
// as spans in the order they began: times in microseconds from the list's first event (as the
// elapsed nanoseconds' count, exact: the clock's own value in microseconds, above 2^50, would keep
// only quarters of one in a double); correlation is that order, so that at one time the op begun
// first is outside (parents_of); the copy inside a dtype conversion is named a cast.
std::vector<OpSpan> cpu_spans(const prof::thread_event_lists& lists) {
  std::vector<OpSpan> ops;
  for (const auto& events : lists) {
    const bool mine = std::any_of(events.begin(), events.end(),
                                  [](const prof::LegacyEvent& e) { return std::string(e.name()) == "thx::step"; });
    if (!mine) continue;
    std::vector<std::pair<const prof::LegacyEvent*, size_t>> open;  // (push, its span)
    for (const auto& e : events) {
      if (e.kindStr() == "push") {
        std::string name = e.name();
        if (name == "aten::copy_" && !open.empty() && ops[open.back().second].name == "aten::_to_copy")
          name = "aten::copy_ (cast)";
        const double at = events.front().cpuElapsedUs(e);
        ops.push_back({name, e.threadId(), at, at, uint64_t(ops.size() + 1), e.sequenceNr(), e.fwdThreadId()});
        open.emplace_back(&e, ops.size() - 1);
      } else if (e.kindStr() == "pop" && !open.empty()) {
        OpSpan& op = ops[open.back().second];
        op.end_us = op.start_us + open.back().first->cpuElapsedUs(e);
        open.pop_back();
      }
    }
  }
  return ops;
}

// The CPU's self times (an op's span less its children's), by op and by phase. An op's phase is
// found as a GPU kernel's is from the op that launched it (kernel_phase), so the two profiles count
// alike. The step's time outside every op is "other".
StepProfile attribute_cpu(const std::vector<OpSpan>& ops) {
  const std::vector<ptrdiff_t> parent = parents_of(ops), made_by = forwards_of(ops);
  std::vector<double> children_us(ops.size(), 0.0);
  for (size_t i = 0; i < ops.size(); ++i)
    if (parent[i] >= 0) children_us[size_t(parent[i])] += ops[i].end_us - ops[i].start_us;
  StepProfile p;
  std::map<std::string, StepProfile::Op> by_name;
  double ph[kPhaseCount] = {}, accounted = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const double us = ops[i].end_us - ops[i].start_us;
    if (ops[i].name == "thx::step") {
      p.total_ms = us / 1e3;
      continue;
    }
    const double self_ms = (us - children_us[i]) / 1e3;
    StepProfile::Op& op = by_name[ops[i].name];
    op.name = ops[i].name, op.self_ms += self_ms, ++op.calls;
    ph[kernel_phase(ops, parent, made_by, ptrdiff_t(i))] += self_ms, accounted += self_ms;
  }
  p.ops = by_time(by_name);
  ph[kOther] += std::max(0.0, p.total_ms - accounted);  // between ops
  for (int k = 0; k < kUnattributed; ++k) p.phases.emplace_back(kCpuPhases[k], ph[k]);
  return p;
}

StepProfile profile_on_cpu(const std::function<void()>& fn) {
  prof::thread_event_lists lists;
  {
    prof::TLSLegacyProfilerGuard profiler(
        torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU),
        [&](const prof::thread_event_lists& l) { lists = l; });
    RECORD_USER_SCOPE("thx::step");
    fn();
  }
  return attribute_cpu(cpu_spans(lists));
}

// quiet: a warm-up step's, whose failures are not said (the reported step after it says its own).
StepProfile profile_on_device(const std::function<void()>& fn, const c10::Device& device,
                              const std::string& trace_path, bool quiet) {
  StepProfile p;
  p.on_device = true;
  using Clock = std::chrono::steady_clock;
  KinetoSpans spans;
  try {
    spans = record_kineto_spans(
        [&] {
          synchronize(device);
          const auto t0 = Clock::now();
          fn();
          synchronize(device);  // (the step ends with its last kernel)
          p.total_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        },
        true, trace_path);
  } catch (const std::exception& e) {
    p.note = fmt::format("Kineto could not profile this step: {}", e.what());
    p.note = p.note.substr(0, p.note.find('\n'));
    if (!quiet) thx::log("bench")->warn("{}", p.note);
    return p;
  }
  attribute_kernels(spans, p);
  if (p.kernel_launches == 0) {
    p.note = "Kineto recorded no kernel on the GPU (is CUPTI missing?): no GPU times";
    if (!quiet) thx::log("bench")->warn("{}", p.note);
  }
  return p;
}

}  // namespace

std::string short_kernel_name(const std::string& name) {
  std::string s = name.rfind("void ", 0) == 0 ? name.substr(5) : name;
  for (size_t at; (at = s.find("(anonymous namespace)")) != std::string::npos;) s.replace(at, 21, "{anon}");
  int depth = 0;  // the parameter list: the first '(' outside every template's <...>
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    if (s[i] == '>') --depth;
    if (s[i] == '(' && depth == 0 && i > 0) {
      s.resize(s.find_last_not_of(' ', i - 1) + 1);
      break;
    }
  }
  return s.size() > 100 ? s.substr(0, 97) + "..." : s;
}

KinetoSpans record_kineto_spans(const std::function<void()>& fn, bool with_cuda, const std::string& trace_path) {
  using torch::profiler::impl::ActivityType;
  using torch::profiler::impl::ProfilerConfig;
  using torch::profiler::impl::ProfilerState;
  std::set<ActivityType> activities{ActivityType::CPU};
  if (with_cuda) activities.insert(ActivityType::CUDA);
  const ProfilerConfig config(ProfilerState::KINETO);
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  try {
    RECORD_USER_SCOPE("thx::step");
    fn();
  } catch (...) {
    prof::disableProfiler();
    throw;
  }
  const std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  if (!trace_path.empty()) {
    try {
      result->save(trace_path);
    } catch (const std::exception& e) {
      const std::string why = e.what();
      thx::log("bench")->warn("no trace written to {}: {}", trace_path, why.substr(0, why.find('\n')));
    }
  }
  KinetoSpans s;
  // Times from the first event's start, counted in integer nanoseconds before they become doubles
  // (compat::kineto_start_ns): spans that nest must still nest to the nanosecond.
  int64_t first_ns = std::numeric_limits<int64_t>::max();
  for (const auto& e : result->events()) first_ns = std::min(first_ns, compat::kineto_start_ns(e));
  for (const auto& e : result->events()) {
    const std::string name = e.name();
    const double start = double(compat::kineto_start_ns(e) - first_ns) / 1e3, us = compat::kineto_duration_us(e);
    if (e.deviceType() == c10::DeviceType::CPU) {
      // The CUDA runtime's and driver's calls (cudaLaunchKernel, cuLaunchKernel, ...) are CPU events
      // too, with CUPTI's correlations, another count than the ops': they launched, ops asked.
      const bool api = name.rfind("cuda", 0) == 0 ||
                       (name.rfind("cu", 0) == 0 && name.size() > 2 && std::isupper(static_cast<unsigned char>(name[2])));
      if (!api)
        s.ops.push_back(
            {name, e.startThreadId(), start, start + us, e.correlationId(), e.sequenceNr(), e.fwdThreadId()});
    } else if (name.rfind("thx::", 0) != 0 && name.find("Sync") == std::string::npos) {
      // (Not the GPU's copies of thx's scopes, nor its waits: they span kernels, they are none.)
      s.device.push_back({name, us, e.linkedCorrelationId()});
    }
  }
  return s;
}

void attribute_kernels(const KinetoSpans& spans, StepProfile& p) {
  const std::vector<OpSpan>& ops = spans.ops;
  const std::vector<ptrdiff_t> parent = parents_of(ops), made_by = forwards_of(ops);
  std::unordered_map<uint64_t, size_t> by_correlation;
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].correlation != 0) by_correlation.emplace(ops[i].correlation, i);
  double ph[kPhaseCount] = {};
  std::map<std::string, StepProfile::Op> by_op, by_kernel;
  p.kernels_ms = 0, p.kernel_launches = 0;
  for (const DeviceSpan& k : spans.device) {
    const auto it = k.linked_correlation == 0 ? by_correlation.end() : by_correlation.find(k.linked_correlation);
    const ptrdiff_t i = it == by_correlation.end() ? -1 : ptrdiff_t(it->second);
    const double ms = k.us / 1e3;
    ph[kernel_phase(ops, parent, made_by, i)] += ms;
    StepProfile::Op& op = by_op[i < 0 ? "(no op)" : ops[size_t(i)].name];
    op.name = i < 0 ? "(no op)" : ops[size_t(i)].name, op.self_ms += ms, ++op.calls;
    StepProfile::Op& kernel = by_kernel[short_kernel_name(k.name)];
    kernel.name = short_kernel_name(k.name), kernel.self_ms += ms, ++kernel.calls;
    p.kernels_ms += ms, ++p.kernel_launches;
  }
  p.ops = by_time(by_op);
  p.kernels = by_time(by_kernel);
  p.phases.clear();
  for (int k = 0; k < kPhaseCount; ++k) p.phases.emplace_back(kDevicePhases[k], ph[k]);
}

// On the CPU the step runs three times under the profiler, and the fastest is the one reported.
// The profiler's own records move the heap, so the first step under it (now and then the second
// too) wrote its large buffers to fresh pages: a mini T5's attention core took 3,071 page faults
// per encoder layer, 37 ms against 2.6, and the profile was 1.2-2.3 times the timed step, with all
// of the excess in whichever op first touched them. On a GPU (the CUDA caching allocator keeps its
// memory) one step warms up, as torch.profiler's schedule does; it also starts CUPTI, so a
// warm-up that recorded no kernel or failed says nothing, and the second step is profiled anyway.
StepProfile profile_step(const std::function<void()>& fn, const c10::Device& device, const std::string& trace_path) {
  if (device.is_cuda()) {
    profile_on_device(fn, device, "", true);
    return profile_on_device(fn, device, trace_path, false);
  }
  StepProfile best = profile_on_cpu(fn);
  for (int i = 1; i < 3; ++i) {
    StepProfile p = profile_on_cpu(fn);
    if (p.total_ms < best.total_ms) best = std::move(p);
  }
  return best;
}

namespace {

std::string share_of(double ms, double of) { return fmt::format("{:.0f}%", 100 * ms / std::max(of, 1e-9)); }

// (ms to 1 decimal on the CPU's steps of seconds, to 2 on a GPU's of a tenth of one)
TextTable ops_table(const std::vector<StepProfile::Op>& v, const std::vector<std::string>& header, double of, int top,
                    const char* digits = "{:.1f}") {
  TextTable t;
  t.header = header;
  t.align = "lrrr";
  for (int i = 0; i < top && i < int(v.size()); ++i)
    t.rows.push_back({v[i].name, std::to_string(v[i].calls), fmt::format(fmt::runtime(digits), v[i].self_ms),
                      share_of(v[i].self_ms, of)});
  return t;
}

std::string render_device_profile(const StepProfile& p, const std::string& title, int top) {
  std::string head = fmt::format(
      "{}: one step (the second under the profiler), {:.1f} ms of wall time, {:.1f} ms of it in {} kernels on the "
      "GPU (LibTorch's Kineto, "
      "CUPTI's record of each kernel; a kernel's phase is its launching op's or the nearest enclosing op's that "
      "names one, an autograd node standing for the forward op that made it, and inside thx::optimizer the "
      "optimizer's; shares of the wall time)\n\n",
      title, p.total_ms, p.kernels_ms, p.kernel_launches);
  if (!p.note.empty()) head += p.note + "\n\n";
  TextTable phases;
  phases.header = {"phase", "GPU ms", "share"};
  phases.align = "lrr";
  for (const auto& [k, ms] : p.phases) phases.rows.push_back({k, fmt::format("{:.2f}", ms), share_of(ms, p.total_ms)});
  const double idle = std::max(0.0, p.total_ms - p.kernels_ms);
  phases.rows.push_back({"(the GPU idle: the wall time less the kernels')", fmt::format("{:.2f}", idle),
                         share_of(idle, p.total_ms)});
  const TextTable ops =
      ops_table(p.ops, {"op (that launched the kernels)", "kernels", "GPU ms", "share"}, p.total_ms, top, "{:.2f}");
  const TextTable kernels = ops_table(p.kernels, {"kernel", "launches", "GPU ms", "share"}, p.total_ms, top, "{:.2f}");
  return head + render(phases, TableFormat::markdown) + "\n" + render(ops, TableFormat::markdown) + "\n" +
         render(kernels, TableFormat::markdown);
}

}  // namespace

std::string render_profile(const StepProfile& p, const std::string& title, int top) {
  if (p.on_device) return render_device_profile(p, title, top);
  TextTable phases;
  phases.header = {"phase", "ms", "share"};
  phases.align = "lrr";
  for (const auto& [k, ms] : p.phases) phases.rows.push_back({k, fmt::format("{:.1f}", ms), share_of(ms, p.total_ms)});
  return fmt::format("{}: the fastest of three steps under the profiler, {:.1f} ms (LibTorch's legacy CPU profiler, "
                     "self time on the stepping thread)\n\n",
                     title, p.total_ms) +
         render(phases, TableFormat::markdown) + "\n" +
         render(ops_table(p.ops, {"op (self time)", "calls", "ms", "share"}, p.total_ms, top), TableFormat::markdown);
}

}  // namespace thx
