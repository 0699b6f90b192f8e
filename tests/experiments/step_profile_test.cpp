// experiments/step_profile.h: where a step's time goes. On the CPU, the legacy profiler's self
// times by phase; on a GPU, Kineto's record of each kernel, counted under the op that launched it.
// The GPU side's attribution is tested here on hand-made spans and on the spans Kineto records on
// the CPU (whose ops and nesting are the GPU's too; only the kernels are missing there), and on a
// GPU by StepProfileOnCuda.*.
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <chrono>
#include <numeric>
#include <regex>
#include <thread>

#include "common/fs.h"
#include "common/runtime.h"
#include "attention/fused.h"
#include "experiments/step_profile.h"
#include "models/t5.h"
#include "test_util.h"
#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

double phase_ms(const StepProfile& p, const std::string& prefix) {
  for (const auto& [name, ms] : p.phases)
    if (name.rfind(prefix, 0) == 0) return ms;
  ADD_FAILURE() << "no phase " << prefix;
  return -1;
}

double phases_sum(const StepProfile& p) {
  return std::accumulate(p.phases.begin(), p.phases.end(), 0.0, [](double s, const auto& ph) { return s + ph.second; });
}

// What Kineto records on the CPU of one training step (forward and backward) of a tiny T5 with
// talking-heads in its encoder, on whatever paths the switches give.
KinetoSpans tiny_t5_step_spans() {
  const PretrainConfig c = tiny_pretrain("unused", 1);
  torch::manual_seed(5);
  T5 model(resolve_model_spec(c.model, c.attention), 64);
  const torch::Tensor inputs = torch::randint(2, 64, {4, 32}), targets = torch::randint(2, 64, {4, 8});
  const torch::Tensor decoder_inputs = torch::cat({torch::zeros({4, 1}, torch::kInt64), targets.narrow(1, 0, 7)}, 1);
  return record_kineto_spans([&] { model->forward(inputs, decoder_inputs, targets).loss.backward(); }, false);
}

