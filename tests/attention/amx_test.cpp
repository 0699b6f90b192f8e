// The tile products of the bf16 core (kernels.h, amx; kernels_amx.cpp), under each backend the
// CPU has: AMX tiles (Sapphire and Emerald Rapids) and VDPBF16PS on the same packed tiles (those,
// and AMD Zen 4 and 5); elsewhere they skip, saying so.
//
// - mix and gram against float64 sums of the same bf16 values: a product of two bf16 values is
//   exact in fp32, so the only error is the fp32 accumulation, bounded by gamma(k) sum |a||b|
//   (Higham, Lemma 3.1). Ragged shapes against every tile (16 rows, 32 k, 16 columns), strides
//   wider than the rows, and the memory around each output, which must stay untouched.
// - pack() rounds the projections to bf16 as c10::BFloat16 does, and mix_bf16 equals mix's fp32
//   result so rounded, bit for bit.
// - The bound can fail: the same check rejects the mixing with one row of its factor dropped,
//   and the fp32 factor unrounded is outside a bf16 factor's exact sum by far more than it.
#include <gtest/gtest.h>

#include <c10/util/BFloat16.h>

#include <cmath>
#include <random>
#include <vector>

#include "attention/kernels.h"
#include "common/precision.h"
#include "bf16_bounds.h"
#include "tile_backends.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

namespace amx = kernels::amx;

struct Values {
  std::vector<uint16_t> bits;  // bf16
  std::vector<double> x;       // the same values
};

Values random_bf16(size_t count, std::mt19937& rng) {
  std::normal_distribution<float> d;
  Values v;
  for (size_t i = 0; i < count; ++i) {
    const c10::BFloat16 b(d(rng));
    v.bits.push_back(b.x);
    v.x.push_back(double(float(b)));
  }
  return v;
}

// |got - want| <= gamma32(k) * scale (+ a float64 hair) for every element; the worst ratio.
double worst_ratio(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& scale,
                   double k) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(double(got[i]) - want[i]) / (gamma32(k) * scale[i] + 1e-30));
  return worst;
}

constexpr float kSentinel = -12345.0f;

struct MixCase {
  int64_t O, I, len;
};

// out[o][j] = sum_i bf16(C)[o][i] X[i][j] through amx::mix; returns the worst error / bound, and
// checks that nothing outside out's O x len block was written.
double mix_case(const MixCase& c, std::mt19937& rng, int64_t drop_row = -1) {
  const int64_t xs = c.len + 3, os = c.len + 5;  // strides wider than the rows
  std::normal_distribution<float> d;
  std::vector<float> C(size_t(c.O * c.I));
  for (float& f : C) f = d(rng);
  const Values X = random_bf16(size_t(c.I * xs), rng);
  amx::Packed A = amx::pack(C.data(), c.I, 1, c.O, c.I);
  std::vector<float> out(size_t((c.O + 1) * os), kSentinel);
  amx::Scratch s;
  amx::mix(out.data(), os, A, X.bits.data(), xs, c.len, s);
  std::vector<float> got;
  std::vector<double> want, scale;
  for (int64_t o = 0; o < c.O; ++o)
    for (int64_t j = 0; j < c.len; ++j) {
      double sum = 0, abs = 0;
      for (int64_t i = 0; i < c.I; ++i) {
        if (i == drop_row) continue;
        const double a = double(float(c10::BFloat16(C[size_t(o * c.I + i)]))), x = X.x[size_t(i * xs + j)];
        sum += a * x, abs += std::abs(a * x);
      }
      got.push_back(out[size_t(o * os + j)]), want.push_back(sum), scale.push_back(abs);
    }
  for (int64_t o = 0; o <= c.O; ++o)
    for (int64_t j = o < c.O ? c.len : 0; j < os; ++j)
      EXPECT_EQ(out[size_t(o * os + j)], kSentinel) << "mix wrote past its output at row " << o << " column " << j;
  return worst_ratio(got, want, scale, double(c.I));
}

// The backend follows the CPU: VDPBF16PS wherever /proc/cpuinfo lists avx512_bf16 (common/precision.h
// reads it apart from CPUID), so a check that failed to see it cannot leave the tests below skipping
// where they should run.
TEST(AmxKernels, ABackendRunsWhereTheCpuListsBf16Products) {
  EXPECT_EQ(amx::cpu_has_avx512_bf16(), cpu_bf16().avx512_bf16) << cpu_bf16().describe();
  if (cpu_bf16().avx512_bf16) EXPECT_TRUE(amx::available()) << cpu_bf16().describe();
  if (!amx::cpu_has_amx()) EXPECT_NE(amx::backend(), amx::Backend::tiles);
}

TEST(AmxKernels, MixEqualsFloat64WithinFp32Accumulation) {
  if (!amx::available()) GTEST_SKIP() << kNoTileBackend;
  for_each_tile_backend([&] {
    std::mt19937 rng(5);
    // Ragged against 16 rows, 32 k and 16 columns; the paper's 12, 24 and 48 heads at length 512.
    for (const MixCase& c : std::vector<MixCase>{{1, 1, 1}, {5, 3, 7}, {17, 33, 16}, {24, 37, 45}, {12, 12, 512},
                                                 {24, 24, 512}, {48, 48, 512}, {33, 65, 100}})
      EXPECT_LE(mix_case(c, rng), 1.0) << "O=" << c.O << " I=" << c.I << " len=" << c.len;
  });
}

