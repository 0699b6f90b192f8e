// Adafactor and AdamW against their formulas, computed here in double precision with plain
// loops over several steps; the learning-rate schedule's values; factoring decisions.
//
// Tolerance: thx works in fp32 on the same inputs; the reference in fp64. Each element
// check is |thx - ref| <= 1e-6 + 1e-5 |ref| after three steps (a few dozen fp32 operations).
#include <gtest/gtest.h>

#include <cmath>

#include "models/t5.h"
#include "test_util.h"
#include "models/encoder.h"
#include "models/spec.h"
#include "training/adafactor_reference.h"
#include "training/optimizer.h"
#include "training/pretrain.h"

namespace thx {
namespace {
namespace THX_FILE_ID {

using Vec = std::vector<double>;
using test::RefAdafactor;
using test::rms;

Vec to_vec(const torch::Tensor& t) {
  const torch::Tensor d = t.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  return Vec(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

// w_scale and g_scale: the parameter's and the gradients' sizes (0.05 and 0.1, 10 at step 2, by
// default); the tolerance's absolute part scales with w_scale.
void check_adafactor(std::vector<int64_t> shape, bool expect_factored, std::optional<double> beta1,
                     std::vector<int64_t> view = {}, double w_scale = 0.05, double g_scale = 1.0) {
  torch::manual_seed(3);
  torch::Tensor w = (torch::randn(shape) * w_scale).requires_grad_(true);
  RefAdafactor ref;
  ref.shape = view.empty() ? shape : view;
  ref.beta1 = beta1;
  const auto dims = factored_dims(ref.shape);
  ASSERT_EQ(dims.has_value(), expect_factored);
  if (dims) ref.factored = true, ref.d0 = int(dims->first), ref.d1 = int(dims->second);
  AdafactorOptions o;
  o.beta1 = beta1;
  auto opt = make_adafactor({{"w", w, ref.shape, false}}, o);
  Vec rw = to_vec(w);
  for (int step = 1; step <= 3; ++step) {
    torch::Tensor g = torch::randn(shape) * (step == 2 ? 10.0 : 0.1) * g_scale;  // step 2 clips
    w.mutable_grad() = g;
    const double lr = 0.01 / step;
    opt->step(lr);
    ref.step(rw, to_vec(g), lr);
    const Vec got = to_vec(w);
    double worst = 0;
    for (size_t e = 0; e < got.size(); ++e)
      worst = std::max(worst, std::abs(got[e] - rw[e]) - (1e-6 * w_scale / 0.05 + 1e-5 * std::abs(rw[e])));
    EXPECT_LE(worst, 0.0) << "step " << step << ", shape " << c10::str(shape);
  }
  const auto st = opt->state();
  EXPECT_EQ(st.count("w/vr"), size_t(expect_factored));
  EXPECT_EQ(st.count("w/v"), size_t(!expect_factored));
  EXPECT_EQ(st.count("w/m"), size_t(beta1.has_value()));
}

TEST(Adafactor, FactoredMatrixMatchesTheFormulas) { check_adafactor({130, 140}, true, std::nullopt); }
TEST(Adafactor, UnfactoredMatchesTheFormulas) { check_adafactor({10, 20}, false, std::nullopt); }
TEST(Adafactor, ThreeDimensionalPerHeadMatchesTheFormulas) {
  check_adafactor({150, 4, 140}, true, std::nullopt);  // d0 = dim 0, d1 = dim 2
}
TEST(Adafactor, MomentumMatchesTheFormulas) { check_adafactor({130, 140}, true, 0.9); }
// Where the epsilons decide: a parameter of RMS 1e-5 moves by epsilon2 = 1e-3 times the learning
// rate (not by its own RMS), and gradients of 1e-11 (squares of 1e-22) stay normalized to about 1
// beside epsilon1 = 1e-30 (with 1e-20 they would shrink tenfold), factored and not.
TEST(Adafactor, TinyParametersAndGradientsMeetTheEpsilons) {
  check_adafactor({130, 140}, true, std::nullopt, {}, 1e-5, 1e-10);
  check_adafactor({10, 20}, false, std::nullopt, {}, 1e-5, 1e-10);
}
TEST(Adafactor, CombinedViewOfAPerHeadParameter) {
  // A [160, 32, 4] parameter seen as [160, 128] (optimizer.factor_attention: combined).
  check_adafactor({160, 32, 4}, true, std::nullopt, {160, 128});
}

// On a GPU, parameters of one view update together (adafactor_grouped.h): three of each shape,
// each against its own float64 reference from the formulas, as the single CPU parameter above.
// Skipped without a GPU (the GPU machine's session runs it: *OnCuda).
TEST(Adafactor, GroupedUpdateOnCudaMatchesTheFormulas) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const std::optional<double> beta1 : {std::optional<double>{}, std::optional<double>{0.9}})
    for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{130, 140}, {150, 4, 140}, {10, 20}}) {
      SCOPED_TRACE(c10::str(c10::IntArrayRef(shape)) + (beta1 ? " momentum" : ""));
      torch::manual_seed(3);
      std::vector<OptimizedParam> ps;
      std::vector<RefAdafactor> refs(3);
      std::vector<Vec> rws;
      for (int i = 0; i < 3; ++i) {
        ps.push_back({"w" + std::to_string(i), (torch::randn(shape) * 0.05).to(torch::kCUDA).requires_grad_(true),
                      shape, false});
        refs[i].shape = shape, refs[i].beta1 = beta1;
        if (const auto dims = factored_dims(shape)) refs[i].factored = true, refs[i].d0 = int(dims->first), refs[i].d1 = int(dims->second);
        rws.push_back(to_vec(ps[i].param));
      }
      AdafactorOptions o;
      o.beta1 = beta1;
      auto opt = make_adafactor(ps, o);
      for (int step = 1; step <= 3; ++step) {
        std::vector<torch::Tensor> gs;
        for (auto& p : ps) gs.push_back(torch::randn(shape) * (step == 2 ? 10.0 : 0.1)), p.param.mutable_grad() = gs.back().to(torch::kCUDA);
        opt->step(0.01 / step);
        for (int i = 0; i < 3; ++i) {
          refs[i].step(rws[i], to_vec(gs[i]), 0.01 / step);
          EXPECT_TRUE(test::close(ps[i].param.detach().to(torch::kCPU, torch::kFloat64), torch::tensor(rws[i], torch::kFloat64).view(shape),
                                  1e-6, 1e-5)) << "parameter " << i << ", step " << step;
        }
      }
    }
}

// The fused loops (the default) against the ATen composition, over several steps and every
// layout of the two factored dims among the others: identical up to fp32 summation order.
TEST(Adafactor, FusedLoopsEqualTheAtenComposition) {
  for (std::vector<int64_t> shape : {std::vector<int64_t>{130, 140}, {140, 130}, {3, 150, 2, 140, 2},
                                     {150, 4, 140}, {4, 140, 150}, {10, 20}, {7}, {200, 3, 5}})
    for (bool momentum : {false, true}) {
      torch::manual_seed(8);
      torch::Tensor a = torch::randn(shape).requires_grad_(true), b = a.detach().clone().requires_grad_(true);
      AdafactorOptions o;
      if (momentum) o.beta1 = 0.9;
      auto fused = make_adafactor({{"p", a, shape, false}}, o);
      auto aten = make_adafactor({{"p", b, shape, false}}, o);
      aten->set_fused(false);
      for (int step = 0; step < 4; ++step) {
        const torch::Tensor g = torch::randn(shape) * (step == 1 ? 10.0 : 0.1);
        a.mutable_grad() = g, b.mutable_grad() = g;
        fused->step(0.01), aten->step(0.01);
      }
      EXPECT_TRUE(test::close(a, b, 1e-7, 1e-5)) << c10::str(shape) << " momentum " << momentum;
      for (const auto& [k, v] : aten->state())
        EXPECT_TRUE(test::close(fused->state().at(k), v, 1e-12, 1e-5)) << k << " " << c10::str(shape);
    }
}

TEST(Adafactor, FactoredDimsFollowMeshTensorFlow) {
  using P = std::pair<int64_t, int64_t>;
  EXPECT_EQ(factored_dims({768, 768}), P(0, 1));     // ties keep their order
  EXPECT_EQ(factored_dims({768, 3072}), P(1, 0));
  EXPECT_EQ(factored_dims({768, 128, 6}), P(0, 1));  // h = 6: d_k = 128 still factors
  EXPECT_EQ(factored_dims({6, 768, 128}), P(1, 2));
  EXPECT_FALSE(factored_dims({768, 32, 24}));         // talking-heads 24: per head, unfactored
  EXPECT_FALSE(factored_dims({64, 64}));
  EXPECT_FALSE(factored_dims({4096}));
}

TEST(Adafactor, StateRoundTripsExactly) {
  torch::manual_seed(4);
  torch::Tensor a = torch::randn({130, 140}).requires_grad_(true), b = a.detach().clone().requires_grad_(true);
  AdafactorOptions o;
  o.beta1 = 0.5;
  auto oa = make_adafactor({{"p", a, {130, 140}, false}}, o);
  auto ob = make_adafactor({{"p", b, {130, 140}, false}}, o);
  const torch::Tensor g1 = torch::randn({130, 140}), g2 = torch::randn({130, 140});
  a.mutable_grad() = g1;
  oa->step(0.01);
  { torch::NoGradGuard ng; b.copy_(a); }
  ob->load_state(oa->state(), oa->steps());
  a.mutable_grad() = g2, b.mutable_grad() = g2;
  oa->step(0.01), ob->step(0.01);
  EXPECT_TRUE(torch::equal(a, b));
}

// The grouped update (adafactor_grouped.h, what parameters on a GPU take) against the
// per-parameter ATen composition: parameters of several views, three of some, one alone, two
// learning-rate scales; one member without a gradient in one step (its group then updates one
// by one); with and without momentum. Identical up to fp32 summation order, state included,
// and the state round-trips through a fresh grouped optimizer bit for bit.
TEST(Adafactor, GroupedUpdateEqualsTheAtenComposition) {
  using Shape = std::vector<int64_t>;
  const std::vector<Shape> shapes = {{130, 140}, {130, 140}, {130, 140}, {150, 4, 140}, {150, 4, 140},
                                     {150, 4, 140}, {10, 20}, {10, 20}, {7}, {200, 3}};
  for (bool momentum : {false, true}) {
    torch::manual_seed(9);
    std::vector<OptimizedParam> a, b, c;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const torch::Tensor w = torch::randn(shapes[i]);
      const double scale = i == 4 || i == 5 ? 0.5 : 1.0;  // the {150, 4, 140}: one alone, a pair at 0.5
      for (auto* list : {&a, &b, &c})
        list->push_back({"p" + std::to_string(i), w.clone().requires_grad_(true), shapes[i], false, false, scale});
    }
    AdafactorOptions o;
    if (momentum) o.beta1 = 0.9;
    AdafactorOptions og = o;
    og.group_on_cpu = true;
    auto aten = make_adafactor(a, o), grouped = make_adafactor(b, og);
    aten->set_fused(false), grouped->set_fused(false);
    for (int step = 0; step < 4; ++step)
      for (size_t i = 0; i < shapes.size(); ++i) {
        const torch::Tensor g = torch::randn(shapes[i]) * (step == 1 ? 10.0 : 0.1);
        const bool none = step == 2 && i == 1;
        a[i].param.mutable_grad() = none ? torch::Tensor() : g, b[i].param.mutable_grad() = none ? torch::Tensor() : g;
        if (i + 1 == shapes.size()) aten->step(0.01), grouped->step(0.01);
      }
    for (size_t i = 0; i < shapes.size(); ++i)
      EXPECT_TRUE(test::close(b[i].param, a[i].param, 1e-7, 1e-5)) << i << " momentum " << momentum;
    const auto st = grouped->state();
    ASSERT_EQ(st.size(), aten->state().size());
    for (const auto& [k, v] : aten->state()) EXPECT_TRUE(test::close(st.at(k), v, 1e-12, 1e-5)) << k;
    // A fresh grouped optimizer takes that state into its groups and continues identically.
    for (size_t i = 0; i < shapes.size(); ++i) {
      torch::NoGradGuard ng;
      c[i].param.copy_(b[i].param);
    }
    auto again = make_adafactor(c, og);
    again->set_fused(false);
    again->load_state(st, grouped->steps());
    for (size_t i = 0; i < shapes.size(); ++i) {
      const torch::Tensor g = torch::randn(shapes[i]);
      b[i].param.mutable_grad() = g, c[i].param.mutable_grad() = g;
    }
    grouped->step(0.01), again->step(0.01);
    for (size_t i = 0; i < shapes.size(); ++i) EXPECT_TRUE(torch::equal(c[i].param, b[i].param)) << i;
  }
}