// Spans as Kineto gives them: two threads (the step's, and autograd's on a GPU), nested ops.
TEST(StepProfile, KernelsCountUnderTheOpThatLaunchedThemOrTheNearestPhase) {
  KinetoSpans s;
  s.ops = {
      {"thx::step", 1, 0, 100, 1},
      {"aten::linear", 1, 1, 10, 2},
      {"aten::addmm", 1, 2, 9, 3},
      {"thx::attention_core", 1, 10, 30, 4},
      {"aten::bmm", 1, 11, 15, 5},
      {"aten::_softmax", 1, 16, 20, 6},
      {"aten::_to_copy", 1, 21, 25, 7},
      {"aten::copy_", 1, 22, 24, 8},
      {"thx::optimizer", 1, 60, 90, 9},
      {"aten::mm", 1, 61, 62, 10},  // (a product inside the optimizer is the optimizer's)
      {"thx::rms_norm", 1, 91, 95, 11},
      {"aten::mul", 1, 91, 95, 12},  // (the same span as its scope: recorded later, inside it)
      {"MmBackward0", 2, 40, 50, 13},
      {"aten::mm", 2, 41, 49, 14},
      {"aten::mul", 2, 51, 52, 15},
  };
  s.device = {
      {"void sm90_xmma_gemm_bf16(int)", 500, 3},          // addmm: GEMMs
      {"void sm90_xmma_gemm_bf16(int)", 200, 5},          // bmm inside the core: GEMMs
      {"void softmax_warp_forward<float>(float*)", 100, 6},  // the core's
      {"void elementwise_kernel<copy>(int)", 40, 8},      // a copy inside a cast: casts
      {"void elementwise_kernel<add>(int)", 30, 10},      // the optimizer's
      {"void rms(int)", 20, 12},                          // norms
      {"void sm90_xmma_gemm_bf16(int)", 410, 14},         // the backward's thread: GEMMs
      {"void elementwise_kernel<mul>(int)", 7, 15},       // other
      {"Memcpy HtoD (Pageable -> Device)", 2, 0},         // no op known: unattributed
      {"void orphan(int)", 1, 999},                       // a link to no op: unattributed
  };
  StepProfile p;
  p.total_ms = 2.5;
  attribute_kernels(s, p);
  EXPECT_EQ(p.kernel_launches, 10);
  EXPECT_NEAR(p.kernels_ms, 1.31, 1e-12);
  EXPECT_NEAR(phase_ms(p, "GEMMs"), 1.11, 1e-12);
  EXPECT_NEAR(phase_ms(p, "attention core"), 0.1, 1e-12);
  EXPECT_NEAR(phase_ms(p, "casts"), 0.04, 1e-12);
  EXPECT_NEAR(phase_ms(p, "optimizer"), 0.03, 1e-12);
  EXPECT_NEAR(phase_ms(p, "norms"), 0.02, 1e-12);
  EXPECT_NEAR(phase_ms(p, "other"), 0.007, 1e-12);
  EXPECT_NEAR(phase_ms(p, "unattributed"), 0.003, 1e-12);
  EXPECT_NEAR(phases_sum(p), p.kernels_ms, 1e-12);
  // By launching op, largest first: both threads' aten::mm are one row.
  ASSERT_GE(p.ops.size(), 3u);
  EXPECT_EQ(p.ops[0].name, "aten::addmm");
  EXPECT_EQ(p.ops[1].name, "aten::mm");
  EXPECT_EQ(p.ops[1].calls, 2);
  EXPECT_NEAR(p.ops[1].self_ms, 0.44, 1e-12);
  // By kernel: the three products are one name.
  ASSERT_FALSE(p.kernels.empty());
  EXPECT_EQ(p.kernels[0].name, "sm90_xmma_gemm_bf16");
  EXPECT_EQ(p.kernels[0].calls, 3);
  p.on_device = true;
  const std::string md = std::regex_replace(render_profile(p, "Profile"), std::regex(" +"), " ");
  EXPECT_NE(md.find("1.3 ms of it in 10 kernels on the GPU"), std::string::npos) << md;
  EXPECT_NE(md.find("| (the GPU idle: the wall time less the kernels') | 1.19 | 48% |"), std::string::npos) << md;
  EXPECT_NE(md.find("| aten::mm | 2 | 0.44 | 18% |"), std::string::npos) << md;
}

// A backward node whose name names no phase stands for the forward op that made it: the same
// sequence number on the thread the node names (autograd's link, as torch.profiler draws it). Its
// kernels take that op's phase (here the loss's, from the forward op's scope), unless a scope of
// the backward's own names one; a forward op of the same number on another thread is not it.
TEST(StepProfile, ABackwardNodeTakesThePhaseOfTheForwardOpThatMadeIt) {
  KinetoSpans s;
  s.ops = {
      {"thx::rms_norm", 1, -5, -1, 13},
      {"aten::reshape", 1, -4, -3, 12, 7, 0},      // a view in another scope: no node, the next one's number
      {"thx::loss", 1, 0, 10, 1},
      {"aten::logsumexp", 1, 1, 9, 2, 7, 0},       // made node 7 on thread 1 (the last to start with 7)
      {"thx::rms_norm", 3, 0, 10, 3},
      {"aten::pow", 3, 1, 9, 4, 7, 0},             // number 7 on thread 3: another node
      {"LogsumexpBackward0", 2, 20, 30, 5, 7, 1},  // node 7 of thread 1
      {"aten::exp", 2, 21, 29, 6},
      {"PowBackward0", 2, 31, 40, 7, 7, 3},        // node 7 of thread 3
      {"aten::mul", 2, 32, 39, 8},
      {"SumBackward0", 2, 41, 45, 9, 8, 1},        // its forward op was not recorded: other
      {"thx::optimizer", 2, 50, 60, 10},
      {"AddBackward0", 2, 51, 59, 11, 7, 1},       // inside the optimizer's scope: the optimizer's
  };
  s.device = {{"exp", 100, 6}, {"mul", 20, 8}, {"fill", 3, 9}, {"add", 5, 11}};
  StepProfile p;
  attribute_kernels(s, p);
  EXPECT_NEAR(phase_ms(p, "loss"), 0.1, 1e-12);
  EXPECT_NEAR(phase_ms(p, "norms"), 0.02, 1e-12);
  EXPECT_NEAR(phase_ms(p, "other"), 0.003, 1e-12);
  EXPECT_NEAR(phase_ms(p, "optimizer"), 0.005, 1e-12);
}

