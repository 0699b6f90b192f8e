// The bf16 paths of the attention core (fused.h, "attention_core in bf16") and its row
// conversions (kernels.h).
//
// - bf16 -> fp32 and fp32 -> bf16 equal c10::BFloat16's conversions bit for bit (round to
//   nearest even), in the portable and the AVX2 build: every bf16 pattern, every tie and
//   near-tie, and specials.
// - attention_core with bf16 Q, K, V: the output and every gradient (Q, K, V, P_l, P_w, bias)
//   against float64 einsums of the paper's formulas on the same bf16-exact inputs, within a
//   bound derived step by step from bf16's 8-bit mantissa and the fp32 reduction lengths
//   (tests/bf16_bounds.h): four bf16 roundings forward (J, W, U, O), five backward (dU, dV,
//   the stored W, dJ, dQ/dK). The fp32 path on the same inputs is within 1e-5 of the same
//   float64 values, so the two paths are compared through them.
// - The check can fail: the same bound rejects a planted variant whose logits are rounded to
//   bf16 before the softmax (a softmax "silently in bf16").
// - On CPUs with AMX-BF16 or AVX512-BF16, the same with every head product on tiles (kernels.h,
//   amx; under each backend the CPU has): bf16 factors (P_l, P_w, the stored W, dL rounded), the
//   bound derived again for them.
// - Those tests run the bf16 core itself on every CPU (Bf16Core::bf16). The fp32 core that takes
//   bf16 at small heads on CPUs without AMX (fused.h, Bf16Core; heads mixed on tiles excepted
//   where 16 wide or many over long rows) is the fp32 core on the widened operands, rounded
//   once, bit for bit; within one rounding of the float64 values; and taken exactly where the
//   rule says.
#include <gtest/gtest.h>

#include <c10/util/BFloat16.h>

#include <cstring>
#include <random>

#include "attention/fused.h"
#include "attention/kernels.h"
#include "bf16_bounds.h"
#include "common/precision.h"
#include "test_util.h"
#include "tile_backends.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

using torch::Tensor;

uint16_t c10_bits(float f) { return c10::BFloat16(f).x; }
float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

std::vector<const kernels::Ops*> all_ops() { return kernels::available_ops(); }

TEST(Bf16Kernels, ConversionsEqualC10BitForBit) {
  // Inputs: every bf16 pattern widened, every tie (low half 0x8000) and its neighbours, random
  // floats, and specials; lengths leave a scalar tail after the 8-wide blocks.
  std::vector<float> in;
  for (uint32_t hi = 0; hi < 65536; ++hi)
    for (uint32_t lo : {0x0000u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) in.push_back(from_bits(hi << 16 | lo));
  std::mt19937 g(5);
  for (int i = 0; i < 200000; ++i) in.push_back(from_bits(g()));
  for (float f : {0.f, -0.f, INFINITY, -INFINITY, NAN, 3.4028235e38f, 1e-45f, -1e-40f, 1.0f + 1.0f / 256})
    in.push_back(f);
  in.push_back(1.5f);  // a tail of 3 after the blocks of 8
  in.push_back(2.5f);
  for (const kernels::Ops* k : all_ops()) {
    std::vector<uint16_t> bits(in.size());
    k->float_to_bf16(in.data(), bits.data(), int64_t(in.size()));
    int64_t wrong = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const bool nan_ok = std::isnan(in[i]) && ((bits[i] & 0x7F80) == 0x7F80) && (bits[i] & 0x7F);
      if (bits[i] != c10_bits(in[i]) && !nan_ok && wrong++ < 5)
        ADD_FAILURE() << k->name << ": float_to_bf16(" << in[i] << ") = " << bits[i] << ", c10: " << c10_bits(in[i]);
    }
    EXPECT_EQ(wrong, 0) << k->name;
    std::vector<uint16_t> every(65536 + 3);
    for (size_t i = 0; i < every.size(); ++i) every[i] = uint16_t(i);
    std::vector<float> out(every.size());
    k->bf16_to_float(every.data(), out.data(), int64_t(every.size()));
    for (size_t i = 0; i < every.size(); ++i) {
      const float want = float(c10::BFloat16(every[i], c10::BFloat16::from_bits()));
      if (std::memcmp(&out[i], &want, 4) != 0 && !(std::isnan(want) && std::isnan(out[i])))
        ADD_FAILURE() << k->name << ": bf16_to_float(" << every[i] << ") = " << out[i] << ", c10: " << want;
    }
  }
}

