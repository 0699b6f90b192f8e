// The bf16 paths of the model ops and of whole training steps (common/precision.h).
//
// Kernels, against float64 on the same bf16-exact inputs, within bounds derived from bf16's
// 8-bit mantissa and fp32's reduction lengths (tests/bf16_bounds.h); each check is shown to
// reject a planted variant that does one reduction in bf16:
// - RMS norm, fp32 in and bf16 out (as the models use it) and bf16 in: y is the fp32 result
//   rounded once, the statistics fp32. Planted: the mean of squares accumulated in bf16.
// - Cross-entropy + z-loss over bf16 logits: the sums are fp32/double on widened logits, so
//   the loss's error is fp32's alone. Planted: logsumexp rounded to bf16.
// Whole steps, the mini T5 (multi-head, talking-heads) and the mini ALBERT (relative
// positions, talking-heads) of configs/: bf16 against fp32, and fp32 against float64 to show
// that fp32 stands in for the exact values at a thousandth of the bf16 tolerances.
// The loop's invariants: master weights, gradients and optimizer state stay fp32 (planted: a
// model cast to bf16 fails the check), and micro-batches accumulate in fp32 (planted: a bf16
// accumulation fails it). Dropout draws the same mask for a bf16 tensor as for fp32.
#include <gtest/gtest.h>

#include "bf16_bounds.h"
#include "common/config_tree.h"
#include "common/precision.h"
#include "models/encoder.h"
#include "models/loss.h"
#include "models/spec.h"
#include "models/t5.h"
#include "test_util.h"
#include "training/loop.h"
#include "training/objective.h"
#include "training/optimizer.h"
#include "training/pretrain.h"
#include "training/spec.h"
#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

using torch::Tensor;

Tensor bf16_exact(const Tensor& t) { return t.to(torch::kBFloat16).to(torch::kFloat32); }

// ---- RMS norm ------------------------------------------------------------------------------

// y = x r s with r = 1/sqrt(mean x^2 + 1e-6), in float64, and the bound of the bf16 path:
// r carries fp32's error over the d-term sum (gamma(d + 8) relative: the sum, the division,
// the square root and the reciprocal), y two more fp32 products and one bf16 rounding.
Bounded rms_bound(const Tensor& x32, const Tensor& s32, bool round_y) {
  const Tensor x = x32.to(torch::kFloat64), s = s32.to(torch::kFloat64);
  const double d = double(x.size(-1));
  const Tensor r = torch::rsqrt(x.pow(2).mean(-1, true) + 1e-6);
  Bounded y{x * r * s, gamma32(d + 10) * (x * r * s).abs()};
  return round_y ? round_bf16(y) : y;
}

TEST(Bf16Ops, RmsNormRoundsOnceWithFp32Statistics) {
  torch::manual_seed(41);
  RMSNorm norm(64);
  {
    torch::NoGradGuard g;
    norm->scale.uniform_(0.5, 1.5);
  }
  const Tensor x = torch::randn({3, 17, 64}) * 3;
  for (bool bf16_in : {false, true}) {
    const Tensor in = bf16_in ? bf16_exact(x) : x;
    Tensor y;
    {
      PrecisionScope scope("bf16");
      y = norm->forward(bf16_in ? in.to(torch::kBFloat16) : in);
    }
    EXPECT_EQ(y.scalar_type(), torch::kBFloat16) << "a norm's output is a matmul operand: bf16 in a bf16 scope";
    const Bounded want = rms_bound(in, norm->scale, true);
    EXPECT_TRUE(within(y, want)) << "bf16_in " << bf16_in;
    // Planted: the same formula with the sum of squares accumulated in bf16.
    const Tensor sq = in.pow(2).to(torch::kBFloat16);
    Tensor acc = torch::zeros({3, 17, 1}, torch::kBFloat16);
    for (int64_t j = 0; j < 64; ++j) acc = (acc.to(torch::kFloat32) + sq.narrow(-1, j, 1).to(torch::kFloat32)).to(torch::kBFloat16);
    const Tensor planted = (in * torch::rsqrt(acc.to(torch::kFloat32) / 64 + 1e-6) * norm->scale).to(torch::kBFloat16);
    EXPECT_FALSE(within(planted, want)) << "statistics accumulated in bf16 must exceed the bound";
  }
}