// The same on Kineto's record of a real step on the CPU: the loss and T5's RMS norm by ATen's
// composition (bench train --aten), whose backward nodes run outside every thx scope. With a
// stand-in kernel for each op that autograd's backward ran, the loss's and the norm's backward
// land in their phases, as their forwards do.
TEST(StepProfile, AnAtenCompositionsBackwardIsItsPartsPhase) {
  AtenParts aten;
  aten.loss = true, aten.rms_norm = true;
  set_aten_parts(aten);
  KinetoSpans s = tiny_t5_step_spans();
  set_aten_parts({});
  for (const OpSpan& node : s.ops)
    if (node.name == "LogsumexpBackward0")  // the loss's (and no other part's) backward node
      s.device.push_back({"k", 1.0, node.correlation});
  const size_t loss_nodes = s.device.size();
  ASSERT_GT(loss_nodes, 0u);
  for (const OpSpan& node : s.ops)
    if (node.name == "RsqrtBackward0") s.device.push_back({"k", 1.0, node.correlation});  // the norms' only
  ASSERT_GT(s.device.size(), loss_nodes);
  StepProfile p;
  attribute_kernels(s, p);
  EXPECT_NEAR(phase_ms(p, "loss"), loss_nodes * 1e-3, 1e-9);
  EXPECT_NEAR(phase_ms(p, "norms"), (s.device.size() - loss_nodes) * 1e-3, 1e-9);
}

TEST(StepProfile, ShortKernelNames) {
  EXPECT_EQ(short_kernel_name("void at::native::{anon}::f<4>(int, float*)"), "at::native::{anon}::f<4>");
  EXPECT_EQ(short_kernel_name("void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, float>(float*, int)"),
            "at::native::{anon}::cunn_SoftMaxForward<8, float>");
  EXPECT_EQ(short_kernel_name("void k<at::Array<char*, 3> >(int (*)(int))"), "k<at::Array<char*, 3> >");
  EXPECT_EQ(short_kernel_name("Memcpy DtoD (Device -> Device)"), "Memcpy DtoD");
  const std::string long_name = "void " + std::string(150, 'a') + "(int)";
  EXPECT_EQ(short_kernel_name(long_name).size(), 100u);
}

// What Kineto records on the CPU: the step's scope, the ops inside it with their spans in
// microseconds (a unit off by 1,000 fails the bounds), and their nesting, which attribute_kernels
// reads: a kernel linked to the product inside thx's attention scope is a GEMM, one linked to the
// softmax there the core's, one linked to the add in the optimizer's scope the optimizer's.
TEST(StepProfile, KinetoSeesAStepsOpsAndTheirNestingOnTheCpu) {
  const torch::Tensor a = torch::randn({384, 384});
  double inner_us = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const KinetoSpans s = record_kineto_spans(
      [&] {
        const auto i0 = std::chrono::steady_clock::now();
        torch::Tensor w;
        {
          RECORD_USER_SCOPE("thx::attention_core");
          w = torch::softmax(a.mm(a), -1);
        }
        RECORD_USER_SCOPE("thx::optimizer");
        w.add_(1.0);
        inner_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - i0).count();
      },
      false);
  const double outer_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(s.device.empty());
  auto find = [&](const std::string& name) -> const OpSpan* {
    for (const OpSpan& o : s.ops)
      if (o.name == name) return &o;
    ADD_FAILURE() << "Kineto recorded no " << name;
    return nullptr;
  };
  const OpSpan *step = find("thx::step"), *mm = find("aten::mm");
  const OpSpan *sm = find("aten::softmax"), *add = find("aten::add_");
  ASSERT_TRUE(step && mm && sm && add);
  EXPECT_GE(step->end_us - step->start_us, 0.5 * inner_us);
  EXPECT_LE(step->end_us - step->start_us, outer_us + 1);
  EXPECT_GT(mm->end_us - mm->start_us, 0);
  EXPECT_LE(step->start_us, mm->start_us);
  EXPECT_LE(mm->end_us, step->end_us);
  EXPECT_NE(mm->correlation, 0u);
  KinetoSpans with_kernels = s;
  with_kernels.device = {
      {"gemm", 100, mm->correlation}, {"softmax", 10, sm->correlation}, {"add", 1, add->correlation}};
  StepProfile p;
  attribute_kernels(with_kernels, p);
  EXPECT_NEAR(phase_ms(p, "GEMMs"), 0.1, 1e-12);
  EXPECT_NEAR(phase_ms(p, "attention core"), 0.01, 1e-12);
  EXPECT_NEAR(phase_ms(p, "optimizer"), 0.001, 1e-12);
}