// ---- the bf16 attention core against its derived bound --------------------------------------

struct Bf16Case {
  int64_t b, n, m, hk, h, hv, dk, dv;
  bool P_l, P_w, bias, mask;
  double qk_scale = 1.0, bias_scale = 1.0;
};

struct CoreInputs {
  Tensor Q, K, V, Pl, Pw, bias, mask, G;  // Q, K, V, G bf16-exact (stored in fp32); bias [1,h,n,m]
};

CoreInputs inputs_of(const Bf16Case& c, uint64_t seed) {
  torch::manual_seed(seed);
  auto bf16_exact = [](Tensor t) { return t.to(torch::kBFloat16).to(torch::kFloat32); };
  CoreInputs in;
  in.Q = bf16_exact(torch::randn({c.b, c.n, c.hk, c.dk}) * c.qk_scale);
  in.K = bf16_exact(torch::randn({c.b, c.m, c.hk, c.dk}) * c.qk_scale);
  in.V = bf16_exact(torch::randn({c.b, c.m, c.hv, c.dv}));
  if (c.P_l) in.Pl = torch::randn({c.hk, c.h}) / std::sqrt(double(c.hk));
  if (c.P_w) in.Pw = torch::randn({c.h, c.hv}) / std::sqrt(double(c.h));
  if (c.bias) in.bias = torch::randn({1, c.h, c.n, c.m}) * c.bias_scale;
  if (c.mask) in.mask = (torch::arange(c.m).view({1, c.m}) < torch::randint(c.m / 2, c.m + 1, {c.b, 1})).view({c.b, 1, 1, c.m});
  in.G = bf16_exact(torch::randn({c.b, c.n, c.hv, c.dv}));
  return in;
}

// The bf16 algorithm's values and error bounds, in float64, heads-major [b, heads, n, m].
struct CoreBounds {
  Bounded O, dQ, dK, dV, dPl, dPw, dbias;
};

// tiles: the head products on AMX tiles (kernels::amx), whose factors are bf16: P_l and P_w
// rounded once, the stored W (forward, into U) and dL rounded (backward, into dJ and dP_l).
CoreBounds bounds_of(const Bf16Case& c, const CoreInputs& in, bool tiles = false) {
  const Bounded Q = exact(in.Q), K = exact(in.K), V = exact(in.V), G = exact(in.G);
  const Bounded Pl = c.P_l ? (tiles ? round_bf16(exact(in.Pl)) : exact(in.Pl)) : Bounded{};
  const Bounded Pw = c.P_w ? (tiles ? round_bf16(exact(in.Pw)) : exact(in.Pw)) : Bounded{};
  // Forward. J = Q K^T: fp32 over d_k, rounded.
  const Bounded J = round_bf16(product("bnkd,bmkd->bknm", Q, K, c.dk));
  Bounded L = c.P_l ? product("bknm,kh->bhnm", J, Pl, c.hk) : J;  // fp32 sums
  if (c.bias) {
    const Tensor bias = in.bias.to(torch::kFloat64);
    L.e = L.e + kFp32U * (L.x.abs() + bias.abs() + L.e);  // one fp32 addition
    L.x = L.x + bias;
  }
  Tensor keep = torch::ones_like(L.x, torch::kBool);
  if (c.mask) keep = in.mask.expand_as(L.x);
  L.x = L.x.masked_fill(keep.logical_not(), -1e9);
  L.e = L.e.masked_fill(keep.logical_not(), 0.0);
  // W = softmax(L) in fp32: the exact perturbation bound for the logits' errors, plus fp32's
  // own (the exp polynomial, 2e-7 ~ 4 ulp, the sum over m and the division).
  Bounded W;
  W.x = torch::softmax(L.x, -1);
  const Tensor E = std::get<0>(L.e.max(-1, true));
  W.e = W.x * (torch::exp(L.e + E) - 1) + gamma32(double(c.m) + 16) * W.x;
  const Bounded Wb = round_bf16(W);  // as stored for backward (and as U without P_w)
  const Bounded U = c.P_w ? round_bf16(product("bhnm,hv->bvnm", tiles ? Wb : W, Pw, c.h)) : Wb;
  CoreBounds r;
  r.O = round_bf16(product("bvnm,bmvd->bnvd", U, V, c.m));
  // Backward.
  const Bounded dU = round_bf16(product("bnvd,bmvd->bvnm", G, V, c.dv));
  r.dV = round_bf16(product("bvnm,bnvd->bmvd", U, G, c.n));
  const Bounded dW = c.P_w ? product("bvnm,hv->bhnm", dU, Pw, c.hv) : dU;
  if (c.P_w) r.dPw = product("bhnm,bvnm->hv", Wb, dU, double(c.b * c.n * c.m));
  const Bounded s = product("bhnm,bhnm->bhn", Wb, dW, c.m);  // sum_m W dW
  const Bounded dL = softmax_backward(Wb, dW, {s.x.unsqueeze(-1), s.e.unsqueeze(-1)}, keep);
  if (c.bias) r.dbias = {dL.x.sum(0, true), dL.e.sum(0, true) + gamma32(double(c.b)) * dL.x.abs().sum(0, true)};
  const Bounded dLt = tiles ? round_bf16(dL) : dL;  // the factor of dP_l and dJ
  if (c.P_l) r.dPl = product("bknm,bhnm->kh", J, dLt, double(c.b * c.n * c.m));
  const Bounded dJ = c.P_l ? round_bf16(product("bhnm,kh->bknm", dLt, Pl, c.h)) : round_bf16(dL);
  r.dQ = round_bf16(product("bknm,bmkd->bnkd", dJ, K, c.m));
  r.dK = round_bf16(product("bknm,bnkd->bmkd", dJ, Q, c.n));
  return r;
}