void check_adamw(torch::Device device) {
  torch::manual_seed(5);
  torch::Tensor w = torch::randn({7}).to(device).requires_grad_(true);
  Vec rw = to_vec(w), m(7, 0), v(7, 0);
  AdamOptions o;
  o.beta1 = 0.9, o.beta2 = 0.99, o.epsilon = 1e-8, o.weight_decay = 0.1;  // AdamW: bias-corrected
  auto opt = make_adam({{"w", w, {7}, false}}, o);
  for (int t = 1; t <= 3; ++t) {
    const torch::Tensor g = torch::randn({7});
    w.mutable_grad() = g.to(device);
    opt->step(0.05);
    const Vec gv = to_vec(g);
    for (int i = 0; i < 7; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * gv[i];
      v[i] = 0.99 * v[i] + 0.01 * gv[i] * gv[i];
      const double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.99, t));
      rw[i] = rw[i] * (1 - 0.05 * 0.1) - 0.05 * mh / (std::sqrt(vh) + 1e-8);
    }
    EXPECT_TRUE(test::close(w.detach().to(torch::kCPU, torch::kFloat64), torch::tensor(rw, torch::kFloat64), 1e-6, 1e-5));
  }
}

TEST(AdamW, MatchesTheFormulas) { check_adamw(torch::kCPU); }
TEST(AdamW, OnCudaMatchesTheFormulas) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  check_adamw(torch::kCUDA);
}