// A whole T5 step (talking-heads encoder), as Kineto records it on the CPU, with a stand-in kernel of
// 1 us for every op: each finds its op, and thx's scopes give the attention core, the norms and the
// loss their phases (forward in their scopes, backward through their autograd nodes' names).
TEST(StepProfile, EveryOpOfAT5StepFindsItsPhase) {
  const KinetoSpans s = tiny_t5_step_spans();
  KinetoSpans with_kernels = s;
  for (const OpSpan& op : s.ops)
    if (op.correlation != 0) with_kernels.device.push_back({"k", 1.0, op.correlation});
  ASSERT_GT(with_kernels.device.size(), 100u);
  StepProfile p;
  attribute_kernels(with_kernels, p);
  EXPECT_EQ(phase_ms(p, "unattributed"), 0);
  for (const char* phase : {"GEMMs", "attention core", "norms", "loss", "other"})
    EXPECT_GT(phase_ms(p, phase), 0) << phase;
  auto launched = [&](const std::string& op) {
    return std::any_of(p.ops.begin(), p.ops.end(),
                       [&](const StepProfile::Op& o) { return o.name.find(op) != std::string::npos; });
  };
  EXPECT_TRUE(launched("AttentionCoreFn")) << "the core's backward node";
  EXPECT_TRUE(launched("RMSNormFn"));
  EXPECT_TRUE(launched("CrossEntropyZFn"));
  for (const char* scope : {"thx::attention_core", "thx::rms_norm", "thx::loss"})
    EXPECT_TRUE(std::any_of(s.ops.begin(), s.ops.end(), [&](const OpSpan& o) { return o.name == scope; })) << scope;
}

// A GPU's talking-heads paths run the core's backward in their own autograd nodes (TiledFn,
// HeadsGemmFn, FoldedFn), outside thx's scopes: every op inside such a node is the core's, a GEMM
// or a cast. Taken through each path on the CPU (set_th_paths_on_cpu), a stand-in kernel for each op
// nested in a node: all of them land in those two phases (before the nodes were named, the
// backward's softmax and mixings were "other").
TEST(StepProfile, TheGpuPathsBackwardNodesAreTheCores) {
  const std::string path = th_path();
  const bool chosen = th_path_chosen();
  for (const auto& [name, node] : {std::pair<std::string, std::string>{"gemm", "HeadsGemmFn"},
                                   {"folded", "FoldedFn"}, {"tiled-gemm", "TiledFn"}}) {
    SCOPED_TRACE(name);
    set_cpu_kernels(false), set_th_paths_on_cpu(true), set_th_path(name, false);
    KinetoSpans s = tiny_t5_step_spans();
    set_cpu_kernels(true), set_th_paths_on_cpu(false), set_th_path(path, chosen);
    size_t nodes = 0;
    for (const OpSpan& n : s.ops) {
      if (n.name.find(node) == std::string::npos) continue;
      ++nodes;
      for (const OpSpan& op : s.ops)
        if (&op != &n && op.thread == n.thread && op.start_us >= n.start_us && op.end_us <= n.end_us &&
            op.correlation != 0)
          s.device.push_back({"k", 1.0, op.correlation});
    }
    ASSERT_GT(nodes, 0u) << "no op named " << node;
    ASSERT_GT(s.device.size(), 10u);
    StepProfile p;
    attribute_kernels(s, p);
    EXPECT_EQ(phase_ms(p, "other"), 0);
    EXPECT_GT(phase_ms(p, "attention core"), 0);
    EXPECT_NEAR(phase_ms(p, "attention core") + phase_ms(p, "GEMMs") + phase_ms(p, "casts"), s.device.size() * 1e-3,
                1e-9);
  }
}