// The core on these inputs in `dtype`: O and the gradients (leaves in that dtype, P and bias fp32).
std::map<std::string, Tensor> run_core(const CoreInputs& in, torch::ScalarType dtype, std::string* node = nullptr) {
  auto leaf = [&](const Tensor& t, torch::ScalarType d) {  // a fresh leaf each run
    return t.defined() ? t.to(d).detach().clone().requires_grad_(true) : Tensor();
  };
  Tensor Q = leaf(in.Q, dtype), K = leaf(in.K, dtype), V = leaf(in.V, dtype);
  Tensor Pl = leaf(in.Pl, torch::kFloat32), Pw = leaf(in.Pw, torch::kFloat32), bias = leaf(in.bias, torch::kFloat32);
  Tensor O = attention_core(Q, K, V, Pl, Pw, bias, in.mask);
  if (node) *node = O.grad_fn()->name();
  (O.to(torch::kFloat32) * in.G).sum().backward();
  std::map<std::string, Tensor> r = {{"O", O.detach()}, {"dQ", Q.grad()}, {"dK", K.grad()}, {"dV", V.grad()}};
  if (Pl.defined()) r["dP_l"] = Pl.grad();
  if (Pw.defined()) r["dP_w"] = Pw.grad();
  if (bias.defined()) r["dbias"] = bias.grad();
  return r;
}

void check_bf16_core(const Bf16Case& c, bool tiles = false) {
  const CoreInputs in = inputs_of(c, 31);
  const CoreBounds B = bounds_of(c, in, tiles);
  std::string node;
  const auto bf = run_core(in, torch::kBFloat16, &node);
  const auto fp = run_core(in, torch::kFloat32);
  EXPECT_NE(node.find("AttentionCoreBf16Fn"), std::string::npos) << "the fused bf16 core did not run: " << node;
  const std::map<std::string, const Bounded*> want = {{"O", &B.O}, {"dQ", &B.dQ}, {"dK", &B.dK}, {"dV", &B.dV},
                                                      {"dP_l", &B.dPl}, {"dP_w", &B.dPw}, {"dbias", &B.dbias}};
  const std::string where = fmt::format("b={} n={} m={} h={}/{}/{} P_l={} P_w={} bias={} mask={}", c.b, c.n, c.m,
                                        c.hk, c.h, c.hv, c.P_l, c.P_w, c.bias, c.mask);
  for (const auto& [name, got] : bf) {
    const Bounded& b = *want.at(name);
    EXPECT_EQ(got.scalar_type(), name.rfind("dP", 0) == 0 || name == "dbias" ? torch::kFloat32 : torch::kBFloat16)
        << name;
    EXPECT_TRUE(within(got, b)) << "bf16 " << name << " " << where;
    // The fp32 path on the same inputs: the same float64 values, to fp32 accuracy.
    EXPECT_TRUE(close(fp.at(name), b.x, 1e-6, 1e-5)) << "fp32 " << name << " " << where;
  }
}