// LAMB as ALBERT's lamb_optimizer.py, and BERT's AdamWeightDecay, from their update rules:
// m, v without bias correction; u = m / (sqrt(v) + eps) + wd W; LAMB scales by |W| / |u| per
// tensor; a no_decay tensor gets neither the decay nor the ratio.
void check_lamb(torch::Device device) {
  for (const bool lamb : {true, false}) {
    torch::manual_seed(6);
    torch::Tensor w = torch::randn({5}).to(device).requires_grad_(true), b = torch::randn({3}).to(device).requires_grad_(true);
    Vec rw = to_vec(w), rb = to_vec(b), mw(5, 0), vw(5, 0), mb(3, 0), vb(3, 0);
    OptimizerConfig c;
    c.name = lamb ? "lamb" : "adamw";
    c.adam_bias_correction = false, c.weight_decay = 0.01, c.adam_epsilon = 1e-6;
    std::vector<OptimizedParam> ps = {{"layer/w", w, {5}, false}, {"layer/bias", b, {3}, false, true}};
    auto opt = make_optimizer(c, ps);
    for (int t = 1; t <= 3; ++t) {
      const torch::Tensor gw = torch::randn({5}), gb = torch::randn({3});
      w.mutable_grad() = gw.to(device), b.mutable_grad() = gb.to(device);
      opt->step(0.1);
      auto update = [&](Vec& p, Vec& m, Vec& v, const Vec& g, bool decay) {
        Vec u(p.size());
        double pn = 0, un = 0;
        for (size_t i = 0; i < p.size(); ++i) {
          m[i] = 0.9 * m[i] + 0.1 * g[i];
          v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
          u[i] = m[i] / (std::sqrt(v[i]) + 1e-6) + (decay ? 0.01 * p[i] : 0.0);
          pn += p[i] * p[i], un += u[i] * u[i];
        }
        const double ratio = lamb && decay ? std::sqrt(pn) / std::sqrt(un) : 1.0;
        for (size_t i = 0; i < p.size(); ++i) p[i] -= 0.1 * ratio * u[i];
      };
      update(rw, mw, vw, to_vec(gw), true);
      update(rb, mb, vb, to_vec(gb), false);
      EXPECT_TRUE(test::close(w.detach().to(torch::kCPU, torch::kFloat64), torch::tensor(rw, torch::kFloat64), 1e-6, 1e-5)) << lamb;
      EXPECT_TRUE(test::close(b.detach().to(torch::kCPU, torch::kFloat64), torch::tensor(rb, torch::kFloat64), 1e-6, 1e-5)) << lamb;
    }
  }
}

