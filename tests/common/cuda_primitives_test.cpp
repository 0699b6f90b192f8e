// The primitives thx's CUDA kernels are built from, each checked against what the PTX ISA (and
// CUDA's math library's error bounds) define, on the emulator here and on a GPU
// (cuda_primitives.cuh has the probe, cuda_primitives.cu its CUDA kernel). The expectations are
// written from those definitions, not from the emulator's code:
//  - ldmatrix: lane 8 j + r gives row r of matrix j; lane l receives (row l / 4, columns 2 (l % 4),
//    + 1), or with .trans (rows 2 (l % 4), + 1, column l / 4), the first in the low half;
//  - stmatrix, plain and .trans: the words ldmatrix gave, stored to the rows the lanes address,
//    are those rows again (its inverse, by the PTX ISA's figures of the two);
//  - mma m16n8k16: D = A B + C over the logical matrices (integers: exact, equal bit for bit;
//    random bf16: within gamma(34) = 34 units of 2^-24 of |C| + sum |A B|, tc_bounds.h's model of
//    17 terms summed by tensor cores that may truncate rather than round; the largest error, and how
//    many equal the fp32 sums in k order, the emulator's model, are reported);
//  - the shuffle, loads, stores, asynchronous copies, atomics and the high word: exact; exp and
//    rsqrt within 2 ulps, log within 1 (CUDA's documented bounds), the fast exp within 2 +
//    floor(|1.173 x|) ulps (the CUDA C++ Programming Guide's bound for __expf); exp(-inf) = +0,
//    fmax(-inf, x) = x;
//  - bf16, one value and two packed: round to nearest, ties to even; NaN to 0x7fc0 (c10's, the
//    emulator's) or 0x7fff (cvt.rn's on a GPU); past the largest bf16 to inf.
// A GPU where the emulator passes and the hardware does not is the first thing to read when
// FlashOnCuda.* fails: it names the primitive (scripts/gpu_session.sh runs this suite first).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "common/cuda_primitives.cuh"

#if defined(THX_CUDA_KERNELS)
namespace thx::test::primitives {
const char* probe_on_cuda(const Args& a);  // cuda_primitives.cu
}
#endif

namespace thx::test::primitives {
// Whether the probe's CUDA kernel is built (thx built with its CUDA kernels); what its launch gave.
#if defined(THX_CUDA_KERNELS)
constexpr bool kProbeOnCuda = true;
inline const char* launch_on_cuda(const Args& a) { return probe_on_cuda(a); }
#else
constexpr bool kProbeOnCuda = false;
inline const char* launch_on_cuda(const Args&) { return "thx built without its CUDA kernels"; }
#endif
}  // namespace thx::test::primitives