// The CPU profile: the phases sum to the step, thx's scopes name theirs (the attention core's own
// work is the time inside its scope but outside ATen's ops: here a sleep), products are GEMMs even
// inside the core, and an op that names no phase takes its enclosing scope's (an exp inside
// thx::loss is the loss's, as a GPU's kernel launched there would be), the optimizer's scope over all.
// The CPU profile counts a backward node the same way: logsumexp's backward (exp, mul, ...) is the
// loss's when its forward ran in thx::loss.
TEST(StepProfile, CpuBackwardTakesTheForwardsPhase) {
  const torch::Tensor w = torch::randn({1024, 1024}, torch::requires_grad());
  const StepProfile p = profile_step([&] {
    torch::Tensor l;
    {
      RECORD_USER_SCOPE("thx::loss");
      l = torch::logsumexp(w, -1).sum();
    }
    l.backward();
  });
  double backward_ms = 0;
  for (const StepProfile::Op& op : p.ops)
    if (op.name.find("Backward") != std::string::npos) backward_ms += op.self_ms;
  EXPECT_GT(backward_ms, 0);
  EXPECT_GT(phase_ms(p, "loss"), backward_ms);
  EXPECT_LT(phase_ms(p, "other"), 0.25 * phase_ms(p, "loss")) << "the backward went to the loss";
}