TEST(Bf16Ops, RmsNormBackwardKeepsTheInputsDtype) {
  // fp32 x, bf16 y: dy arrives in bf16 and dx leaves in fp32, computed in fp32 throughout:
  // within fp32's error of the float64 gradient (gamma(2d + 16) of the absolute terms).
  torch::manual_seed(42);
  RMSNorm norm(48);
  const Tensor x = (torch::randn({5, 48}) * 2).requires_grad_(true);
  const Tensor dy = bf16_exact(torch::randn({5, 48}));
  Tensor y;
  {
    PrecisionScope scope("bf16");
    y = norm->forward(x);
  }
  y.backward(dy.to(torch::kBFloat16));
  EXPECT_EQ(x.grad().scalar_type(), torch::kFloat32);
  EXPECT_EQ(norm->scale.grad().scalar_type(), torch::kFloat32);
  const Tensor x64 = x.detach().to(torch::kFloat64).requires_grad_(true);
  const Tensor s64 = norm->scale.detach().to(torch::kFloat64).requires_grad_(true);
  const Tensor r = torch::rsqrt(x64.pow(2).mean(-1, true) + 1e-6);
  (x64 * r * s64 * dy.to(torch::kFloat64)).sum().backward();
  const Tensor a = x64.detach().abs(), g = dy.to(torch::kFloat64).abs(), s = s64.detach().abs(), ra = r.detach();
  const Tensor dx_terms = ra * g * s + a * ra.pow(3) * (g * s * a).mean(-1, true);  // |each term| of dx
  EXPECT_TRUE(within(x.grad(), {x64.grad(), gamma32(2 * 48 + 16) * dx_terms}));
  EXPECT_TRUE(within(norm->scale.grad(), {s64.grad(), gamma32(5 + 48 + 16) * (g * a * ra).sum(0)}));
}

// ---- cross-entropy + z-loss ----------------------------------------------------------------

TEST(Bf16Ops, CrossEntropyOverBf16LogitsSumsInFp32) {
  torch::manual_seed(43);
  const int64_t N = 40, V = 1000;
  const double z = 1e-4;
  const Tensor logits = (torch::randn({N, V}) * 4).to(torch::kBFloat16);
  Tensor targets = torch::randint(1, V, {N});
  targets.narrow(0, 0, 5).fill_(0);  // padding rows weigh nothing
  const Tensor x = logits.clone().requires_grad_(true);
  const LossSums s = cross_entropy_z_loss(x, targets, z);
  EXPECT_EQ(s.nll_sum.scalar_type(), torch::kFloat32);
  // Float64 on the same (exactly widened) logits.
  const Tensor x64 = logits.to(torch::kFloat64).requires_grad_(true);
  const LossSums r = cross_entropy_z_loss_reference(x64, targets, z);
  // Per row, fp32's logsumexp errs by at most gamma(V + 8) (the sum of exp, the exp
  // polynomial's 4 ulp, the log) plus one ulp of |lse| and of the target logit; the rows add
  // in double.
  const Tensor real = (targets != 0).to(torch::kFloat64);
  const Tensor lse = r.lse.abs(), tl = x64.detach().gather(1, targets.unsqueeze(1)).squeeze(1).abs();
  const Tensor row_err = (gamma32(double(V) + 8) + kFp32U * (lse + tl)) * real;
  const Bounded nll{r.nll_sum.detach(), row_err.sum()};
  EXPECT_TRUE(within(s.nll_sum, nll));
  EXPECT_TRUE(within(s.loss_sum, {r.loss_sum.detach(), (row_err * (1 + 2 * z * (lse + 1))).sum() + kFp32U * r.loss_sum.abs()}));
  // Planted: logsumexp rounded to bf16 before the sum.
  const Tensor lse_bf16 = r.lse.to(torch::kBFloat16).to(torch::kFloat64);
  const Tensor planted = ((lse_bf16 - x64.detach().gather(1, targets.unsqueeze(1)).squeeze(1)) * real).sum();
  EXPECT_FALSE(within(planted, nll)) << "a logsumexp in bf16 must exceed the bound";
  // The gradient: p * scale - onehot in fp32, rounded once to bf16.
  (s.loss_sum * 0.5 + s.nll_sum * 0.25).backward();
  (r.loss_sum * 0.5 + r.nll_sum * 0.25).backward();
  EXPECT_EQ(x.grad().scalar_type(), torch::kBFloat16);
  const Tensor g = x64.grad();
  EXPECT_TRUE(within(x.grad(), round_bf16({g, gamma32(double(V) + 16) * (g.abs() + 0.75 * torch::softmax(x64.detach(), -1))})));
}