// The AMX tiles' use, set for one test and restored.
struct TilesUse {
  kernels::amx::Use before = kernels::amx::use();
  explicit TilesUse(kernels::amx::Use u) { kernels::amx::set_use(u); }
  ~TilesUse() { kernels::amx::set_use(before); }
};

void check_every_variant(bool tiles) {
  // n = 29 and m = 37: ragged against every block and vector width.
  for (bool pl : {false, true})
    for (bool pw : {false, true}) {
      const int64_t hk = 4, h = pl ? 5 : 4, hv = pw ? 3 : h;
      check_bf16_core({2, 29, 37, hk, h, hv, 8, 6, pl, pw, true, true}, tiles);
      check_bf16_core({2, 29, 37, hk, h, hv, 8, 6, pl, pw, false, false}, tiles);
    }
  check_bf16_core({3, 1, 17, 4, 4, 4, 16, 16, true, true, true, false}, tiles);  // one query row (decoding)
  check_bf16_core({2, 5, 40, 20, 36, 18, 8, 8, true, true, true, true}, tiles);   // more than a tile of heads
  check_bf16_core({2, 29, 37, 4, 5, 3, 2, 1, true, true, true, true}, tiles);     // heads of 2 and 1 (BERT's)
}

TEST(Bf16Core, OutputAndGradientsWithinTheDerivedBound) {
  const CoreRoute core(Bf16Core::bf16);
  const TilesUse fp32(kernels::amx::Use::off);
  check_every_variant(false);
}

// Every head product on tiles (under each backend the CPU has: AMX, VDPBF16PS), at every size:
// within the bound derived for bf16 factors. And the tiles did run: their results differ from the
// fp32 mixings'.
TEST(Bf16Core, OnAmxTilesWithinTheirDerivedBound) {
  const CoreRoute core(Bf16Core::bf16);
  if (!kernels::amx::available()) GTEST_SKIP() << kNoTileBackend;
  for_each_tile_backend([] {
    const TilesUse tiles(kernels::amx::Use::always);
    check_every_variant(true);
    const Bf16Case c{2, 29, 37, 4, 5, 3, 8, 6, true, true, true, true};
    const CoreInputs in = inputs_of(c, 31);
    const auto on_tiles = run_core(in, torch::kBFloat16);
    kernels::amx::set_use(kernels::amx::Use::off);
    const auto in_fp32 = run_core(in, torch::kBFloat16);
    for (const char* name : {"O", "dQ", "dP_l", "dP_w"})
      EXPECT_FALSE(torch::equal(on_tiles.at(name), in_fp32.at(name))) << name << ": the tiles did not run";
  });
}

// A bias shared by the batch ([1,h,n,m], T5's and BERT's relative bias) at two threads. The bf16
// backward once split its rows over batch x query, so two threads reached the same bias row and
// raced on it (the gradient changed from run to run). It now splits by query rows, each with its
// whole batch on one thread, adding over the batch in order: the same sum every run and at any
// thread count, so one thread's gradient equals two threads' bit for bit.
TEST(Bf16Core, ASharedBiasGradientIsExactAndRepeatsAtAnyThreadCount) {
  const CoreRoute core(Bf16Core::bf16);
  const int before = at::get_num_threads();
  const Bf16Case c{8, 128, 128, 8, 8, 8, 16, 16, true, true, true, false};
  const CoreInputs in = inputs_of(c, 7);
  at::set_num_threads(1);
  const Tensor one = run_core(in, torch::kBFloat16).at("dbias");
  at::set_num_threads(2);
  const Tensor first = run_core(in, torch::kBFloat16).at("dbias");
  EXPECT_TRUE(torch::equal(first, one))
      << "1 and 2 threads differ by up to " << (first - one).abs().max().item<float>();
  for (int k = 0; k < 8; ++k) EXPECT_TRUE(torch::equal(run_core(in, torch::kBFloat16).at("dbias"), first)) << k;
  EXPECT_TRUE(within(first, bounds_of(c, in).dbias));
  at::set_num_threads(before);
}