TEST(Lamb, MatchesAlbertsUpdateRule) { check_lamb(torch::kCPU); }
// On a GPU the trust ratio is computed on the device (no host sync per tensor).
TEST(Lamb, OnCudaMatchesAlbertsUpdateRule) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  check_lamb(torch::kCUDA);
}

// The multi-tensor update (adam_multi_tensor.h, what parameters off the CPU take) against the
// per-tensor loop, for AdamW, LAMB and BERT's Adam: tensors of several shapes, a no_decay one,
// two learning-rate scales, one without a gradient in one step. The same operations in the
// same order per element, so equal up to the rounding of a fused multiply-add.
TEST(AdamFamily, MultiTensorUpdateEqualsThePerTensorLoop) {
  for (const int kind : {0, 1, 2}) {  // AdamW, LAMB, BERT's AdamWeightDecay
    SCOPED_TRACE(kind);
    AdamOptions o;
    o.weight_decay = 0.01, o.bias_correction = kind == 0, o.trust_ratio = kind == 1;
    AdamOptions om = o;
    om.multi_tensor_on_cpu = true;
    torch::manual_seed(12);
    const std::vector<std::vector<int64_t>> shapes = {{5, 7}, {3}, {4, 2, 2}, {9}};
    std::vector<OptimizedParam> a, b;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const torch::Tensor w = torch::randn(shapes[i]);
      for (auto* list : {&a, &b})
        list->push_back({"p" + std::to_string(i), w.clone().requires_grad_(true), shapes[i], false, i == 1,
                         i == 2 ? 0.5 : 1.0});
    }
    auto loop = make_adam(a, o), multi = make_adam(b, om);
    for (int step = 0; step < 4; ++step) {
      for (size_t i = 0; i < shapes.size(); ++i) {
        const torch::Tensor g = step == 2 && i == 3 ? torch::Tensor() : torch::randn(shapes[i]);
        a[i].param.mutable_grad() = g, b[i].param.mutable_grad() = g;
      }
      loop->step(0.1), multi->step(0.1);
    }
    for (size_t i = 0; i < shapes.size(); ++i) EXPECT_TRUE(test::close(b[i].param, a[i].param, 1e-7, 1e-6)) << i;
    for (const auto& [k, t] : loop->state()) EXPECT_TRUE(test::close(multi->state().at(k), t, 1e-7, 1e-6)) << k;
  }
}