TEST(Bf16Ops, DropoutDrawsTheSameMaskForBf16) {
  // The models apply ATen's dropout to bf16 activations; the mask must be the one fp32 draws
  // from the same generator state (one Bernoulli draw per element, whatever the dtype).
  const Tensor ones = torch::ones({37, 300});
  torch::manual_seed(44);
  const Tensor a = torch::dropout(ones, 0.1, true);
  torch::manual_seed(44);
  const Tensor b = torch::dropout(ones.to(torch::kBFloat16), 0.1, true);
  EXPECT_TRUE(torch::equal(a == 0, b == 0));
  EXPECT_GT((a == 0).sum().item<int64_t>(), 500);
}

// ---- whole steps ---------------------------------------------------------------------------

PretrainConfig mini_config(const std::string& file, const std::vector<std::string>& sets) {
  ConfigTree tree;
  tree.merge_file(std::string(THX_SOURCE_DIR) + "/configs/" + file);
  for (const auto& s : sets) tree.set(s);
  return load_model_config(tree);
}

struct StepGrads {
  double loss = 0;
  std::vector<Tensor> grads;  // in parameter order
};

template <class Forward>
StepGrads step_at(const std::vector<std::pair<std::string, Tensor>>& params, const std::string& precision,
                  Forward forward) {
  for (const auto& [k, p] : params) p.mutable_grad() = Tensor();
  StepGrads s;
  {
    PrecisionScope scope(precision);
    torch::manual_seed(7);  // the same dropout draws in every precision
    const Tensor loss = forward();
    loss.backward();
    s.loss = loss.item<double>();
  }
  for (const auto& [k, p] : params) s.grads.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
  return s;
}

double cosine(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(torch::kFloat64).flatten(), y = b.to(torch::kFloat64).flatten();
  return (x.dot(y) / (x.norm() * y.norm() + 1e-300)).item<double>();
}

// The whole-step tolerances. A gradient of these mini models crosses at most about 30 bf16
// roundings between the batch and the parameter (per layer: the norm's output, Q/K/V, J, W or
// U, O, the output projection, the two feed-forward products, forward and back, plus the
// logits and the loss's gradient), each adding at most u relative error: per tensor
// ||g_bf16 - g_fp32|| <= 30u ||g_fp32|| (aligned errors; measured at most 0.061, in the
// feed-forward input weights, whose ReLU mask flips where bf16 rounding changes a
// pre-activation's sign), so the cosine is at least 1 - (30u)^2 / 2 = 0.9931. The loss is a
// mean over N ~ 450 tokens whose errors (each at most 2 x 15u x max|logit|, with |logit| < 4
// at initialization) have random signs: 120u / sqrt(N) ~ 0.022 nats on 9.6, within 2^-8
// relative; measured 4e-5. fp32 against float64 is 1000 times closer than either.
constexpr double kStepGradRelErr = 30 * kBf16U;
constexpr double kStepLossRelErr = kBf16U;