TEST(StepProfile, CpuPhasesSumToTheStepAndThxsScopesNameTheirs) {
  const torch::Tensor a = torch::randn({256, 256}), b = torch::randn({1024, 1024});
  const StepProfile p = profile_step([&] {
    {
      RECORD_USER_SCOPE("thx::attention_core");
      const torch::Tensor j = a.mm(a);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    {
      RECORD_USER_SCOPE("thx::loss");
      for (int i = 0; i < 5; ++i) torch::exp(b);
    }
    {
      RECORD_USER_SCOPE("thx::optimizer");
      for (int i = 0; i < 5; ++i) b.mm(b);
    }
  });
  ASSERT_EQ(p.phases.size(), 7u);
  EXPECT_FALSE(p.on_device);
  EXPECT_NEAR(phases_sum(p), p.total_ms, 1e-6 * p.total_ms);
  EXPECT_GE(phase_ms(p, "attention core rows"), 19.0);
  auto self_ms = [&](const std::string& name) {
    for (const StepProfile::Op& op : p.ops)
      if (op.name == name) return op.self_ms;
    return 0.0;
  };
  EXPECT_GT(self_ms("aten::exp"), 0);
  EXPECT_GE(phase_ms(p, "loss"), self_ms("aten::exp"));
  EXPECT_LT(phase_ms(p, "other"), self_ms("aten::exp")) << "the exps went to the loss";
  EXPECT_GT(phase_ms(p, "GEMMs"), 0);
  EXPECT_LT(phase_ms(p, "GEMMs"), 0.5 * phase_ms(p, "optimizer")) << "the optimizer's products are its own";
  EXPECT_NE(render_profile(p, "Profile").find("LibTorch's legacy CPU profiler"), std::string::npos);
}

// The CPU profile keeps the clock's nanoseconds: its spans count from the step's first event. Its
// clock counts from 1970, above 2^50 microseconds, where a double holds quarters of one: every
// self time would then be a multiple of 250 ns. Here ops of a few microseconds each, some ten names.
TEST(StepProfile, CpuSelfTimesKeepNanoseconds) {
  const torch::Tensor a = torch::randn({64});
  const StepProfile p = profile_step([&] {
    for (int i = 0; i < 20; ++i) {
      torch::Tensor b = a.exp().sin().add(1).mul(a).sqrt().abs().neg().sum();
    }
  });
  int off_grid = 0;
  for (const StepProfile::Op& op : p.ops) {
    const double ns = op.self_ms * 1e6;
    EXPECT_NEAR(ns, std::round(ns), 1e-3) << op.name << ": not whole nanoseconds";
    off_grid += std::fmod(std::round(ns), 250.0) != 0;
  }
  ASSERT_GE(p.ops.size(), 8u);
  EXPECT_GE(off_grid, int(p.ops.size()) / 2) << "self times on a 250 ns grid: the clock's value lost its nanoseconds";
}

// A first step under the profiler is not a fair one to report: it wrote to fresh pages and was up
// to 2.3 times the timed step, unevenly (step_profile.cpp). On the CPU fn runs three times, and
// only the fastest one's ops count: the second where the first and third sleep, the third where
// the first and second do (each sleep in an op of its own), so that no fixed choice passes.
TEST(StepProfile, TheFastestOfThreeStepsUnderTheProfilerIsTheOneReported) {
  const torch::Tensor a = torch::randn({64, 64});
  for (const int fast : {2, 3}) {
    SCOPED_TRACE("the fast step: " + std::to_string(fast));
    int calls = 0;
    const StepProfile p = profile_step([&] {
      ++calls;
      if (calls != fast) {
        RECORD_USER_SCOPE(calls == 1 ? "thx::test_first" : calls == 2 ? "thx::test_second" : "thx::test_third");
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
      }
      torch::exp(a);
    });
    EXPECT_EQ(calls, 3);
    auto has = [&](const std::string& name) {
      for (const StepProfile::Op& op : p.ops)
        if (op.name == name) return true;
      return false;
    };
    EXPECT_TRUE(has("aten::exp"));
    for (const char* slow : {"thx::test_first", "thx::test_second", "thx::test_third"})
      EXPECT_FALSE(has(slow)) << "a slower step was reported: " << slow;
    // Where LibTorch has CUDA the CPU profiler's step took 56-76 ms on the fifth GPU session's H200
    // with no slow scope among its ops (the profiler's own start, not the step's): the time is
    // checked where it is the step's alone.
    if (!torch::cuda::is_available()) EXPECT_LT(p.total_ms, 30);
  }
}

// On a GPU (the GPU machine's session runs it: *OnCuda): a step's kernels, as CUPTI timed them,
// fit inside its wall time, and land in their phases.
TEST(StepProfileOnCuda, AStepsKernelsFitItsWallTimeAndLandInTheirPhases) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device cuda(torch::kCUDA);
  const torch::Tensor a = torch::randn({2048, 2048}, cuda);
  torch::Tensor w = torch::zeros({2048, 2048}, cuda);
  TempDir dir;
  const std::string trace = (dir.path / "step.json").string();
  const StepProfile p = profile_step(
      [&] {
        torch::Tensor j;
        {
          RECORD_USER_SCOPE("thx::attention_core");
          j = torch::softmax(a.mm(a), -1);
        }
        RECORD_USER_SCOPE("thx::optimizer");
        w.add_(j);
      },
      cuda, trace);
  ASSERT_TRUE(p.on_device);
  ASSERT_GE(p.kernel_launches, 3) << p.note;
  EXPECT_GT(phase_ms(p, "GEMMs"), 0);
  EXPECT_GT(phase_ms(p, "attention core"), 0);
  EXPECT_GT(phase_ms(p, "optimizer"), 0);
  EXPECT_LE(phase_ms(p, "unattributed"), 0.1 * p.kernels_ms);
  EXPECT_NEAR(phases_sum(p), p.kernels_ms, 1e-9);
  EXPECT_LE(p.kernels_ms, 1.01 * p.total_ms + 0.05);
  EXPECT_NE(render_profile(p, "Profile").find("kernels on the GPU"), std::string::npos);
  // The timeline (--trace): Kineto's Chrome trace, the kernels in it.
  const std::string json = read_file(trace);
  EXPECT_NE(json.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(json.find("\"kernel\""), std::string::npos);
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