TEST(AmxKernels, AMixMissingOneHeadExceedsTheBound) {
  if (!amx::available()) GTEST_SKIP() << kNoTileBackend;
  for_each_tile_backend([&] {
    std::mt19937 rng(6);
    EXPECT_GT(mix_case({12, 12, 64}, rng, 11), 100.0) << "the check must see one head's term missing";
  });
}

// mix_bf16 is mix's fp32 result rounded as c10::BFloat16 rounds, bit for bit (the same tile sums),
// NaN included; it writes only its rows and columns.
TEST(AmxKernels, MixBf16IsTheFp32MixRoundedAsC10) {
  if (!amx::available()) GTEST_SKIP() << kNoTileBackend;
  for_each_tile_backend([&] {
    std::mt19937 rng(8);
    std::normal_distribution<float> d;
    for (const MixCase& c : std::vector<MixCase>{{5, 3, 7}, {17, 33, 45}, {48, 48, 512}}) {
      const int64_t xs = c.len + 3, os = c.len + 5;
      std::vector<float> C(size_t(c.O * c.I));
      for (float& f : C) f = d(rng);
      Values X = random_bf16(size_t(c.I * xs), rng);
      X.bits[size_t(c.len / 2)] = 0x7FC1;  // a NaN in row 0: column len/2 of every output is NaN
      const amx::Packed A = amx::pack(C.data(), c.I, 1, c.O, c.I);
      amx::Scratch s;
      std::vector<float> fp32(size_t(c.O * os));
      amx::mix(fp32.data(), os, A, X.bits.data(), xs, c.len, s);
      const uint16_t sentinel = 0xABCD;
      std::vector<uint16_t> bf(size_t((c.O + 1) * os), sentinel);
      amx::mix_bf16(bf.data(), os, A, X.bits.data(), xs, c.len, s);
      int64_t wrong = 0;
      for (int64_t o = 0; o <= c.O; ++o)
        for (int64_t j = 0; j < os; ++j) {
          const bool inside = o < c.O && j < c.len;
          const uint16_t want = inside ? c10::BFloat16(fp32[size_t(o * os + j)]).x : sentinel;
          if (bf[size_t(o * os + j)] != want && wrong++ < 5)
            ADD_FAILURE() << "O=" << c.O << " at " << o << "," << j << ": " << bf[size_t(o * os + j)] << ", want "
                          << want;
        }
      EXPECT_EQ(wrong, 0);
      EXPECT_EQ(bf[size_t(c.len / 2)], 0x7FC0) << "NaN rounds to c10's quiet NaN";
    }
  });
}

TEST(AmxKernels, PackRoundsAsC10) {
  if (!amx::available()) GTEST_SKIP() << kNoTileBackend;
  // Ties and near-ties of bf16 rounding, and C read transposed (c_o = 1).
  const std::vector<float> C = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -1.00390625f, 1.00390637f, 3e-39f, 65504.0f};
  const amx::Packed A = amx::pack(C.data(), 1, 2, 2, 3);  // A[o][i] = C[o + 2 i]
  ASSERT_EQ(A.rows, 2);
  ASSERT_EQ(A.cols, 3);
  for (int64_t o = 0; o < 2; ++o)
    for (int64_t i = 0; i < 3; ++i)
      EXPECT_EQ(A.tiles[size_t(o * 32 + i)], c10::BFloat16(C[size_t(o + 2 * i)]).x) << o << "," << i;
}

TEST(AmxKernels, GramAddsFloat64SumsWithinFp32Accumulation) {
  if (!amx::available()) GTEST_SKIP() << kNoTileBackend;
  for_each_tile_backend([&] {
    std::mt19937 rng(7);
    std::normal_distribution<float> d;
    for (const MixCase& c : std::vector<MixCase>{{1, 1, 1}, {5, 3, 37}, {17, 33, 64}, {48, 48, 512}, {12, 24, 29}}) {
      const int64_t NA = c.O, NB = c.I, len = c.len, as = len + 1, bs = len + 7;
      const Values A = random_bf16(size_t(NA * as), rng), B = random_bf16(size_t(NB * bs), rng);
      std::vector<float> G(size_t(NA * NB));
      for (float& g : G) g = d(rng);
      const std::vector<float> G0 = G;
      amx::Scratch s;
      amx::gram(G.data(), A.bits.data(), as, NA, B.bits.data(), bs, NB, len, s);
      std::vector<double> want, scale;
      for (int64_t a = 0; a < NA; ++a)
        for (int64_t b = 0; b < NB; ++b) {
          double sum = G0[size_t(a * NB + b)], abs = std::abs(sum);
          for (int64_t j = 0; j < len; ++j) {
            const double p = A.x[size_t(a * as + j)] * B.x[size_t(b * bs + j)];
            sum += p, abs += std::abs(p);
          }
          want.push_back(sum), scale.push_back(abs);
        }
      EXPECT_LE(worst_ratio(G, want, scale, double(len + 1)), 1.0) << "NA=" << NA << " NB=" << NB << " len=" << len;
    }
  });
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