template <class Model, class Forward>
void expect_bf16_step_close(Model& model, Forward forward, const std::string& what) {
  auto params = model->named_parameters_by_path();
  model->train();
  const StepGrads bf = step_at(params, "bf16", forward);
  for (const auto& [k, p] : params) {
    EXPECT_EQ(p.scalar_type(), torch::kFloat32) << what << " " << k << ": master weights stay fp32";
    if (p.grad().defined()) {
      EXPECT_EQ(p.grad().scalar_type(), torch::kFloat32) << what << " " << k;
    }
  }
  const StepGrads fp = step_at(params, "fp32", forward);
  model->to(torch::kFloat64);
  const StepGrads dbl = step_at(model->named_parameters_by_path(), "fp32", forward);
  model->to(torch::kFloat32);
  EXPECT_LE(std::abs(bf.loss - fp.loss), kStepLossRelErr * std::abs(fp.loss)) << what << " loss " << bf.loss << " vs " << fp.loss;
  EXPECT_LE(std::abs(fp.loss - dbl.loss), kStepLossRelErr / 1000 * std::abs(dbl.loss)) << what;
  int compared = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& k = params[i].first;
    if (!fp.grads[i].defined()) continue;
    if (k.size() > 7 && k.compare(k.size() - 7, 7, "/bias_k") == 0) continue;  // rounding residue (device_path_test)
    const double gnorm = fp.grads[i].norm().item<double>();
    const double rel = (bf.grads[i] - fp.grads[i]).norm().item<double>() / gnorm;
    const double rel32 = (fp.grads[i].to(torch::kFloat64) - dbl.grads[i]).norm().item<double>() / gnorm;
    EXPECT_LE(rel, kStepGradRelErr) << what << " " << k;
    EXPECT_GE(cosine(bf.grads[i], fp.grads[i]), 1 - kStepGradRelErr * kStepGradRelErr / 2) << what << " " << k;
    EXPECT_LE(rel32, kStepGradRelErr / 1000) << what << " " << k << ": fp32 against float64";
    ++compared;
  }
  EXPECT_GT(compared, 20) << what;
}

TEST(Bf16Step, MiniT5AgreesWithFp32) {
  for (const char* variant : {"multi_head", "talking_heads"}) {
    const PretrainConfig c = mini_config("t5/mini.yaml", {std::string("attention.variant=") + variant});
    torch::manual_seed(3);
    const int64_t vocab = 8100, B = c.train.batch_size;
    T5 model(resolve_model_spec(c.model, c.attention), vocab);
    const Tensor inputs = torch::randint(2, vocab, {B, c.data.inputs_length});
    const Tensor targets = torch::randint(2, vocab, {B, c.data.targets_length});
    inputs.narrow(1, 120, 8).fill_(0), targets.narrow(1, 28, 4).fill_(0);  // padding
    const Tensor decoder = torch::cat({torch::zeros({B, 1}, torch::kInt64), targets.narrow(1, 0, c.data.targets_length - 1)}, 1);
    expect_bf16_step_close(model, [&] { return model->forward(inputs, decoder, targets).loss; }, variant);
  }
}

TEST(Bf16Step, MiniAlbertAgreesWithFp32) {
  const PretrainConfig c =
      mini_config("albert/mini.yaml", {"model.positions=relative", "attention.variant=talking_heads"});
  torch::manual_seed(4);
  const int64_t vocab = 8000, B = c.train.batch_size, n = c.data.inputs_length, P = c.data.max_predictions_per_seq;
  EncoderModel model(resolve_model_spec(c.model, c.attention), vocab, true);
  const Tensor ids = torch::randint(5, vocab, {B, n}), types = torch::zeros({B, n}, torch::kInt64);
  ids.narrow(1, n - 10, 10).fill_(0);
  const Tensor positions = torch::randint(1, n - 10, {B, P}), targets = torch::randint(5, vocab, {B, P});
  const Tensor labels = torch::randint(0, 2, {B});
  expect_bf16_step_close(model, [&] { return model->forward(ids, types, positions, targets, labels).loss; }, "albert");
}

// ---- no read of memory nothing wrote ---------------------------------------------------------

