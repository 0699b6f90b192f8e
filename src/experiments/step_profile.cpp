#include "experiments/step_profile.h"

#include <ATen/record_function.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <algorithm>
#include <map>

#include "common/text_table.h"

namespace thx {
namespace {

namespace prof = torch::autograd::profiler;

// The phase an op's self time belongs to, by its name.
std::string phase_of(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (name == "thx::optimizer" || has("Adafactor") || has("Lamb") || has("AdamW")) return "optimizer (fp32)";
  if (name == "aten::mm" || name == "aten::bmm" || name == "aten::addmm" || name == "aten::baddbmm" ||
      has("mkldnn_matmul") || has("linear"))
    return "GEMMs";
  if (has("AttentionCore") || has("HeadsSoftmax")) return "attention core rows";
  if (name == "aten::to" || name == "aten::_to_copy" || has("(cast)") || has("ToCopyBackward")) return "casts";
  if (has("RMSNorm") || has("layer_norm")) return "norms";
  if (has("CrossEntropyZ")) return "loss";
  return "other (elementwise, copies, autograd)";
}

const std::vector<std::string> kPhases = {"GEMMs", "attention core rows", "casts", "norms", "loss",
                                          "optimizer (fp32)", "other (elementwise, copies, autograd)"};

}  // namespace

StepProfile profile_step(const std::function<void()>& fn) {
  prof::thread_event_lists lists;
  {
    prof::TLSLegacyProfilerGuard profiler(
        torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU),
        [&](const prof::thread_event_lists& l) { lists = l; });
    RECORD_USER_SCOPE("thx::step");
    fn();
  }
  StepProfile p;
  std::map<std::string, StepProfile::Op> by_name;
  for (const auto& events : lists) {
    // Only the thread that ran the step (its list holds the thx::step range).
    const bool mine = std::any_of(events.begin(), events.end(),
                                  [](const prof::LegacyEvent& e) { return std::string(e.name()) == "thx::step"; });
    if (!mine) continue;
    struct Open {
      const prof::LegacyEvent* push;
      std::string name;
      double children_us = 0;
    };
    std::vector<Open> stack;
    for (const auto& e : events) {
      if (e.kindStr() == "push") {
        // The copy inside a dtype conversion is the conversion: counted as a cast.
        std::string name = e.name();
        if (name == "aten::copy_" && !stack.empty() && stack.back().name == "aten::_to_copy") name = "aten::copy_ (cast)";
        stack.push_back({&e, name});
      } else if (e.kindStr() == "pop" && !stack.empty()) {
        const Open o = stack.back();
        stack.pop_back();
        const double us = o.push->cpuElapsedUs(e);
        const std::string& name = o.name;
        if (name == "thx::step") {
          p.total_ms = us / 1e3;
        } else {
          StepProfile::Op& op = by_name[name];
          op.name = name, op.self_ms += (us - o.children_us) / 1e3, ++op.calls;
        }
        if (!stack.empty()) stack.back().children_us += us;
      }
    }
  }
  for (auto& [k, v] : by_name) p.ops.push_back(v);
  std::sort(p.ops.begin(), p.ops.end(), [](const auto& a, const auto& b) { return a.self_ms > b.self_ms; });
  std::map<std::string, double> ph;
  double accounted = 0;
  for (const auto& op : p.ops) ph[phase_of(op.name)] += op.self_ms, accounted += op.self_ms;
  ph["other (elementwise, copies, autograd)"] += std::max(0.0, p.total_ms - accounted);  // between ops
  for (const auto& k : kPhases) p.phases.emplace_back(k, ph[k]);
  return p;
}

std::string render_profile(const StepProfile& p, const std::string& title, int top) {
  TextTable phases;
  phases.header = {"phase", "ms", "share"};
  phases.align = "lrr";
  for (const auto& [k, ms] : p.phases)
    phases.rows.push_back({k, fmt::format("{:.1f}", ms), fmt::format("{:.0f}%", 100 * ms / std::max(p.total_ms, 1e-9))});
  TextTable ops;
  ops.header = {"op (self time)", "calls", "ms", "share"};
  ops.align = "lrrr";
  for (int i = 0; i < top && i < int(p.ops.size()); ++i)
    ops.rows.push_back({p.ops[i].name, std::to_string(p.ops[i].calls), fmt::format("{:.1f}", p.ops[i].self_ms),
                        fmt::format("{:.0f}%", 100 * p.ops[i].self_ms / std::max(p.total_ms, 1e-9))});
  return fmt::format("{}: one step, {:.1f} ms under the profiler (LibTorch's legacy CPU profiler, self time on the "
                     "stepping thread)\n\n",
                     title, p.total_ms) +
         render(phases, TableFormat::markdown) + "\n" + render(ops, TableFormat::markdown);
}

}  // namespace thx