TEST(Lamb, NoDecayFollowsTheConfiguredPathKeys) {
  ModelConfig mc;
  mc.type = "albert", mc.d_model = 16, mc.d_ff = 16, mc.encoder_layers = 2, mc.max_positions = 8;
  AttentionConfig a;
  a.h = 2;
  EncoderModel m(mc, a, 20);
  OptimizerConfig c;  // no_decay: [norm, bias]
  for (const auto& p : optimized_params(*m, m->named_parameters_by_path(), c)) {
    const bool excluded = p.path.find("norm") != std::string::npos || p.path.find("bias") != std::string::npos;
    EXPECT_EQ(p.no_decay, excluded) << p.path;
    if (p.param.dim() == 1) EXPECT_TRUE(p.no_decay) << p.path;  // every 1-D tensor is a norm or a bias
  }
}

// optimizer.mixing_lr_multiplier: P_l and P_w (and nothing else) get lr_scale = the multiplier;
// a model without them refuses it rather than ignoring it.
TEST(MixingLrMultiplier, ScalesOnlyTheHeadMixingProjections) {
  ModelConfig mc;
  mc.type = "bert", mc.d_model = 16, mc.d_ff = 16, mc.encoder_layers = 2, mc.max_positions = 8;
  AttentionConfig a;
  a.variant = "talking_heads", a.h = 4;
  EncoderModel th(mc, a, 20);
  OptimizerConfig c;
  c.mixing_lr_multiplier = 4;
  int mixing = 0;
  for (const auto& p : optimized_params(*th, th->named_parameters_by_path(), c)) {
    const std::string name = p.path.substr(p.path.rfind('/') + 1);
    const bool mixes = name == "P_l" || name == "P_w";
    mixing += mixes;
    EXPECT_EQ(p.lr_scale, mixes ? 4.0 : 1.0) << p.path;
  }
  EXPECT_EQ(mixing, 4);  // P_l and P_w in each of the 2 layers
  a.variant = "multi_head";
  EncoderModel mh(mc, a, 20);
  try {  // a ConfigError: the command names the file and line of the key (a fine-tuning recipe's)
    optimized_params(*mh, mh->named_parameters_by_path(), c);
    ADD_FAILURE() << "a multi-head model took optimizer.mixing_lr_multiplier 4";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key, "optimizer.mixing_lr_multiplier");
    EXPECT_EQ(std::string(e.what()).rfind("4 has no effect: the model has no P_l or P_w (", 0), 0u) << e.what();
  }
  c.mixing_lr_multiplier = 1;
  EXPECT_NO_THROW(optimized_params(*mh, mh->named_parameters_by_path(), c));
}

// The memory bound counts optimizer_state_copies fp32 copies of the trained parameters
// (models/spec.h): what each optimizer's state holds at least. Adam's and LAMB's m and v are
// exactly two; Adafactor's momentum is one, and its statistics come beside it (the next test):
// a row and a column of a factored matrix, but the whole of a small tensor's, and of each
// talking-heads projection's, whose per-head view [d, d_k, h] mesh_tf's rule does not factor
// (d_k < 128): 55% of the parameters in this T5 of d_model 256.
TEST(OptimizerState, IsTheCopiesTheMemoryBoundCounts) {
  ModelConfig mc;
  mc.d_model = 256, mc.d_ff = 512, mc.encoder_layers = 2, mc.decoder_layers = 2;
  AttentionConfig a;
  a.variant = "talking_heads", a.h = 4;
  T5 model(mc, T5Attention{a, a, a}, 1000);
  const auto params = model->named_parameters_by_path();
  double trained = 0;
  for (const auto& [path, p] : params) trained += 4.0 * double(p.numel());
  for (const std::string name : {"adafactor", "adafactor+beta1", "adamw", "lamb"}) {
    OptimizerConfig c;
    c.name = name == "adafactor+beta1" ? "adafactor" : name;
    if (name == "adafactor+beta1") c.beta1 = 0.9;
    const auto optimizer = make_optimizer(c, optimized_params(*model, params, c));
    double state = 0;
    for (const auto& [key, t] : optimizer->state()) state += double(t.numel()) * double(t.element_size());
    const double copies = optimizer_state_copies(c);
    EXPECT_EQ(copies, name == "adafactor" ? 0 : name == "adafactor+beta1" ? 1 : 2) << name;
    if (c.name == "adafactor") {
      EXPECT_GE(state, copies * trained) << name;
      EXPECT_NEAR(state - copies * trained, 0.55 * trained, 0.01 * trained) << name;  // the statistics
    } else {
      EXPECT_DOUBLE_EQ(state, copies * trained) << name;
    }
  }
}