namespace thx::test {
namespace {
namespace THX_FILE_ID {

using namespace primitives;

struct Inputs {
  std::vector<uint16_t> table, a, b;
  std::vector<float> c, x;
};
struct Result {
  std::vector<uint32_t> out;
  std::vector<float> sums;
};

// (the bit casts are cuda_compat.h's; the checks below use nothing else of it)
uint32_t bits(float f) { return thx_float_to_bits(f); }
float from_bits(uint32_t u) { return thx_bits_to_float(u); }
float bf16_value(uint16_t h) { return from_bits(uint32_t(h) << 16); }
uint16_t bf16_truncated(float f) { return uint16_t(bits(f) >> 16); }

// The conversions' arguments: ties either way, just above and below one, overflow to inf either
// sign, NaNs, inf, subnormals; random values after them.
const std::vector<uint32_t>& conversion_cases() {
  static const std::vector<uint32_t> v = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu, 0x7f7fffffu,
                                          0xff7fffffu, 0x7fc00001u, 0xffffffffu, 0x7f800000u, 0x00000001u,
                                          0x80008000u, 0x00008001u, 0xbf7f8000u, 0x40408000u};
  return v;
}

Inputs inputs() {
  std::mt19937 rng(17);
  std::uniform_int_distribution<int> word(0, 0xffff), small(-4, 4);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> uniform(0.f, 1.f);
  Inputs in;
  for (int i = 0; i < kTableRows * kLd; ++i) in.table.push_back(uint16_t(word(rng)));
  for (int set = 0; set < 2; ++set)
    for (int w = 0; w < 2; ++w) {
      auto value = [&] { return set == 0 ? float(small(rng)) : normal(rng); };
      for (int i = 0; i < 256; ++i) in.a.push_back(bf16_truncated(value()));  // integers and bf16 exactly
      for (int i = 0; i < 128; ++i) in.b.push_back(bf16_truncated(value()));
      for (int i = 0; i < 128; ++i) in.c.push_back(set == 0 ? float(8 * small(rng)) : 4 * normal(rng));
    }
  for (int t = 0; t < kThreads; ++t) {
    const size_t i = size_t(2 * t);
    const auto& cases = conversion_cases();
    const float conversion[2] = {i < cases.size() ? from_bits(cases[i]) : normal(rng) * 100.f,
                                 i + 1 < cases.size() ? from_bits(cases[i + 1]) : normal(rng) * 1e-3f};
    in.x.insert(in.x.end(), {-20.f + 23.5f * uniform(rng), 3.f * normal(rng), -0.31f * float(t),
                             std::exp(5.f * normal(rng)), std::exp(4.f * normal(rng)),
                             t == 0 ? -std::numeric_limits<float>::infinity() : normal(rng), conversion[0],
                             conversion[1]});
  }
  return in;
}

Args args_of(const Inputs& in, uint32_t* out, float* sums) {
  return {in.table.data(), in.a.data(), in.b.data(), in.c.data(), in.x.data(), out, sums};
}

Result on_emulator(const Inputs& in) {
  Result r{std::vector<uint32_t>(kThreads * kSlots, 0xdeadbeefu), std::vector<float>(20, 0.f)};
  const Args a = args_of(in, r.out.data(), r.sums.data());
  emu::launch({1, 1, 1}, kThreads, kSharedBytes, [&] { probe(a); });
  return r;
}

struct Report {
  std::vector<std::string> wrong;  // the first few: slot, thread, got, want
  int wrong_count = 0;
  double mma_error = 0;  // the random product's largest error, in 2^-24 (|C| + sum |A B|)
  int mma_sequential = 0, mma_outputs = 0;
  double ulps[4] = {0, 0, 0, 0};  // exp, log, rsqrt, the fast exp: the largest

