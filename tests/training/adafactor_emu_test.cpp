// Adafactor's group update as thx's CUDA kernels (src/training/adafactor_kernels.cuh, in
// adafactor_plan.h's order), run on the CPU by the emulator of common/cuda_compat.h, against
// Adafactor's formulas in float64 (adafactor_reference.h: each weight within 1e-6 + 1e-5 x |ref|,
// the bound of optimizer_test.cpp) and against the group's ATen composition (adafactor_grouped.cpp
// with kernels off: weights and state within fp32's summation order, 1e-7 + 1e-5 x |value|), over
// four steps, one of them clipped, for every place of
// the factored dims (d1 before and after d0, other dims around them), reductions along memory and
// across it, in one and several chunks, unfactored views, momentum, a learning-rate scale, and a
// group larger than a launch takes (kMembers).
#include <gtest/gtest.h>

#include "common/runtime.h"
#include "test_util.h"
#include "training/adafactor_grouped.h"
#include "training/adafactor_plan.h"
#include "training/adafactor_reference.h"
#include "training/optimizer.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

namespace af = cuda::adafactor;

int g_runs = 0;  // group steps the emulated kernels ran

test::Vec as_vec(const torch::Tensor& t) {
  const torch::Tensor d = t.detach().to(torch::kFloat64).contiguous();
  return test::Vec(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

struct EmuLaunch {
  template <class K, class... A>
  void operator()(K kernel, af::Grid g, int threads, A... args) {
    emu::launch({g.x, g.y, g.z}, threads, 0, [&] { kernel(args...); });
  }
};

void emulated(const af::GroupStep& s) {
  const af::ScratchSizes z = af::scratch_sizes(s);
  std::vector<float> scratch(size_t(z.total()), std::nanf(""));  // (read before written: NaN spreads)
  EmuLaunch launch;
  af::run_group_step(launch, s, af::Scratch(scratch.data(), z));
  ++g_runs;
}

struct Runner {
  Runner() { set_adafactor_kernels_on_cpu(emulated); }
  ~Runner() { set_adafactor_kernels_on_cpu(nullptr); }
};

// `members` parameters of `shape`, updated four steps by the kernels and by the ATen composition.
void check(const std::vector<int64_t>& shape, bool factored, int members, bool momentum, double lr_scale) {
  SCOPED_TRACE(c10::str(c10::IntArrayRef(shape)) + " x" + std::to_string(members) + (momentum ? " momentum" : "") +
               " lr scale " + std::to_string(lr_scale));
  const PoisonedCpuMemory poison;  // (test_util.h: state or output nothing wrote is NaN)
  torch::manual_seed(7);
  std::vector<OptimizedParam> a, b;
  for (int i = 0; i < members; ++i) {
    const torch::Tensor w = torch::randn(shape);
    a.push_back({"p" + std::to_string(i), w.clone().requires_grad_(true), shape, false, false, lr_scale});
    b.push_back({"p" + std::to_string(i), w.clone().requires_grad_(true), shape, false, false, lr_scale});
  }
  AdafactorOptions o;
  o.min_dim_size_to_factor = 8;  // (small views factor: the emulator runs a thread at a time)
  if (momentum) o.beta1 = 0.9;
  const std::vector<bool> all(size_t(members), true);
  std::vector<AdafactorGroup> ga = adafactor_groups(a, all, o), gb = adafactor_groups(b, all, o);
  ASSERT_EQ(ga.size(), 1u);
  ASSERT_EQ(ga[0].dims.has_value(), factored);
  std::vector<test::RefAdafactor> refs(static_cast<size_t>(members));
  std::vector<test::Vec> rws;
  for (int i = 0; i < members; ++i) {
    test::RefAdafactor& r = refs[size_t(i)];
    r.shape = shape, r.beta1 = o.beta1, r.factored = ga[0].dims.has_value();
    if (ga[0].dims) r.d0 = int(ga[0].dims->first), r.d1 = int(ga[0].dims->second);
    rws.push_back(as_vec(a[size_t(i)].param));
  }
  const Runner runner;
  const int runs = g_runs;
  for (int step = 1; step <= 4; ++step) {
    for (int i = 0; i < members; ++i) {
      const torch::Tensor g = torch::randn(shape) * (step == 2 ? 10.0 : 0.1);
      a[size_t(i)].param.mutable_grad() = g, b[size_t(i)].param.mutable_grad() = g.clone();
      refs[size_t(i)].step(rws[size_t(i)], as_vec(g), 0.01 / step * lr_scale);
    }
    const double decay = 1.0 - std::pow(double(step), -o.decay_exponent);
    torch::NoGradGuard no_grad;
    adafactor_group_step(ga[0], a, o, decay, 0.01 / step, true);
    adafactor_group_step(gb[0], b, o, decay, 0.01 / step, false);
  }
  EXPECT_EQ(g_runs - runs, 4);
  for (int i = 0; i < members; ++i) {
    EXPECT_TRUE(close(a[size_t(i)].param, b[size_t(i)].param, 1e-7, 1e-5)) << "parameter " << i;
    const torch::Tensor ref = torch::tensor(rws[size_t(i)], torch::kFloat64).view(shape);
    EXPECT_TRUE(close(a[size_t(i)].param.detach().to(torch::kFloat64), ref, 1e-6, 1e-5)) << "parameter " << i;
  }
  const AdafactorGroup &ka = ga[0], &kb = gb[0];
  for (const auto& [x, y] : {std::pair{ka.vr, kb.vr}, {ka.vc, kb.vc}, {ka.v, kb.v}, {ka.m, kb.m}}) {
    ASSERT_EQ(x.defined(), y.defined());
    if (x.defined()) {
      EXPECT_TRUE(close(x, y, 1e-12, 1e-5));
    }
  }
}

TEST(AdafactorEmulated, KernelsEqualTheAtenCompositionForEveryLayout) {
  // (factored_dims: d0 the larger dim, d1 the other; ties keep their order)
  check({13, 14}, true, 3, false, 1.0);  // d0 last (a warp an output), d1 before it
  check({14, 13}, true, 3, false, 1.0);  // d0 first, d1 last
  check({9, 600}, true, 2, false, 1.0);  // d0 of 600: three chunks along memory
  check({300, 9}, true, 2, false, 0.5);  // d0 of 300: two chunks across memory; a learning-rate scale
  check({15, 4, 14}, true, 3, false, 1.0);  // a per-head view: a dim between d0 and d1
  check({2, 13, 3, 14}, true, 2, false, 1.0);  // dims before, between and after
  check({5, 20}, false, 3, false, 1.0);  // unfactored (a dim under 8)
  check({7}, false, 3, false, 1.0);
}

TEST(AdafactorEmulated, MomentumAndGroupsLargerThanALaunch) {
  check({13, 14}, true, 3, true, 1.0);
  check({5, 20}, false, 3, true, 1.0);
  check({5, 20}, false, af::kMembers + 3, false, 1.0);  // two slices
  check({14, 13}, true, af::kMembers + 1, true, 1.0);
}

// Kernels off (the optimizer's fused switch), or a member in another dtype: the ATen composition.
TEST(AdafactorEmulated, OtherwiseTheAtenComposition) {
  const Runner runner;
  const int runs = g_runs;
  std::vector<OptimizedParam> p;
  for (int i = 0; i < 2; ++i) p.push_back({"p", torch::randn({5, 20}).requires_grad_(true), {5, 20}, false});
  for (auto& x : p) x.param.mutable_grad() = torch::randn({5, 20});
  AdafactorOptions o;
  std::vector<AdafactorGroup> g = adafactor_groups(p, {true, true}, o);
  torch::NoGradGuard no_grad;
  adafactor_group_step(g[0], p, o, 0.5, 0.01, false);
  EXPECT_EQ(g_runs, runs);
  p[1].param.mutable_grad() = p[1].param.grad().to(torch::kFloat64);
  adafactor_group_step(g[0], p, o, 0.5, 0.01, true);
  EXPECT_EQ(g_runs, runs);
  p[1].param.mutable_grad() = p[1].param.grad().to(torch::kFloat32);
  adafactor_group_step(g[0], p, o, 0.5, 0.01, true);
  EXPECT_EQ(g_runs, runs + 1);
}

// THX_ATEN=adafactor (a GPU session names it where the kernels' test failed) and bench train's
// --aten adafactor (set_aten_parts) take the optimizer's step to the composition; a name that is
// not a part is one line naming it, from the step and from thx before any command runs (exit 2).
TEST(AdafactorEmulated, AtenPartsTakeTheOptimizerToTheComposition) {
  const Runner runner;
  std::vector<OptimizedParam> p;
  for (int i = 0; i < 2; ++i) p.push_back({"p", torch::randn({5, 20}).requires_grad_(true), {5, 20}, false});
  AdafactorOptions o;
  o.group_on_cpu = true;  // (and the CPU's own loops off, so that the group takes the parameters)
  const std::unique_ptr<Optimizer> opt = make_adafactor(p, o);
  set_cpu_kernels(false);
  auto kernel_steps = [&] {
    const int runs = g_runs;
    for (auto& x : p) x.param.mutable_grad() = torch::randn({5, 20});
    opt->step(0.01);
    return g_runs - runs;
  };
  EXPECT_EQ(kernel_steps(), 1);
  setenv("THX_ATEN", "loss,adafactor", 1);
  EXPECT_EQ(kernel_steps(), 0);
  setenv("THX_ATEN", "loss", 1);
  EXPECT_EQ(kernel_steps(), 1);
  AtenParts adafactor;
  adafactor.adafactor = true;
  set_aten_parts(adafactor);
  EXPECT_EQ(kernel_steps(), 0);
  set_aten_parts({});
  setenv("THX_ATEN", "adafactor,norm", 1);
  EXPECT_EQ(error_of([&] { kernel_steps(); }),
            "THX_ATEN=adafactor,norm: norm is not a part; allowed: adafactor, loss, rms_norm (comma-separated: these "
            "by ATen's composition, not thx's kernels)");
  unsetenv("THX_ATEN");
  EXPECT_EQ(kernel_steps(), 1);
  set_cpu_kernels(true);
  const std::string thx = THX_BINARY;
  const RunResult r = run_command("THX_ATEN=yes " + thx + " bench train --dump-config 2>&1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "thx: error: THX_ATEN=yes: yes is not a part; allowed: adafactor, loss, rms_norm (comma-separated: "
                   "these by ATen's composition, not thx's kernels)\n");
  EXPECT_EQ(run_command("THX_ATEN=rms_norm " + thx + " bench train --dump-config > /dev/null 2>&1").code, 0);
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