// The planted path: the same products, the logits rounded to bf16 before the softmax.
Tensor planted_bf16_softmax(const CoreInputs& in) {
  const Tensor Q = in.Q.to(torch::kBFloat16), K = in.K.to(torch::kBFloat16), V = in.V.to(torch::kBFloat16);
  const Tensor J = torch::matmul(Q.transpose(1, 2), K.permute({0, 2, 3, 1})).to(torch::kFloat32);
  Tensor L = torch::einsum("bknm,kh->bhnm", {J, in.Pl});
  L = (L + in.bias).masked_fill(in.mask.logical_not(), -1e9).to(torch::kBFloat16).to(torch::kFloat32);
  const Tensor U = torch::einsum("bhnm,hv->bvnm", {torch::softmax(L, -1), in.Pw}).to(torch::kBFloat16);
  return torch::matmul(U, V.transpose(1, 2)).transpose(1, 2);
}

TEST(Bf16Core, PlantedBf16SoftmaxExceedsTheBound) {
  const CoreRoute core(Bf16Core::bf16);
  // Large position biases, small dot products: rounding the logits to bf16 (a softmax run in
  // bf16) moves the weights by ~u |L| ~ 2%, far outside what the real path may err.
  const Bf16Case c{2, 29, 37, 4, 5, 3, 8, 6, true, true, true, true, 0.3, 6.0};
  const CoreInputs in = inputs_of(c, 32);
  const CoreBounds B = bounds_of(c, in);
  EXPECT_TRUE(within(run_core(in, torch::kBFloat16).at("O"), B.O)) << "the real path";
  const Tensor O = planted_bf16_softmax(in);
  EXPECT_FALSE(within(O, B.O)) << "a softmax over bf16 logits must exceed the bound";
}

TEST(Bf16Core, PlantedBf16SoftmaxExceedsTheTilesBound) {
  const CoreRoute core(Bf16Core::bf16);
  // The AMX tiles' bound is about twice as wide (twice the roundings of the head products): at
  // the same biases the planted error is within it (0.98 of it, tried). It grows with the
  // logits, the bound does not: at twice the biases it is outside.
  if (!kernels::amx::available()) GTEST_SKIP() << kNoTileBackend;
  for_each_tile_backend([] {
    const TilesUse tiles(kernels::amx::Use::always);
    const Bf16Case c{2, 29, 37, 4, 5, 3, 8, 6, true, true, true, true, 0.3, 12.0};
    const CoreInputs in = inputs_of(c, 32);
    const CoreBounds B = bounds_of(c, in, true);
    EXPECT_TRUE(within(run_core(in, torch::kBFloat16).at("O"), B.O)) << "the real path";
    EXPECT_FALSE(within(planted_bf16_softmax(in), B.O)) << "a softmax over bf16 logits must exceed the bound";
  });
}

TEST(Bf16Core, HeadsSoftmaxRoundsOnceFromFp32) {
  // heads_softmax on a bf16 J: the fp32 kernels on the widened J, then one rounding: every
  // element within u of the float64 value, plus fp32's own error (the mixings and the softmax,
  // bounded by gamma over their lengths times the absolute sums).
  torch::manual_seed(33);
  const int64_t b = 2, n = 11, m = 19, hk = 3, h = 4, hv = 2;
  const Tensor J = torch::randn({b, n, hk, m}).to(torch::kBFloat16);
  const Tensor Pl = torch::randn({hk, h}), Pw = torch::randn({h, hv});
  const Tensor Jl = J.clone().requires_grad_(true);
  const Tensor U = heads_softmax(Jl, Pl, Pw, {}, {});
  EXPECT_EQ(U.scalar_type(), torch::kBFloat16);
  const Tensor J64 = J.to(torch::kFloat64), Pl64 = Pl.to(torch::kFloat64), Pw64 = Pw.to(torch::kFloat64);
  const Tensor want = heads_softmax_reference(J64, Pl64, Pw64, {}, {});               // [b,n,h_v,m]
  const Tensor W = heads_softmax_reference(J64, Pl64, {}, {}, {});                    // [b,n,h,m]
  const Tensor fp32_err = gamma32(double(m + hk + h) + 32) * torch::einsum("bnhm,hv->bnvm", {W, Pw64.abs()});
  const Tensor tol = kBf16U * (want.abs() + fp32_err) + fp32_err;
  EXPECT_TRUE(within(U, {want, tol}));
}