// The memory bound's statistics (optimizer_statistics, summed over the matrices the bound
// counts: the embedding, the feed-forwards, the attention projections) are exactly what
// Adafactor's state() holds of those matrices beyond its momentum, under each factoring of the
// attention (mesh_tf's per head for talking-heads, combined for multi-head), in T5, BERT and
// ALBERT, with a vocabulary whose padding to 128 decides its factoring, and with beta1.
TEST(OptimizerState, TheBoundsStatisticsAreAdafactorsOfItsMatrices) {
  struct Case {
    std::string model, variant, factor_attention;
    int64_t d, vocab;
    bool beta1;
  };
  const std::vector<Case> cases = {{"t5", "talking_heads", "mesh_tf", 256, 1000, false},
                                   {"t5", "multi_head", "mesh_tf", 256, 1000, true},
                                   {"t5", "talking_heads", "combined", 256, 100, false},
                                   {"t5", "multi_head", "per_head", 64, 100, false},
                                   {"bert", "talking_heads", "mesh_tf", 128, 1000, false},
                                   {"albert", "multi_head", "mesh_tf", 256, 1000, true}};
  for (const Case& k : cases) {
    SCOPED_TRACE(k.model + " " + k.variant + " " + k.factor_attention);
    ModelConfig mc;
    mc.type = k.model, mc.d_model = k.d, mc.d_ff = 2 * k.d, mc.encoder_layers = 2, mc.decoder_layers = 2;
    if (k.model != "t5") mc.max_positions = 16;
    if (k.model == "albert") mc.embedding_size = 128, mc.hidden_groups = 1;
    AttentionConfig a;
    a.variant = k.variant, a.h = 4;
    const ModelSpec spec = resolve_model_spec(mc, {a, a, a});
    OptimizerConfig c;
    c.factor_attention = k.factor_attention;
    if (k.beta1) c.beta1 = 0.9;
    std::vector<std::pair<std::string, torch::Tensor>> params;
    std::shared_ptr<torch::nn::Module> model;
    if (k.model == "t5") {
      T5 t5(spec, k.vocab);
      params = t5->named_parameters_by_path(), model = t5.ptr();
    } else {
      EncoderModel encoder(spec, k.vocab, false);
      params = encoder->named_parameters_by_path(), model = encoder.ptr();
    }
    const auto optimizer = make_optimizer(c, optimized_params(*model, params, c));
    // The state of the matrices the bound counts, its momentum aside.
    auto counted = [](const std::string& path) {
      const std::string name = path.substr(path.rfind('/') + 1);
      return path == "shared" || path == "embeddings/word" || name == "wi" || name == "wo" || name == "P_q" ||
             name == "P_k" || name == "P_v" || name == "P_o";
    };
    double held = 0;
    for (const auto& [key, t] : optimizer->state()) {
      const std::string path = key.substr(0, key.rfind('/')), part = key.substr(key.rfind('/') + 1);
      if (counted(path) && part != "m") held += 4.0 * double(t.numel());
    }
    StepMemory step;
    step.statistics = optimizer_statistics(c);
    const MemoryBound b = training_memory_lower_bound(spec, k.vocab, 1, 16, 4, {}, false, torch::kCPU, false, false,
                                                      step);
    EXPECT_GT(held, 0);
    EXPECT_DOUBLE_EQ(b.optimizer, held);
  }
  OptimizerConfig adamw;
  adamw.name = "adamw";
  EXPECT_FALSE(optimizer_statistics(adamw));  // the Adam family's: its copies alone
}

// A parameter with lr_scale s follows the trajectory of one stepped at s times the rate, in every
// optimizer; the other parameters of the same optimizer are bit for bit what they were without it.
TEST(MixingLrMultiplier, IsTheParametersLearningRate) {
  for (const std::string name : {"adafactor", "adafactor-aten", "adamw", "lamb"}) {
    torch::manual_seed(9);
    const std::vector<int64_t> shape = {6, 5};
    const torch::Tensor w0 = torch::randn(shape), o0 = torch::randn(shape);
    torch::Tensor scaled = w0.clone().requires_grad_(true), fast = w0.clone().requires_grad_(true);
    torch::Tensor other = o0.clone().requires_grad_(true), alone = o0.clone().requires_grad_(true);
    OptimizerConfig c;
    c.name = name == "adafactor-aten" ? "adafactor" : name, c.weight_decay = name == "adafactor" ? 0.0 : 0.01;
    OptimizedParam s{"att/P_l", scaled, shape, true}, o{"ff/wi", other, shape, false};
    s.lr_scale = 4;
    auto with = make_optimizer(c, {s, o});
    auto at_4x = make_optimizer(c, {{"att/P_l", fast, shape, true}});
    auto without = make_optimizer(c, {{"ff/wi", alone, shape, false}});
    if (name == "adafactor-aten") with->set_fused(false), at_4x->set_fused(false), without->set_fused(false);
    for (int t = 0; t < 3; ++t) {
      const torch::Tensor g = torch::randn(shape), h = torch::randn(shape);
      scaled.mutable_grad() = g, fast.mutable_grad() = g.clone();
      other.mutable_grad() = h, alone.mutable_grad() = h.clone();
      with->step(0.01), at_4x->step(0.04), without->step(0.01);
    }
    EXPECT_TRUE(test::close(scaled, fast, 1e-7, 1e-6)) << name;
    EXPECT_FALSE(test::close(scaled, w0, 1e-3, 1e-3)) << name;  // it did move
    EXPECT_TRUE(torch::equal(other, alone)) << name;
  }
}

