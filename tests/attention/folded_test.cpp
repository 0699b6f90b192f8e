// The talking-heads paths made of cuBLAS's products and ATen's operations (on two, with thx's
// softmax kernel), each test on each (AtenPath, suffixed folded, gemm_aten, gemm,
// tiled_gemm_aten and tiled_gemm): the folded products (src/attention/folded.h, `--th-path folded`:
// P_l folded into Q, P_w into V, every multiply one large product), the heads-major products
// (heads_gemm.h, `--th-path gemm-aten`: the mixings as products over the n m positions, in the
// operands' dtype), the same with its softmax by thx's softmax kernel (`--th-path gemm`; here on the
// CPU emulator, fp32 and bf16; fp64 is ATen's) and the tiled path with that composition in blocks
// of rows (tiled.h), with ATen's softmax (tiled_gemm_aten: a build without thx's CUDA kernels) and
// thx's softmax kernel (`--th-path tiled-gemm`), against the paper's section 4 core written as
// einsums with the paper's layout (heads last) and differentiated by autograd (core_problems.h):
// O and the gradients of Q, K, V, P_l, P_w and the bias, for talking-heads (h_k != h != h_v),
// both hybrids and multi-head, with and without a bias, padding and causal masks, n != m.
//
// Tolerances:
// - float64: 1e-12 + 1e-10 x max|reference|, the same sums in other orders (a wrong formula moves
//   a result by far more: the control below changes one gradient by 1e-6 of its size and fails).
// - float32 inputs against the float64 core on the same values: 2e-6 + 2e-5 x max|reference| (fp32
//   rounding of sums of a few dozen O(1) products, as the attention reference tests).
// - bf16 (Q, K, V, dO bf16; P_l, P_w and the bias fp32) against the float64 core on the same
//   values. The folded path rounds Q' = P_l Q, the logits, the weights and V' = P_w V to bf16
//   (2^-9 relative each), where the batched composition a GPU runs (attention_core_reference:
//   the per-head products in bf16, the rest in fp32) rounds J = Q K^T, U and the weights' product
//   with V: the same number of roundings of the same size, at other places. Each output's largest
//   error must be within 3 x the batched composition's own plus 2^-8 of its largest value, and
//   within 3e-2 of that value (the tiled path's bound against the batched composition). The
//   heads-major path rounds J, the logits, the weights, U and, in the backward, dU, dW and dL.
// - bf16, dP_l (every path): dP_l[k,h] sums J_k dL_h over every (b, n, m), and each row of dL sums
//   to zero (the softmax), so its terms cancel: on these problems the sum of their sizes is up to
//   150x the largest |dP_l|, and a relative rounding of J or dL moves dP_l by that sum's share,
//   not by dP_l's. So each element is judged against its condition kappa (the sum of the sizes
//   of the terms that roundings of J, W, dW and dL perturb, dP_l_condition below): within 2^-9
//   kappa, one bf16 rounding of every term all in one direction. Measured: 0.08-0.45 of it
//   (heads-major), 0.10-0.18 (folded); dP_l off by 10% fails it (the control), and a wrong
//   formula moves dP_l by its own size, which the float64 test catches.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "attention/config.h"
#include "attention/folded.h"
#include "attention/fused.h"
#include "attention/heads_gemm.h"
#include "attention/cuda/th_rows_args.h"
#include "attention/tiled.h"
#include "core_problems.h"
#include "emulated_cores.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

using torch::Tensor;

using namespace core;  // (core_problems.h)

Result reference(const Inputs& in) { return gradients(in, core::paper_output); }
// A path's core: the folded products or the heads-major ones (the same signature).
using Core = Tensor (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        const Tensor&);
Result run(Core core, const Inputs& in) { return gradients(in, core); }

// The inputs in float64, for the reference of a lower precision's run on the same values.
Inputs as_float64(const Inputs& in) {
  auto wide = [](const Tensor& t) { return t.defined() && t.is_floating_point() ? t.to(torch::kFloat64) : t; };
  return {wide(in.Q), wide(in.K), wide(in.V), wide(in.P_l), wide(in.P_w), wide(in.bias), in.mask, wide(in.dO)};
}