  void fail(const char* slot, int t, uint64_t got, uint64_t want) {
    if (++wrong_count > 12) return;
    std::ostringstream s;
    s << slot << " thread " << t << ": got 0x" << std::hex << got << ", want 0x" << want;
    wrong.push_back(s.str());
  }
  std::string str() const {
    std::ostringstream s;
    s << "primitives: " << wrong_count << " wrong; mma with random bf16: largest error " << mma_error
      << " x 2^-24 (|C| + sum |A B|), " << mma_sequential << " of " << mma_outputs
      << " outputs equal to fp32 sums in k order; exp " << ulps[0] << " ulps, log " << ulps[1] << ", rsqrt "
      << ulps[2] << ", fast exp " << ulps[3];
    for (const std::string& w : wrong) s << "\n  " << w;
    return s.str();
  }
};

// The word ldmatrix gives lane l of warp w from matrix j (rows addressed by lanes 8 j + r).
uint32_t want_ldmatrix(const Inputs& in, int w, int l, int j, bool trans) {
  auto element = [&](int r, int col) {
    const int lane = 8 * j + r;
    return uint32_t(in.table[size_t(table_row(w, lane)) * kLd + table_column(w, lane) + col]);
  };
  if (trans) return element(2 * (l % 4), l / 4) | element(2 * (l % 4) + 1, l / 4) << 16;
  return element(l / 4, 2 * (l % 4)) | element(l / 4, 2 * (l % 4) + 1) << 16;
}

void check_ldmatrix(const Inputs& in, const Result& r, Report& rep) {
  for (int t = 0; t < kThreads; ++t) {
    const uint32_t* o = &r.out[size_t(t) * kSlots];
    const int w = t / 32, l = t % 32;
    for (int i = 0; i < 4; ++i) {  // stmatrix: the row lane l addressed is the table's row it gave ldmatrix
      const uint16_t* row = &in.table[size_t(table_row(w, l)) * kLd + table_column(w, l)];
      const uint32_t want = uint32_t(row[2 * i]) | uint32_t(row[2 * i + 1]) << 16;
      if (o[kStm + i] != want) rep.fail("stmatrix.x4 ", t, o[kStm + i], want);
      if (o[kStmT + i] != want) rep.fail("stmatrix.x4.trans", t, o[kStmT + i], want);
    }
    for (int j = 0; j < 4; ++j) {
      if (j < 2 && o[kLdm2 + j] != want_ldmatrix(in, w, l, j, false))
        rep.fail("ldmatrix.x2", t, o[kLdm2 + j], want_ldmatrix(in, w, l, j, false));
      if (j < 2 && o[kLdm2T + j] != want_ldmatrix(in, w, l, j, true))
        rep.fail("ldmatrix.x2.trans", t, o[kLdm2T + j], want_ldmatrix(in, w, l, j, true));
      if (o[kLdm4 + j] != want_ldmatrix(in, w, l, j, false))
        rep.fail("ldmatrix.x4", t, o[kLdm4 + j], want_ldmatrix(in, w, l, j, false));
      if (o[kLdm4T + j] != want_ldmatrix(in, w, l, j, true))
        rep.fail("ldmatrix.x4.trans", t, o[kLdm4T + j], want_ldmatrix(in, w, l, j, true));
    }
  }
}

// D = A B + C of set `set`, warp w, in float64; `scale` |C| + sum |A B|, `sequential` the fp32 sum in k order.
void product(const Inputs& in, int set, int w, int i, int n, double* exact, double* scale, float* sequential) {
  const int at = set * 2 + w;
  const float c = in.c[size_t(at) * 128 + i * 8 + n];
  *exact = c, *scale = std::fabs(c), *sequential = c;
  for (int k = 0; k < 16; ++k) {
    const float x = bf16_value(in.a[size_t(at) * 256 + i * 16 + k]), y = bf16_value(in.b[size_t(at) * 128 + k * 8 + n]);
    *exact += double(x) * y, *scale += std::fabs(double(x) * y), *sequential += x * y;
  }
}

void check_products(const Inputs& in, const Result& r, Report& rep) {
  for (int t = 0; t < kThreads; ++t) {
    const uint32_t* o = &r.out[size_t(t) * kSlots];
    const int w = t / 32, g = (t % 32) / 4, q = t % 4;
    for (int x = 0; x < 4; ++x) {
      const int i = g + 8 * (x / 2), n = 2 * q + x % 2;
      double exact, scale;
      float sequential;
      product(in, 0, w, i, n, &exact, &scale, &sequential);
      const uint32_t want = bits(float(exact));  // integers: exact in fp32
      if (o[kMmaInt + x] != want) rep.fail("mma (fragments)", t, o[kMmaInt + x], want);
      if (o[kMmaLdm + x] != want) rep.fail("mma (A by ldmatrix.x4, B by .x2.trans)", t, o[kMmaLdm + x], want);
      if (o[kMmaLdmT + x] != want) rep.fail("mma (A by ldmatrix.x4.trans, B by .x2)", t, o[kMmaLdmT + x], want);
      product(in, 1, w, i, n, &exact, &scale, &sequential);
      const double error = std::fabs(from_bits(o[kMmaRand + x]) - exact) / (scale * std::ldexp(1.0, -24));
      rep.mma_error = std::max(rep.mma_error, error);
      const double gamma34 = 34 / (1 - 34 * std::ldexp(1.0, -24));  // in units of 2^-24
      if (!(error <= gamma34)) rep.fail("mma (random bf16)", t, o[kMmaRand + x], bits(float(exact)));
      rep.mma_sequential += o[kMmaRand + x] == bits(sequential), ++rep.mma_outputs;
    }
  }
}

// |got - want| in units in the last place of want (float's, at want's binade).
double ulps(float got, double want) {
  int e;
  std::frexp(want, &e);
  return std::fabs(double(got) - want) / std::ldexp(1.0, e - 24);
}

uint16_t want_bf16(float f) {  // nearest, ties to even (NaN: bf16_right takes either NaN)
  const uint32_t u = bits(f);
  if (std::isnan(f)) return 0x7fc0;
  uint16_t h = uint16_t(u >> 16);
  const uint32_t rest = u & 0xffffu;
  if (rest > 0x8000u || (rest == 0x8000u && (h & 1u))) ++h;
  return h;
}

// Whether `got` (two bf16, x0's low) is x0 and x1 rounded; a NaN may be either quiet NaN.
bool bf16_right(uint32_t got, float x0, float x1) {
  auto one = [](uint16_t h, float f) { return std::isnan(f) ? h == 0x7fc0 || h == 0x7fff : h == want_bf16(f); };
  return one(uint16_t(got & 0xffffu), x0) && one(uint16_t(got >> 16), x1);
}

void check_math(const Inputs& in, int t, const uint32_t* o, Report& rep) {
  const float* x = &in.x[size_t(t) * kArgs];
  const double bound[3] = {2, 1, 2};
  for (int i = 0; i < 5; ++i) {
    const int which = i < 3 ? 0 : i - 2;
    const double want = i < 3 ? std::exp(double(x[i])) : i == 3 ? std::log(double(x[3])) : 1 / std::sqrt(double(x[4]));
    const double u = ulps(from_bits(o[kExp + i]), want);
    rep.ulps[which] = std::max(rep.ulps[which], u);
    const char* name[3] = {"exp", "log", "rsqrt"};
    if (!(u <= bound[which])) rep.fail(name[which], t, o[kExp + i], bits(float(want)));
  }
  for (int i = 0; i < 3; ++i) {
    const double u = ulps(from_bits(o[kExpFast + i]), std::exp(double(x[i])));
    rep.ulps[3] = std::max(rep.ulps[3], u);
    if (!(u <= 2 + std::floor(std::fabs(1.173 * x[i])))) rep.fail("fast exp", t, o[kExpFast + i], bits(std::exp(x[i])));
  }
  if (o[kSpecial] != 0u) rep.fail("exp(-inf)", t, o[kSpecial], 0u);
  if (o[kSpecial + 1] != bits(x[5])) rep.fail("fmax(-inf, x)", t, o[kSpecial + 1], bits(x[5]));
  const uint32_t want = uint32_t(want_bf16(x[6])) | uint32_t(want_bf16(x[7])) << 16;
  if (!bf16_right(o[kBf16], x[6], x[7])) rep.fail("bf16 rounding", t, o[kBf16], want);
  if (!bf16_right(o[kPack], x[6], x[7])) rep.fail("bf16 pair", t, o[kPack], want);
}

void check_scalars(const Inputs& in, const Result& r, Report& rep) {
  for (int t = 0; t < kThreads; ++t) {
    const uint32_t* o = &r.out[size_t(t) * kSlots];
    const int w = t / 32, l = t % 32;
    for (int i = 0; i < 5; ++i) {
      const int mask = 1 << i;
      const uint32_t want = bits(float((32 * w + (l ^ mask)) * 3 + 1000 * mask));
      if (o[kShfl + i] != want) rep.fail("shfl.bfly", t, o[kShfl + i], want);
    }
    for (int i = 0; i < 2; ++i) {
      const uint32_t want = uint32_t(in.table[4 * t + 2 * i]) | uint32_t(in.table[4 * t + 2 * i + 1]) << 16;
      if (o[kLoad8 + i] != want) rep.fail("8-byte load", t, o[kLoad8 + i], want);
    }
    const uint32_t word = 0x10001u * uint32_t((t + 1) % kThreads) + 7u;
    if (o[kWord] != word) rep.fail("word through shared memory", t, o[kWord], word);
    if (o[kZeroed] != 0u) rep.fail("16-byte zeros", t, o[kZeroed], 0u);
    for (int i = 0; i < 4; ++i) {
      const size_t at = size_t(8 * ((t + 1) % kThreads) + 2 * i);
      const uint32_t want = uint32_t(in.table[at]) | uint32_t(in.table[at + 1]) << 16;
      if (o[kAsync + i] != want) rep.fail("cp.async", t, o[kAsync + i], want);
    }
    const uint32_t high = uint32_t(uint64_t(0x9e3779b9u * uint32_t(t + 1)) * (0x7fffffffu + uint32_t(t)) >> 32);
    if (o[kUmulhi] != high) rep.fail("umulhi", t, o[kUmulhi], high);
    check_math(in, t, o, rep);
  }
  for (int q = 0; q < 4; ++q) {
    float want[5] = {0, 0, 0, 0, 0};
    for (int t = q; t < kThreads; t += 4)
      want[0] += float(t), want[1] += float(2 * t), want[2] += float(3 * t + 1), want[3] += 0.5f * float(t),
          want[4] += float(t) + 0.25f;
    for (int i = 0; i < 4; ++i) {
      const float got = r.sums[size_t(4 * q + i)];
      if (got != want[i]) rep.fail("red.add.v4", q, bits(got), bits(want[i]));
    }
    if (r.sums[size_t(16 + q)] != want[4]) rep.fail("atomic add", q, bits(r.sums[size_t(16 + q)]), bits(want[4]));
  }
}

Report check(const Inputs& in, const Result& r) {
  Report rep;
  check_ldmatrix(in, r, rep);
  check_products(in, r, rep);
  check_scalars(in, r, rep);
  return rep;
}

TEST(CudaPrimitives, TheEmulatorDoesWhatPtxDefines) {
  const Inputs in = inputs();
  const Report rep = check(in, on_emulator(in));
  std::cout << rep.str() << "\n";
  EXPECT_EQ(rep.wrong_count, 0) << rep.str();
  // The emulator's model of the tensor cores, which tc_bounds.h's bounds assume: fp32 sums in k order.
  EXPECT_EQ(rep.mma_sequential, rep.mma_outputs);
  EXPECT_EQ(rep.mma_outputs, kThreads * 4);
  EXPECT_GT(rep.mma_error, 0);  // random operands round (else the bound's check is empty)
}

// The check fails on each kind of wrong answer a GPU might give where the emulator's model is wrong.
TEST(CudaPrimitives, TheCheckFailsOnEachWrongResult) {
  const Inputs in = inputs();
  const Result right = on_emulator(in);
  auto wrong = [&](const char* what, const std::function<void(Result&)>& change) {
    Result r = right;
    change(r);
    const Report rep = check(in, r);
    EXPECT_GE(rep.wrong_count, 1) << what;
    EXPECT_TRUE(!rep.wrong.empty() && rep.wrong[0].rfind(what, 0) == 0) << what << ": " << rep.str();
  };
  auto at = [](Result& r, int t, int slot) -> uint32_t& { return r.out[size_t(t) * kSlots + slot]; };
  wrong("ldmatrix.x2.trans", [&](Result& r) {  // the halves exchanged
    uint32_t& word = at(r, 5, kLdm2T + 1);
    word = word >> 16 | word << 16;
  });
  wrong("ldmatrix.x4 ", [&](Result& r) { std::swap(at(r, 9, kLdm4 + 1), at(r, 9, kLdm4 + 2)); });
  wrong("ldmatrix.x4.trans", [&](Result& r) { at(r, 40, kLdm4T) = at(r, 41, kLdm4T); });
  wrong("mma (fragments)", [&](Result& r) { at(r, 3, kMmaInt + 2) ^= 1u; });
  wrong("mma (random bf16)", [&](Result& r) { at(r, 3, kMmaRand) = bits(from_bits(at(r, 3, kMmaRand)) * 1.001f); });
  wrong("shfl.bfly", [&](Result& r) { at(r, 3, kShfl + 4) = at(r, 3 ^ 8, kShfl + 4); });
  wrong("exp", [&](Result& r) { at(r, 7, kExp + 1) += 4; });
  wrong("bf16 rounding", [&](Result& r) { at(r, 0, kBf16) += 1; });  // the tie rounded up, not to even
  wrong("bf16 pair", [&](Result& r) { at(r, 0, kPack) += 1 << 16; });
  wrong("bf16 rounding", [&](Result& r) { at(r, 3, kBf16) = (at(r, 3, kBf16) & 0xffffu) | 0x7fbf0000u; });  // a NaN
  wrong("stmatrix.x4 ", [&](Result& r) { std::swap(at(r, 12, kStm), at(r, 12, kStm + 1)); });
  wrong("stmatrix.x4.trans", [&](Result& r) { at(r, 33, kStmT + 3) ^= 0x10000u; });
  wrong("cp.async", [&](Result& r) { at(r, 17, kAsync + 2) ^= 4u; });
  wrong("fast exp", [&](Result& r) { at(r, 7, kExpFast + 1) += 64; });  // past 2 + 1.173 |x| for any x here
  wrong("16-byte zeros", [&](Result& r) { at(r, 60, kZeroed) = 1u; });
  wrong("red.add.v4", [&](Result& r) { r.sums[5] += 1; });
}

// The same probe on the GPU, checked the same way: where this fails and the emulator's test passes,
// the emulator (and so every emulated kernel test) does not model that primitive as the hardware runs it.
TEST(CudaPrimitivesOnCuda, TheGpuDoesWhatPtxDefines) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (!kProbeOnCuda) GTEST_SKIP() << "thx built without its CUDA kernels (THX_CUDA_KERNELS)";
  const Inputs in = inputs();
  auto device = [](const void* p, size_t bytes) {
    return torch::from_blob(const_cast<void*>(p), {int64_t(bytes)}, torch::kUInt8).to(torch::kCUDA);
  };
  const torch::Tensor table = device(in.table.data(), in.table.size() * 2), a = device(in.a.data(), in.a.size() * 2),
                      b = device(in.b.data(), in.b.size() * 2), c = device(in.c.data(), in.c.size() * 4),
                      x = device(in.x.data(), in.x.size() * 4);
  torch::Tensor out = torch::zeros({kThreads * kSlots}, torch::dtype(torch::kInt32).device(torch::kCUDA));
  torch::Tensor sums = torch::zeros({20}, torch::dtype(torch::kFloat).device(torch::kCUDA));
  const Args args{static_cast<const uint16_t*>(table.data_ptr()), static_cast<const uint16_t*>(a.data_ptr()),
                  static_cast<const uint16_t*>(b.data_ptr()),     static_cast<const float*>(c.data_ptr()),
                  static_cast<const float*>(x.data_ptr()),        static_cast<uint32_t*>(out.data_ptr()),
                  sums.data_ptr<float>()};
  const char* error = launch_on_cuda(args);
  ASSERT_EQ(error, nullptr) << error;
  Result r{std::vector<uint32_t>(kThreads * kSlots), std::vector<float>(20)};
  const torch::Tensor o = out.cpu(), s = sums.cpu();
  std::memcpy(r.out.data(), o.data_ptr(), r.out.size() * 4);
  std::memcpy(r.sums.data(), s.data_ptr(), r.sums.size() * 4);
  const Report rep = check(in, r);
  std::cout << rep.str() << "\n";  // scripts/gpu_session.sh puts this line in the session's summary
  EXPECT_EQ(rep.wrong_count, 0) << rep.str();
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