// A whole step reads no memory that nothing wrote (test_util.h's PoisonedCpuMemory: every new CPU
// tensor NaN, as LibTorch 2.x fills new tensors under deterministic algorithms): the mini T5
// (multi-head, talking-heads; Adafactor) and the mini ALBERT (relative positions, talking-heads,
// SOP; LAMB), with dropout, in fp32 and bf16: the model built, a batch drawn, the loss, its
// gradients and an optimizer's update (twice, so that its state is read) equal bit for bit to the
// same step's in memory as the heap gives it. thx's CPU kernels (the attention core, RMS norm, the
// loss, Adafactor's and LAMB's loops) and every ATen composition between them are in it.
TEST(Steps, ReadNoMemoryNothingWrote) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> models = {
      {"t5/mini.yaml", {"attention.variant=multi_head"}},
      {"t5/mini.yaml", {"attention.variant=talking_heads"}},
      {"albert/mini.yaml", {"model.positions=relative", "attention.variant=talking_heads"}}};
  for (const auto& [file, sets] : models)
    for (const char* precision : {"fp32", "bf16"}) {
      std::vector<std::string> with = sets;
      with.push_back("model.dropout=0.1");
      const PretrainConfig c = mini_config(file, with);
      SCOPED_TRACE(file + " " + sets.back() + " " + precision);
      EXPECT_TRUE(same_in_poisoned_memory([&] {
        torch::manual_seed(5);
        const std::unique_ptr<Objective> objective =
            make_objective(resolve_model_spec(c.model, c.attention), 8100, c.data.sentence_task != "none");
        const auto params = objective->params();
        const auto opt = make_optimizer(c.optimizer, optimized_params(objective->module(), params, c.optimizer));
        const Batch batch = objective->random_batch(c.data, 4, 8100, torch::Device(torch::kCPU));
        objective->module().train();
        std::vector<Tensor> made;
        for (int step = 0; step < 2; ++step) {
          for (const auto& [k, p] : params) p.mutable_grad() = Tensor();
          PrecisionScope scope(precision);
          const Objective::Out o = objective->forward(batch);
          const Tensor loss = o.second.defined() ? o.loss + o.second : o.loss;
          loss.backward();
          opt->step(1e-2);
          made.push_back(loss.detach());
        }
        for (const auto& [k, p] : params) made.push_back(p.grad()), made.push_back(p.detach().clone());
        return made;
      }));
    }
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test

namespace thx::test {
namespace {
namespace THX_FILE_ID {

// ---- the loop's invariants -----------------------------------------------------------------

// A tiny T5 behind the Trainee interface, so that accumulate_gradients (the loop's own rule)
// runs its micro-batches.
struct TinyT5Trainee : Trainee {
  T5 model{nullptr};
  std::unique_ptr<Optimizer> opt;
  explicit TinyT5Trainee(const PretrainConfig& c) {
    torch::manual_seed(5);
    model = T5(resolve_model_spec(c.model, c.attention), 64);
    opt = make_optimizer(c.optimizer, optimized_params(*model, c.optimizer.factor_attention));
  }
  torch::nn::Module& module() override { return *model; }
  std::vector<std::pair<std::string, Tensor>> parameters() override { return model->named_parameters_by_path(); }
  Optimizer& optimizer() override { return *opt; }
  std::vector<Batch> next_step(int64_t) override { return {}; }
  double weight(const Batch& b) override { return double((b.targets != 0).sum().item<int64_t>()); }
  int64_t tokens(const Batch& b) override { return b.targets.numel(); }
  MicroLoss forward(const Batch& b) override {
    const T5Impl::Output o = model->forward(b.inputs, b.decoder_inputs, b.targets);
    return {o.loss, o.nll_sum.item<double>(), torch::Tensor()};
  }
  nlohmann::json evaluate(int64_t) override { return {}; }
  void save_state(Checkpoint&) override {}
  void load_state(const Checkpoint&) override {}
};

Batch random_batch(int64_t rows, uint64_t seed) {
  torch::manual_seed(seed);
  Batch b;
  b.inputs = torch::randint(2, 64, {rows, 32});
  b.targets = torch::randint(2, 64, {rows, 8});
  b.targets.narrow(1, 6, 2).fill_(0);
  b.decoder_inputs = torch::cat({torch::zeros({rows, 1}, torch::kInt64), b.targets.narrow(1, 0, 7)}, 1);
  return b;
}

// Every master weight, gradient and optimizer state tensor is fp32.
::testing::AssertionResult all_fp32(Trainee& t) {
  for (const auto& [k, p] : t.parameters()) {
    if (p.scalar_type() != torch::kFloat32) return ::testing::AssertionFailure() << k << " is stored in " << p.scalar_type();
    if (p.grad().defined() && p.grad().scalar_type() != torch::kFloat32)
      return ::testing::AssertionFailure() << k << "'s gradient is " << p.grad().scalar_type();
  }
  for (const auto& [k, v] : t.optimizer().state())
    if (v.scalar_type() != torch::kFloat32) return ::testing::AssertionFailure() << "optimizer state " << k << " is " << v.scalar_type();
  return ::testing::AssertionSuccess();
}

TEST(Bf16Loop, MasterWeightsGradientsAndOptimizerStayFp32) {
  TinyT5Trainee t(tiny_pretrain("unused", 1));
  std::vector<Tensor> before, grads;
  {
    PrecisionScope scope("bf16");
    accumulate_gradients(t, {random_batch(4, 1)});
  }
  EXPECT_TRUE(all_fp32(t));
  for (const auto& [k, p] : t.parameters()) before.push_back(p.detach().clone()), grads.push_back(p.grad().clone());
  t.optimizer().step(0.01);
  EXPECT_TRUE(all_fp32(t));
  // The update is Adafactor's fp32 update of the fp32 weights by the fp32 gradients, bit for
  // bit: a second optimizer, fresh, on copies.
  auto params = t.parameters();
  std::vector<OptimizedParam> copies;
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor w = before[i].clone().requires_grad_(true);
    w.mutable_grad() = grads[i];
    copies.push_back({params[i].first, w, w.sizes().vec(), false});
  }
  make_optimizer(tiny_pretrain("unused", 1).optimizer, copies)->step(0.01);
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(torch::equal(params[i].second, copies[i].param)) << params[i].first;
  // Planted: the same model with bf16 master weights fails the check.
  t.model->to(torch::kBFloat16);
  EXPECT_FALSE(all_fp32(t));
}

TEST(Bf16Loop, MicroBatchesAccumulateInFp32) {
  // accumulate_gradients over two micro-batches in bf16 leaves in .grad exactly the fp32 sum of
  // each micro-batch's own gradient (of its loss times its share), computed alone.
  TinyT5Trainee t(tiny_pretrain("unused", 1));
  const std::vector<Batch> micro = {random_batch(4, 2), random_batch(4, 3)};
  const double total = t.weight(micro[0]) + t.weight(micro[1]);
  PrecisionScope scope("bf16");
  auto params = t.parameters();
  std::vector<std::vector<Tensor>> alone(2);
  for (size_t m = 0; m < 2; ++m) {
    for (auto& [k, p] : params) p.mutable_grad() = Tensor();
    (t.forward(micro[m]).loss * (t.weight(micro[m]) / total)).backward();
    for (auto& [k, p] : params) alone[m].push_back(p.grad().clone());
  }
  for (auto& [k, p] : params) p.mutable_grad() = Tensor();
  accumulate_gradients(t, micro);
  int planted_caught = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& acc = params[i].second.grad();
    const Tensor sum = alone[0][i] + alone[1][i];  // fp32
    EXPECT_TRUE(torch::equal(acc, sum)) << params[i].first;
    // Planted: the same two gradients accumulated in bf16. The check that passes above must
    // reject it (any tensor with more than a handful of elements differs).
    const Tensor planted = (alone[0][i].to(torch::kBFloat16) + alone[1][i].to(torch::kBFloat16)).to(torch::kFloat32);
    planted_caught += !torch::equal(planted, sum);
  }
  EXPECT_GT(planted_caught, int(params.size()) * 3 / 4);
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