// lr_scale 0 (optimizer.mixing_lr_multiplier: 0) freezes the parameter bit for bit at its
// initialization in every optimizer, weight decay included; the others learn as without it.
TEST(MixingLrMultiplier, ZeroFreezesTheParameter) {
  for (const std::string name : {"adafactor", "adafactor-aten", "adamw", "lamb"}) {
    torch::manual_seed(10);
    const std::vector<int64_t> shape = {6, 5};
    const torch::Tensor w0 = torch::randn(shape), o0 = torch::randn(shape);
    torch::Tensor frozen = w0.clone().requires_grad_(true);
    torch::Tensor other = o0.clone().requires_grad_(true), alone = o0.clone().requires_grad_(true);
    OptimizerConfig c;
    c.name = name == "adafactor-aten" ? "adafactor" : name, c.weight_decay = name == "adafactor" ? 0.0 : 0.01;
    c.beta1 = 0.9;  // Adafactor with momentum too: the frozen one's momentum holds only zeros
    OptimizedParam f{"att/P_w", frozen, shape, true}, o{"ff/wi", other, shape, false};
    f.lr_scale = 0;
    auto with = make_optimizer(c, {f, o});
    auto without = make_optimizer(c, {{"ff/wi", alone, shape, false}});
    if (name == "adafactor-aten") with->set_fused(false), without->set_fused(false);
    for (int t = 0; t < 3; ++t) {
      const torch::Tensor h = torch::randn(shape);
      frozen.mutable_grad() = torch::randn(shape), other.mutable_grad() = h, alone.mutable_grad() = h.clone();
      with->step(0.01), without->step(0.01);
    }
    EXPECT_TRUE(torch::equal(frozen, w0)) << name;
    EXPECT_FALSE(torch::equal(other, o0)) << name;  // the others did learn
    EXPECT_TRUE(torch::equal(other, alone)) << name;
  }
}

TEST(Schedule, PolynomialWarmupAndDecay) {
  OptimizerConfig c;
  c.schedule = "polynomial", c.learning_rate = 0.00176, c.warmup_steps = 3125;  // ALBERT
  const int64_t T = 125000;
  EXPECT_DOUBLE_EQ(learning_rate(c, 1, T), 0.00176 / 3125);
  EXPECT_DOUBLE_EQ(learning_rate(c, 1000, T), 0.00176 * 1000 / 3125);
  EXPECT_DOUBLE_EQ(learning_rate(c, 3125, T), 0.00176 * (1 - 3125.0 / T));
  EXPECT_DOUBLE_EQ(learning_rate(c, 62500, T), 0.00088);
  EXPECT_DOUBLE_EQ(learning_rate(c, T, T), 0.0);
  EXPECT_DOUBLE_EQ(learning_rate(c, T + 1000, T), 0.0);  // past the planned steps: held at the end
  c.power = 2.0, c.end_learning_rate = 1e-5;
  EXPECT_DOUBLE_EQ(learning_rate(c, 62500, T), (0.00176 - 1e-5) * 0.25 + 1e-5);
  EXPECT_DOUBLE_EQ(learning_rate(c, T, T), 1e-5);
  EXPECT_DOUBLE_EQ(learning_rate(c, T + 1000, T), 1e-5);
}

TEST(Schedule, InverseSqrtWithLinearDecay) {
  OptimizerConfig c;  // learning_rate 1, warmup 10000, decay over the last 10%
  const int64_t T = 100000;
  EXPECT_DOUBLE_EQ(learning_rate(c, 1, T), 0.01);
  EXPECT_DOUBLE_EQ(learning_rate(c, 10000, T), 0.01);
  EXPECT_DOUBLE_EQ(learning_rate(c, 40000, T), 0.005);
  EXPECT_NEAR(learning_rate(c, 90000, T), 1 / std::sqrt(90000.0), 1e-15);
  EXPECT_NEAR(learning_rate(c, 95000, T), 0.5 / std::sqrt(95000.0), 1e-15);
  EXPECT_DOUBLE_EQ(learning_rate(c, T, T), 0.0);
  EXPECT_DOUBLE_EQ(learning_rate(c, T + 1000, T), 0.0);  // past the planned steps: 0, never negative
  c.schedule = "constant";
  c.learning_rate = 1e-3;
  EXPECT_DOUBLE_EQ(learning_rate(c, 5, T), 1e-3);
  EXPECT_DOUBLE_EQ(learning_rate(c, T, T), 1e-3);
}