// ---- the fp32 core for bf16 (fused.h, Bf16Core) ------------------------------------------------

const std::vector<Bf16Case> kRouteCases = {
    {2, 29, 37, 4, 5, 3, 8, 6, true, true, true, true},     {2, 29, 37, 4, 4, 4, 8, 6, false, false, true, false},
    {2, 29, 37, 4, 5, 5, 16, 16, true, false, false, true}, {3, 1, 17, 4, 4, 4, 16, 16, true, true, true, false}};

// bf16 Q, K, V through the fp32 core: its output and Q's, K's and V's gradients are the fp32
// core's on the same (bf16-exact) values, rounded to bf16 once; P_l's, P_w's and the bias's are
// the fp32 core's, bit for bit.
TEST(Bf16CoreInFp32, IsTheFp32CoreOnTheWidenedOperandsRoundedOnce) {
  const CoreRoute core(Bf16Core::fp32);
  for (const Bf16Case& c : kRouteCases) {
    const CoreInputs in = inputs_of(c, 31);
    const auto bf = run_core(in, torch::kBFloat16), fp = run_core(in, torch::kFloat32);
    for (const auto& [name, got] : bf) {
      const bool fp32 = name.rfind("dP", 0) == 0 || name == "dbias";
      EXPECT_TRUE(torch::equal(got, fp32 ? fp.at(name) : fp.at(name).to(torch::kBFloat16)))
          << name << " h=" << c.hk << "/" << c.h << "/" << c.hv;
    }
  }
}

// ... so each of those is within one bf16 rounding (u = 2^-8 of its size) of the float64 value,
// plus the fp32 core's own error (1e-6 + 1e-5 of the largest, as the fp32 path is checked above): a
// tighter bound than the bf16 core's four roundings forward and five backward.
TEST(Bf16CoreInFp32, WithinOneRoundingOfTheFloat64Values) {
  const CoreRoute core(Bf16Core::fp32);
  for (const Bf16Case& c : kRouteCases) {
    const CoreInputs in = inputs_of(c, 31);
    const CoreBounds B = bounds_of(c, in);
    const std::map<std::string, const Bounded*> exact = {{"O", &B.O}, {"dQ", &B.dQ}, {"dK", &B.dK}, {"dV", &B.dV}};
    for (const auto& [name, got] : run_core(in, torch::kBFloat16)) {
      if (!exact.count(name)) continue;
      const Tensor x = exact.at(name)->x, err = (got.to(torch::kFloat64) - x).abs();
      const Tensor bound = x.abs() * std::ldexp(1.0, -8) + 1.01 * (1e-6 + 1e-5 * x.abs().max());
      EXPECT_TRUE((err <= bound).all().item<bool>()) << name << ": " << (err - bound).max().item<double>();
    }
  }
}

// The output of a case by the rule, by the bf16 core and by the fp32 core: the first equals one of
// the others, and those two differ (the bf16 core's W is rounded before U V).
struct ByCore {
  Tensor rule, bf16, fp32;
};
ByCore by_each_core(const Bf16Case& c) {
  const CoreInputs in = inputs_of(c, 31);
  ByCore r;
  const std::pair<Bf16Core, Tensor*> runs[] = {{Bf16Core::automatic, &r.rule}, {Bf16Core::bf16, &r.bf16},
                                                {Bf16Core::fp32, &r.fp32}};
  for (auto [choice, out] : runs) {
    const CoreRoute core(choice);
    *out = run_core(in, torch::kBFloat16).at("O");
  }
  EXPECT_FALSE(torch::equal(r.bf16, r.fp32)) << "the two cores gave the same output: one of them did not run";
  return r;
}

// The choice: automatic takes the fp32 core for heads of at most kBf16CoreFp32Width where the CPU
// has no AMX-BF16, except heads mixed on tiles that are of exactly that width or many over long
// keys (h x m at least kBf16CoreHeadRows), and the bf16 core elsewhere; bf16 and fp32
// force one. And attention_core follows it.
TEST(Bf16CoreInFp32, TakenWhereTheRuleSays) {
  const bool amx = kernels::amx::cpu_has_amx();
  {
    const CoreRoute core(Bf16Core::automatic);
    EXPECT_EQ(bf16_core_in_fp32(16, 16, 24, 7, false), !amx);
    EXPECT_FALSE(bf16_core_in_fp32(16, 16, 24, 7, true));
    EXPECT_EQ(bf16_core_in_fp32(4, 8, 24, 7, false), !amx);
    EXPECT_EQ(bf16_core_in_fp32(8, 8, 24, 7, true), !amx);
    EXPECT_FALSE(bf16_core_in_fp32(32, 16, 24, 7, false));
    EXPECT_FALSE(bf16_core_in_fp32(16, 17, 24, 7, false));
    // Many narrow heads over many keys, mixed on tiles: the bf16 core; one key fewer, the fp32 core.
    EXPECT_FALSE(bf16_core_in_fp32(8, 8, 64, 256, true));
    EXPECT_FALSE(bf16_core_in_fp32(1, 1, 768, 128, true));
    EXPECT_EQ(bf16_core_in_fp32(8, 8, 64, 256, false), !amx) << "not mixed on tiles";
    EXPECT_EQ(bf16_core_in_fp32(8, 8, 64, 255, true), !amx);
    EXPECT_EQ(bf16_core_in_fp32(4, 4, 192, 85, true), !amx);
    EXPECT_FALSE(bf16_core_in_fp32(4, 4, 192, 86, true));
    static_assert(64 * 256 == kBf16CoreHeadRows && 192 * 85 < kBf16CoreHeadRows && 192 * 86 > kBf16CoreHeadRows,
                  "the cases above sit on the rule's edge");
  }
  {
    const CoreRoute core(Bf16Core::bf16);
    EXPECT_FALSE(bf16_core_in_fp32(4, 4, 4, 7, false));
  }
  {
    const CoreRoute core(Bf16Core::fp32);
    EXPECT_TRUE(bf16_core_in_fp32(64, 64, 64, 512, true));
  }
  const ByCore narrow = by_each_core(kRouteCases[0]);
  EXPECT_TRUE(torch::equal(narrow.rule, amx ? narrow.bf16 : narrow.fp32));
}

// Heads of 16 mixed 24 to 24 (P_l and P_w) on tiles where the CPU has a backend for them: the rule
// takes the bf16 core there (fused.h), and the fp32 core where it has none or they are off
// (THX_KERNELS, TilesUse).
TEST(Bf16CoreInFp32, HeadsOf16MixedOnTilesTakeTheBf16Core) {
  const Bf16Case c{1, 5, 7, 24, 24, 24, 16, 16, true, true, false, false};
  const bool tiles = kernels::amx::use() != kernels::amx::Use::off, amx = kernels::amx::cpu_has_amx();
  EXPECT_EQ(bf16_mixings_on_tiles(24, 24, 24, true, true), tiles);
  EXPECT_FALSE(bf16_mixings_on_tiles(24, 24, 24, false, false)) << "multi-head mixes nothing";
  const ByCore on = by_each_core(c);
  EXPECT_TRUE(torch::equal(on.rule, amx || tiles ? on.bf16 : on.fp32));
  const TilesUse off(kernels::amx::Use::off);
  EXPECT_FALSE(bf16_mixings_on_tiles(24, 24, 24, true, true));
  const ByCore without = by_each_core(c);
  EXPECT_TRUE(torch::equal(without.rule, amx ? without.bf16 : without.fp32));
}

// Heads of 2 mixed 64 to 64 on tiles: attention_core takes the bf16 core where 64 heads meet 256
// keys, whether 256 queries or 8 (an encoder-decoder attention's few targets) look at them, and
// the fp32 core over 255 keys, even from 256 queries (CPUs without AMX-BF16; with it the bf16 core
// always; without a backend for tiles the fp32 core always).
TEST(Bf16CoreInFp32, ManyNarrowHeadsMixedOnTilesTakeTheBf16CoreOverManyKeys) {
  const bool tiles = kernels::amx::use() != kernels::amx::Use::off, amx = kernels::amx::cpu_has_amx();
  EXPECT_EQ(bf16_mixings_on_tiles(64, 64, 64, true, true), tiles);
  for (const auto& [n, m] : {std::pair<int64_t, int64_t>{256, 256}, {8, 256}, {256, 255}}) {
    const ByCore by = by_each_core({1, n, m, 64, 64, 64, 2, 2, true, true, false, true});
    EXPECT_TRUE(torch::equal(by.rule, amx || (tiles && m == 256) ? by.bf16 : by.fp32)) << n << " x " << m;
  }
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