double max_error(const Tensor& a, const Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

const std::vector<Extra>& extras() {
  static const std::vector<Extra> e = {Extra::none, Extra::bias, Extra::padding, Extra::causal, Extra::bias_padding};
  return e;
}

void expect_float64_equals_the_papers_core(Core core) {
  for (const Case& c : core::variant_cases())
    for (Extra e : extras()) {
      SCOPED_TRACE(c.name + " extra " + std::to_string(int(e)));
      torch::manual_seed(11);
      const Inputs in = inputs(c, e, torch::kFloat64);
      expect_same(run(core, in), reference(in), 1e-12, 1e-10);
    }
  // Every broadcast of the bias (T5's [1,h,n,m], one per example, 3 dims, one value a key), and
  // widths of heads that differ from each other (d_k 8, d_v 2).
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{2, 1, 7, 5}, {5, 7, 5}, {1, 1, 1, 5}}) {
    SCOPED_TRACE(c10::str(c10::IntArrayRef(shape)));
    torch::manual_seed(5);
    Inputs in = inputs(core::variant_cases().front(), Extra::none, torch::kFloat64, 8, 2);
    in.bias = torch::randn(shape, torch::kFloat64);
    expect_same(run(core, in), reference(in), 1e-12, 1e-10);
  }
}

// Q, K, V and dO strided as a model may hand them (heads-major storage seen as [b,n,heads,d], as a
// transposed copy or a fused projection's slice gives): the same numbers as contiguous ones.
void expect_strided_inputs_give_the_same_numbers(Core core) {
  torch::manual_seed(11);
  const Inputs in = inputs(core::variant_cases().front(), Extra::bias_padding, torch::kFloat64);
  Inputs strided = in;
  for (Tensor* t : {&strided.Q, &strided.K, &strided.V, &strided.dO}) {
    *t = t->transpose(1, 2).contiguous().transpose(1, 2);
    ASSERT_FALSE(t->is_contiguous());
  }
  expect_same(run(core, strided), run(core, in), 0, 1e-15);
}

// The control: the float64 bound catches a gradient off by 1e-6 of its size (the folded path's
// dP_l scaled so), so a dropped or misplaced term of any gradient cannot pass it.
void expect_the_bound_fails_a_gradient_off_by_one_part_in_a_million(Core core) {
  torch::manual_seed(11);
  const Inputs in = inputs(core::variant_cases().front(), Extra::bias_padding, torch::kFloat64);
  const Result r = reference(in);
  Result got = run(core, in);
  EXPECT_TRUE(close(got.dP_l, r.dP_l, 1e-12, 1e-10));
  got.dP_l = got.dP_l * (1 + 1e-6);
  EXPECT_FALSE(close(got.dP_l, r.dP_l, 1e-12, 1e-10));
}

void expect_float32_within_its_rounding(Core core) {
  for (const Case& c : core::variant_cases())
    for (Extra e : {Extra::bias_padding, Extra::causal}) {
      SCOPED_TRACE(c.name + " extra " + std::to_string(int(e)));
      torch::manual_seed(11);
      const Inputs in = inputs(c, e, torch::kFloat32);
      const Result got = run(core, in);
      EXPECT_EQ(got.O.scalar_type(), torch::kFloat32);
      expect_same(got, reference(as_float64(in)), 2e-6, 2e-5);
    }
}

// dP_l's condition (see the header): kappa[k,h] = sum over (b, n, m) of |Q_k|.|K_k| W_h (A_h +
// sum_m W_h A_h), A_h = sum_v |P_w[h,v]| |dO_v|.|V_v| (|dO_h|.|V_h| without P_w), in float64
// from the paper's formulas: what relative roundings of J, W, dW and dL can move dP_l by, per unit.
Tensor dP_l_condition(const Inputs& x) {
  const Tensor L = core::paper_core(x.Q, x.K, x.V, x.P_l, x.P_w, x.bias, x.mask).second;  // [b,n,m,h]
  const Tensor W = torch::softmax(L, 2).nan_to_num(0);  // (0 in a row without keys)
  const Tensor J = torch::einsum("bnkd,bmkd->bnmk", {x.Q.abs(), x.K.abs()});
  const Tensor B = torch::einsum("bnve,bmve->bnmv", {x.dO.abs(), x.V.abs()});
  const Tensor A = x.P_w.defined() ? torch::einsum("bnmv,hv->bnmh", {B, x.P_w.abs()}) : B;
  const Tensor WA = W * A;
  return torch::einsum("bnmk,bnmh->kh", {J, WA + W * WA.sum(2, true)});
}

// dP_l's largest error in units of its condition (the bf16 runs' bound: 2^-9).
double dP_l_error_in_condition_units(const Tensor& got, const Tensor& ref, const Inputs& in) {
  return ((got.to(torch::kFloat64) - ref).abs() / dP_l_condition(as_float64(in))).max().item<double>();
}

// bf16 against float64 on the same values, beside the batched composition (see the header).
void expect_bf16_bound(Core core, const Inputs& in) {
  const Result got = run(core, in), batched = gradients(in, attention_core_reference),
               r = reference(as_float64(in));
  EXPECT_EQ(got.O.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(got.dQ.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(got.dK.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(got.dV.scalar_type(), torch::kBFloat16);
  const auto g = got.all(), bt = batched.all(), w = r.all();
  for (size_t i = 0; i < g.size(); ++i) {
    const auto& [a, name] = g[i];
    const Tensor &b = std::get<0>(w[i]), &c = std::get<0>(bt[i]);
    ASSERT_EQ(a.defined(), b.defined()) << name;
    if (!b.defined()) continue;
    if (std::string(name) == "dP_l") {  // each element within one rounding of its condition
      EXPECT_LE(dP_l_error_in_condition_units(a, b, in), std::ldexp(1.0, -9)) << name << " in units of its condition";
      continue;
    }
    const double scale = b.abs().max().item<double>(), err = max_error(a, b), theirs = max_error(c, b);
    EXPECT_LE(err, 3 * theirs + std::ldexp(scale, -8)) << name << ": the batched composition's error " << theirs;
    EXPECT_LE(err, 3e-2 * scale) << name;
  }
}

void expect_bf16_no_farther_than_the_batched_composition(Core core) {
  for (const Case& c : core::variant_cases())
    for (Extra e : {Extra::bias_padding, Extra::causal}) {
      SCOPED_TRACE(c.name + " extra " + std::to_string(int(e)));
      torch::manual_seed(11);
      Inputs in = inputs(c, e, torch::kFloat32);
      for (Tensor* t : {&in.Q, &in.K, &in.V, &in.dO}) *t = t->to(torch::kBFloat16);
      expect_bf16_bound(core, in);
    }
}

// ATen's softmax gives NaN for a row with no key: the folded path gives O = 0 there and no
// gradient through it, as the tiled path and the blocked algorithm do (without its zeroing of
// such rows every output and gradient is NaN).
void expect_a_row_without_keys_zero(Core core) {
  const Inputs in = core::no_key_in_example_0();
  const Result got = run(core, in);
  core::expect_rows_without_keys_zero(got.O, got.dQ, {got.dK, got.dV, got.dP_l, got.dP_w}, reference(in).O);
}

// Heads that do not fit (V's heads without P_w, Q's against P_l, K's against Q's), a bias or a
// mask that does not broadcast to [b,h,n,m], and Q, K, V of two dtypes, are refused before
// anything runs, each in one line; the valid twin runs.
void expect_refusals(Core core, bool one_dtype = true) {
  torch::manual_seed(11);
  const Inputs th = inputs(core::variant_cases().front(), Extra::none, torch::kFloat64);  // h_k 3, h 5, h_v 2
  auto refusal = [core](const Inputs& in) -> std::string {
    try {
      core(in.Q, in.K, in.V, in.P_l, in.P_w, in.bias, in.mask);
    } catch (const c10::Error& e) {
      return e.what_without_backtrace();
    }
    return "";
  };
  EXPECT_EQ(refusal(th), "");
  Inputs no_pw = th;
  no_pw.P_w = Tensor();  // V's 2 heads are not h = 5
  EXPECT_NE(refusal(no_pw).find("do not fit"), std::string::npos);
  Inputs no_pl = th;
  no_pl.P_l = Tensor();  // h = Q's 3 heads, P_w's rows are 5
  EXPECT_NE(refusal(no_pl).find("do not fit"), std::string::npos);
  Inputs k_heads = th;
  k_heads.K = torch::cat({th.K, th.K}, 2);
  EXPECT_NE(refusal(k_heads).find("do not fit"), std::string::npos);
  Inputs bias = th;  // (m = 5 keys)
  bias.bias = torch::zeros({1, 5, 7, 6}, torch::kFloat64);
  EXPECT_NE(refusal(bias).find("the bias [1, 5, 7, 6] does not broadcast to [b,h,n,m] = [2, 5, 7, 5]"),
            std::string::npos);
  Inputs mask = th;
  mask.mask = torch::ones({2, 1, 1, 4}, torch::kBool);
  EXPECT_NE(refusal(mask).find("the mask [2, 1, 1, 4] does not broadcast"), std::string::npos);
  Inputs dtypes = th;
  dtypes.V = th.V.to(torch::kFloat32);
  if (one_dtype)
    EXPECT_NE(refusal(dtypes).find("one floating dtype"), std::string::npos);
  else  // (the tiled path takes V in another dtype than Q and K, forward and backward)
    EXPECT_NO_THROW(run(core, dtypes));
}

// `thx --th-path <path>` routes the talking-heads family off the CPU to the path, which keeps the
// weights or not (the memory check's lower bound counts them), and leaves multi-head on SDPA; the
// default keeps nothing of that size. (The routing itself runs on a GPU: AtenPathOnCuda.)
void expect_the_path_keeps_the_weights_off_the_cpu(const std::string& path, bool keeps) {
  AttentionConfig c;
  c.h = 4, c.variant = "multi_head";
  const AttentionDims mh = resolve(c, 32, 32, 32);
  c.variant = "talking_heads";
  const AttentionDims th = resolve(c, 32, 32, 32);
  const torch::Device cuda(torch::kCUDA);
  set_th_path(path);
  EXPECT_EQ(keeps_attention_weights(th, cuda), keeps);
  const bool mh_on_path = keeps_attention_weights(mh, cuda);
  set_th_path("tiled", false);
  EXPECT_FALSE(keeps_attention_weights(th, cuda));
  EXPECT_EQ(keeps_attention_weights(mh, cuda), mh_on_path);  // multi-head's route is not the path's
  EXPECT_TRUE(keeps_attention_weights(th, torch::Device(torch::kCPU)));
}

// On a GPU (skipped elsewhere): every variant and mask in fp32 (cuBLAS without TF32, LibTorch's
// default) against float64 with float32's bound, and in bf16 within the bound above; then the
// route: attention_core under `--th-path <path>` (where one routes there) equals the path's core
// bit for bit.
void expect_on_cuda(Core core, const char* path) {
  const torch::Device cuda(torch::kCUDA);
  for (const Case& c : core::variant_cases())
    for (Extra e : {Extra::none, Extra::bias_padding, Extra::causal}) {
      SCOPED_TRACE(c.name + " extra " + std::to_string(int(e)));
      torch::manual_seed(11);
      const Inputs in = inputs(c, e, torch::kFloat32), on_gpu = core::to_device(in, cuda);
      const Result got = run(core, on_gpu);
      EXPECT_TRUE(got.O.is_cuda());
      expect_same(got, reference(as_float64(on_gpu)), 2e-6, 2e-5);
      Inputs bf16 = on_gpu;
      for (Tensor* t : {&bf16.Q, &bf16.K, &bf16.V, &bf16.dO}) *t = t->to(torch::kBFloat16);
      expect_bf16_bound(core, bf16);
    }
  if (!path) return;  // (no --th-path routes there)
  torch::manual_seed(11);
  const Inputs in = core::to_device(inputs(core::variant_cases().front(), Extra::bias_padding, torch::kFloat32), cuda);
  set_th_path(path);
  const Tensor routed = attention_core(in.Q, in.K, in.V, in.P_l, in.P_w, in.bias, in.mask);
  set_th_path("tiled", false);
  EXPECT_TRUE(torch::equal(routed, core(in.Q, in.K, in.V, in.P_l, in.P_w, in.bias, in.mask)));
}

// The tiled path with ATen's composition between its products in the operands' dtype, in blocks
// of 3 query rows (blocking that the full-row paths do not have): as a build without thx's CUDA
// kernels runs it (ATen's softmax), and as `--th-path tiled-gemm` runs it with them (the bias,
// mask and softmax by the row kernels: on the CPU, on the emulator; on a GPU the route's own,
// with as many rows as the path picks, through CUDA's launcher).
Tensor tiled_gemm_aten(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l, const Tensor& P_w,
                       const Tensor& bias, const Tensor& mask) {
  return tiled_attention_core(Q, K, V, P_l, P_w, bias, mask, 3, nullptr, true);
}
Tensor tiled_gemm(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l, const Tensor& P_w,
                  const Tensor& bias, const Tensor& mask) {
  return tiled_attention_core(Q, K, V, P_l, P_w, bias, mask, 3, emulated_rows_launcher(), true);
}
Tensor tiled_gemm_on_cuda(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l, const Tensor& P_w,
                          const Tensor& bias, const Tensor& mask) {
  return tiled_attention_core(Q, K, V, P_l, P_w, bias, mask, 0, cuda_th_rows_launcher(), true);
}

// The heads-major path: with ATen's softmax (`--th-path gemm-aten`), and as `--th-path gemm` routes
// CUDA tensors, its softmax by CUDA's row kernels (on the CPU, heads_gemm_on_emulated_rows: the
// same kernels on the emulator).
Tensor gemm_aten(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l, const Tensor& P_w,
                 const Tensor& bias, const Tensor& mask) {
  return heads_gemm_attention_core(Q, K, V, P_l, P_w, bias, mask);
}
Tensor gemm_on_cuda(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l, const Tensor& P_w,
                    const Tensor& bias, const Tensor& mask) {
  return heads_gemm_attention_core(Q, K, V, P_l, P_w, bias, mask, cuda_th_rows_launcher());
}

// The paths, each test above on each.
struct Path {
  const char* name;  // the tests' suffix
  Core core, routed;  // the core as tested; the core `--th-path` routes a GPU's tensors to
  const char* th_path;  // (null: no `--th-path` routes there, a build without thx's CUDA kernels does)
  bool one_dtype, keeps_weights;
};
const std::vector<Path>& paths() {
  static const std::vector<Path> p = {
      {"folded", folded_attention_core, folded_attention_core, "folded", true, true},
      {"gemm_aten", gemm_aten, gemm_aten, "gemm-aten", true, true},
      {"gemm", heads_gemm_on_emulated_rows, gemm_on_cuda, "gemm", true, true},
      {"tiled_gemm_aten", tiled_gemm_aten, tiled_gemm_aten, nullptr, false, false},
      {"tiled_gemm", tiled_gemm, tiled_gemm_on_cuda, "tiled-gemm", false, false}};
  return p;
}
std::string path_name(const ::testing::TestParamInfo<Path>& info) { return info.param.name; }
void PrintTo(const Path& p, std::ostream* os) { *os << (p.th_path ? p.th_path : p.name); }

class AtenPath : public ::testing::TestWithParam<Path> {};
TEST_P(AtenPath, Float64EqualsThePapersCoreForEveryVariantAndMask) {
  expect_float64_equals_the_papers_core(GetParam().core);
}
TEST_P(AtenPath, StridedInputsGiveTheSameNumbers) { expect_strided_inputs_give_the_same_numbers(GetParam().core); }
TEST_P(AtenPath, Float64BoundFailsAGradientOffByOnePartInAMillion) {
  expect_the_bound_fails_a_gradient_off_by_one_part_in_a_million(GetParam().core);
}
TEST_P(AtenPath, Float32WithinItsRoundingOfTheFloat64Core) { expect_float32_within_its_rounding(GetParam().core); }
TEST_P(AtenPath, Bf16NoFartherFromFloat64ThanTheBatchedComposition) {
  expect_bf16_no_farther_than_the_batched_composition(GetParam().core);
}
// The control of dP_l's bf16 bound: the path's dP_l off by 10% of itself fails it (here the bound
// allows about 4%: dP_l's terms cancel to 1/20 of their sizes or less, and the batched
// composition's own error is 1-3% of the largest |dP_l|).
TEST_P(AtenPath, Bf16ConditionBoundFailsADP_lOffByTenPercent) {
  torch::manual_seed(11);
  Inputs in = inputs(core::variant_cases().front(), Extra::bias_padding, torch::kFloat32);
  for (Tensor* t : {&in.Q, &in.K, &in.V, &in.dO}) *t = t->to(torch::kBFloat16);
  const Tensor got = run(GetParam().core, in).dP_l, ref = reference(as_float64(in)).dP_l;
  EXPECT_LE(dP_l_error_in_condition_units(got, ref, in), std::ldexp(1.0, -9));
  EXPECT_GT(dP_l_error_in_condition_units(got * 1.1, ref, in), std::ldexp(1.0, -9));
}
TEST_P(AtenPath, ARowWithEveryKeyMaskedIsZeroNotNaN) { expect_a_row_without_keys_zero(GetParam().core); }
TEST_P(AtenPath, RefusesWhatDoesNotFit) { expect_refusals(GetParam().core, GetParam().one_dtype); }
TEST_P(AtenPath, ThPathKeepsTheWeightsOffTheCpuOrNot) {
  if (!GetParam().th_path) GTEST_SKIP() << "no --th-path routes there";
  expect_the_path_keeps_the_weights_off_the_cpu(GetParam().th_path, GetParam().keeps_weights);
}
// Nothing reads memory that nothing wrote (test_util.h's PoisonedCpuMemory: every new CPU tensor
// NaN, as LibTorch 2.x fills new tensors under deterministic algorithms, train.deterministic on a
// GPU): every variant and extra in fp32 and bf16, each result equal bit for bit to the same run's
// in memory as the heap gives it.
TEST_P(AtenPath, ReadNoMemoryNothingWrote) {
  for (const Case& c : core::variant_cases())
    for (Extra e : {Extra::none, Extra::bias_padding, Extra::causal, Extra::padding})
      for (torch::Dtype dtype : {torch::kFloat32, torch::kBFloat16}) {
        SCOPED_TRACE(c.name + " extra " + std::to_string(int(e)) + " " + c10::toString(dtype));
        torch::manual_seed(11);
        const Inputs in = inputs(c, e, dtype);
        EXPECT_TRUE(same_in_poisoned_memory([&] {
          std::vector<Tensor> r;
          for (const auto& [t, name] : run(GetParam().core, in).all()) r.push_back(t);
          return r;
        }));
      }
}
INSTANTIATE_TEST_SUITE_P(Cores, AtenPath, ::testing::ValuesIn(paths()), path_name);

class AtenPathOnCuda : public ::testing::TestWithParam<Path> {};
TEST_P(AtenPathOnCuda, EqualsThePapersCoreForEveryVariantMaskAndDtype) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  expect_on_cuda(GetParam().routed, GetParam().th_path);
}
INSTANTIATE_TEST_SUITE_P(Cores, AtenPathOnCuda, ::testing::ValuesIn(paths()), path_name);

// tiled-gemm's switch does what it says: in bf16 the narrow composition's P_l gradient is not the
// fp32 composition's (it rounds J, W, dW and dL to bf16), and in fp32 both are one computation, bit
// for bit.
TEST(TiledGemm, NarrowDiffersFromTheFp32CompositionOnlyBelowFp32) {
  auto fp32_composition = [](auto&... a) { return tiled_attention_core(a..., 3, nullptr, false); };
  torch::manual_seed(11);
  Inputs in = inputs(core::variant_cases().front(), Extra::bias_padding, torch::kFloat32);
  EXPECT_TRUE(torch::equal(run(tiled_gemm_aten, in).dP_l, gradients(in, fp32_composition).dP_l));
  for (Tensor* t : {&in.Q, &in.K, &in.V, &in.dO}) *t = t->to(torch::kBFloat16);
  EXPECT_FALSE(torch::equal(run(tiled_gemm_aten, in).dP_l, gradients(in, fp32_composition).dP_l));
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