TEST(FactorAttention, ViewsPerMode) {
  ModelConfig mc;
  mc.d_model = 256, mc.d_ff = 64, mc.encoder_layers = 1, mc.decoder_layers = 1;
  AttentionConfig mh, th;
  mh.h = 8;                                       // d_k 32
  th.variant = "talking_heads", th.h = 8;
  T5 model(mc, T5Attention{th, mh, mh}, 100);
  auto views = [&](const std::string& mode) {
    std::map<std::string, std::pair<std::vector<int64_t>, bool>> out;
    for (const auto& p : optimized_params(*model, mode)) out[p.path] = {p.view, p.never_factor};
    return out;
  };
  const std::string enc = "encoder/layers/0/self_attention/", dec = "decoder/layers/0/self_attention/";
  auto mesh = views("mesh_tf"), comb = views("combined"), per = views("per_head");
  EXPECT_EQ(mesh[enc + "P_q"].first, (std::vector<int64_t>{256, 32, 8}));  // talking-heads: per head
  EXPECT_EQ(mesh[dec + "P_q"].first, (std::vector<int64_t>{256, 256}));    // multi-head: combined
  EXPECT_EQ(mesh[dec + "P_o"].first, (std::vector<int64_t>{256, 256}));
  EXPECT_EQ(comb[enc + "P_k"].first, (std::vector<int64_t>{256, 256}));
  EXPECT_EQ(per[dec + "P_v"].first, (std::vector<int64_t>{256, 32, 8}));
  EXPECT_TRUE(mesh[enc + "P_l"].second);
  EXPECT_TRUE(mesh[enc + "P_w"].second);
  EXPECT_FALSE(mesh[enc + "P_q"].second);
  EXPECT_EQ(mesh["shared"].first, (std::vector<int64_t>{128, 256}));
}

// tf.clip_by_global_norm (BERT's and ALBERT's optimization.py): n = sqrt(Σ ||g||²) over every
// gradient; g *= clip / max(n, clip). Reference in float64 over the flattened gradients; the
// norm is taken per tensor in fp32 (relative error a few 2^-24 per element sum), so 1e-6.
TEST(ClipGlobalNorm, IsTfClipByGlobalNorm) {
  torch::manual_seed(3);
  auto make = [](double scale) {
    std::vector<torch::Tensor> ps;
    for (auto shape : {std::vector<int64_t>{130, 70}, {7}, {3, 4, 5}}) {
      auto p = torch::zeros(shape, torch::requires_grad());
      p.mutable_grad() = torch::randn(shape) * scale;
      ps.push_back(p);
    }
    ps.push_back(torch::zeros({9}, torch::requires_grad()));  // no gradient: skipped
    return ps;
  };
  auto reference_norm = [](const std::vector<torch::Tensor>& ps) {
    double sq = 0;
    for (const auto& p : ps)
      if (p.grad().defined()) sq += p.grad().to(torch::kFloat64).square().sum().item<double>();
    return std::sqrt(sq);
  };
  for (const double scale : {0.001, 1.0}) {
    for (const double clip : {0.0, 1.0}) {
      SCOPED_TRACE(fmt::format("scale {} clip {}", scale, clip));
      auto ps = make(scale);
      std::vector<torch::Tensor> before;
      for (size_t i = 0; i < 3; ++i) before.push_back(ps[i].grad().clone());
      const double want = reference_norm(ps);
      const double n = clip_grad_global_norm(ps, clip);
      EXPECT_NEAR(n, want, 1e-6 * want);
      const double factor = clip > 0 ? clip / std::max(want, clip) : 1.0;
      if (scale == 1.0 && clip > 0) {
        ASSERT_LT(factor, 0.1);  // it did clip: the norm is about 100
      }
      for (size_t i = 0; i < 3; ++i) {
        if (factor == 1.0) {
          EXPECT_TRUE(torch::equal(ps[i].grad(), before[i])) << "changed without clipping";
        } else {
          EXPECT_TRUE(test::close(ps[i].grad(), before[i].to(torch::kFloat64) * factor, 0, 1e-6));
        }
      }
      EXPECT_FALSE(ps[3].grad().defined());
      if (factor != 1.0) {
        EXPECT_NEAR(reference_norm(ps), clip, 1e-6);  // the clipped norm is the limit
      }
    }
  }
  // A non-finite norm clips nothing (the run's loss check stops it instead of zeroing the update).
  auto ps = make(1.0);
  ps[1].mutable_grad()[0] = std::numeric_limits<float>::infinity();
  const torch::Tensor before = ps[0].grad().clone();
  EXPECT_TRUE(std::isinf(clip_grad_global_norm(ps, 1.0)));
  EXPECT_TRUE(torch::equal(ps[0].grad(), before));
  // Defaults by model: on at 1.0 for BERT and ALBERT, off for T5; an explicit value wins.
  OptimizerConfig o;
  EXPECT_EQ(clip_global_norm(o, true), 1.0);
  EXPECT_EQ(clip_global_norm(o, false), 0.0);
  o.clip_global_norm = 0.5;
  EXPECT_EQ(clip_global_norm(o, false), 0.5);
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx
