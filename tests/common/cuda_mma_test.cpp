// common/cuda_mma.h's block_gemm, run by the emulator of common/cuda_compat.h: both paths against
// the product they promise, exactly.
//  - Tensor cores: each output equals the fp32 sum, in k order, of the bf16-rounded operands'
//    products (what the emulated mma.sync computes), over shapes that are not multiples of the
//    16x8x16 tile, with strided and batched operands and 1, 2 and 3 warps. This proves the
//    operand packing and the lane layout agree with each other; whether they agree with the
//    GPU's is for FusedThOnCuda.* on a GPU.
//  - FMAs: each output the fp32 sum in k order of the unrounded products.
//  - Every output is written exactly once (a count per element), also where block_gemm_quads
//    delivers them four adjacent columns at a time.
//  - bf16 operands, read by ldmatrix (plain where k is contiguous, .trans where it is strided)
//    or as words of two, give their fp32 values' products.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "attention/cuda/th_kernels.cuh"
#include "common/cuda_mma.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

using cuda_mma::Operand;

float bf16_round(float x) { return thx_to_float(thx_from_float<thx_bf16>(x)); }

struct Problem {
  int batch, M, N, K;
};

// quads: through block_gemm_quads, which must deliver the same outputs, on tensor cores four
// adjacent columns at a time (n a multiple of 4, count 4 but at N's edge), else one at a time.
// first_warp: block_gemm's; on tensor cores the first tile (output (0, 0, 0)) must be that warp's.
void check(const Problem& p, bool tensor_cores, int threads, bool quads = false, int first_warp = 0) {
  SCOPED_TRACE(testing::Message() << p.batch << "x" << p.M << "x" << p.N << "x" << p.K << " tensor cores "
                                  << tensor_cores << " threads " << threads << " quads " << quads << " first warp "
                                  << first_warp);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  // A_g (m, k) at a[g * M * K * 2 + k * M * 2 + m * 2] (column-major, every other element); B_g (k, n)
  // at b[g * (K * N + 3) + k * N + n] (row-major, batches 3 apart).
  std::vector<float> a(size_t(p.batch) * p.M * p.K * 2), b(size_t(p.batch) * (p.K * p.N + 3));
  for (float& x : a) x = normal(rng);
  for (float& x : b) x = normal(rng);
  const Operand A{a.data(), int64_t(p.M) * p.K * 2, 2, int64_t(p.M) * 2};
  const Operand B{b.data(), int64_t(p.K) * p.N + 3, p.N, 1};
  std::vector<float> out(size_t(p.batch) * p.M * p.N, -1.f);
  std::vector<int> writes(out.size(), 0), writer(out.size(), -1);
  std::atomic<int> bad_quads{0};
  emu::launch({1, 1, 1}, threads, 0, [&] {
    auto one = [&](int g, int m, int n, float v) {
      const size_t at = (size_t(g) * p.M + m) * p.N + n;
      out[at] = v, ++writes[at], writer[at] = int(threadIdx.x) / 32;  // one thread per element: no race unless it fails
    };
    if (!quads) return cuda_mma::block_gemm(tensor_cores, p.batch, A, B, p.M, p.N, p.K, one, first_warp);
    cuda_mma::block_gemm_quads(tensor_cores, p.batch, A, B, p.M, p.N, p.K,
                               [&](int g, int m, int n, const float* v, int count) {
                                 const int want = tensor_cores ? std::min(4, p.N - n) : 1;
                                 if (count != want || (tensor_cores && n % 4 != 0)) ++bad_quads;
                                 for (int i = 0; i < count; ++i) one(g, m, n + i, v[i]);
                               });
  });
  EXPECT_EQ(bad_quads, 0);
  if (tensor_cores && !quads) EXPECT_EQ(writer[0], first_warp % (threads / 32));
  int wrong = 0;
  for (int g = 0; g < p.batch; ++g)
    for (int m = 0; m < p.M; ++m)
      for (int n = 0; n < p.N; ++n) {
        float want = 0.f;
        for (int k = 0; k < p.K; ++k) {
          const float x = A.at(g * A.gs + m * A.rs + k * A.cs), y = B.at(g * B.gs + k * B.rs + n * B.cs);
          want += tensor_cores ? bf16_round(x) * bf16_round(y) : x * y;
        }
        const size_t at = (size_t(g) * p.M + m) * p.N + n;
        if (writes[at] != 1 || out[at] != want) ++wrong;
        if (wrong == 1 && (writes[at] != 1 || out[at] != want))
          ADD_FAILURE() << "(" << g << ", " << m << ", " << n << "): " << out[at] << " written " << writes[at]
                        << " times, want " << want;
      }
  EXPECT_EQ(wrong, 0);
}

// {1, 12, 12, 256} is a mixing gradient's shape at 12 heads: one pair of tiles, which with two
// or more warps are taken one tile a warp (each_tile).
TEST(CudaMma, TensorCoreProductsAreTheRoundedOperandsSumsInKOrder) {
  for (const Problem& p : {Problem{1, 16, 8, 16}, {2, 37, 21, 35}, {3, 5, 3, 2}, {1, 16, 64, 48}, {1, 12, 12, 256}})
    for (int threads : {32, 64, 96}) check(p, true, threads);
}

// A product may start at another warp than 0 (th_kernels.cuh: dP_l's tiles after dP_w's), with
// the same numbers, each output once, in pairs and one tile a warp.
TEST(CudaMma, AProductMayStartAtAnyWarp) {
  for (const Problem& p : {Problem{1, 12, 12, 256}, {2, 37, 21, 35}, {1, 16, 64, 48}})
    for (int first : {1, 2, 5}) check(p, true, 96, false, first);
}

TEST(CudaMma, FmaProductsAreTheFp32SumsInKOrder) {
  for (const Problem& p : {Problem{2, 37, 21, 35}, {3, 5, 3, 2}})
    for (int threads : {7, 64}) check(p, false, threads);
}

// block_gemm_quads: the same outputs, each once, four columns at a time on tensor cores (its
// lanes swap halves of their tiles; a wrong swap puts a value in another row or column).
TEST(CudaMma, QuadsDeliverEveryOutputOnceFourColumnsAtATime) {
  for (const Problem& p : {Problem{1, 16, 8, 16}, {2, 37, 21, 35}, {3, 5, 3, 2}, {1, 16, 64, 48}, {1, 12, 12, 256}})
    for (int threads : {32, 96}) check(p, true, threads, true);
  check({2, 37, 21, 35}, false, 64, true);
}

// Normal draws as bf16 (x16) and the same values as fp32 (x32).
void draw(std::mt19937& rng, std::vector<thx_bf16>& x16, std::vector<float>& x32) {
  std::normal_distribution<float> normal;
  for (size_t i = 0; i < x16.size(); ++i) x16[i] = thx_from_float<thx_bf16>(normal(rng)), x32[i] = thx_to_float(x16[i]);
}

// product(a's copy, b's copy) in one block of `threads`, the two operands copied first into its
// shared memory (where ldmatrix reads), b's at the next multiple of 16 bytes.
template <class EA, class EB, class Product>
void with_shared_operands(const std::vector<EA>& a, const std::vector<EB>& b, int threads, Product product) {
  const size_t a_bytes = a.size() * sizeof(EA), b_at = (a_bytes + 15) / 16 * 16;
  emu::launch({1, 1, 1}, threads, b_at + b.size() * sizeof(EB), [&] {
    unsigned char* shared = emu::shared_memory();
    if (threadIdx.x == 0)
      std::memcpy(shared, a.data(), a_bytes), std::memcpy(shared + b_at, b.data(), b.size() * sizeof(EB));
    __syncthreads();
    product(reinterpret_cast<const EA*>(shared), reinterpret_cast<const EB*>(shared + b_at));
  });
}

// bf16 operands whose k is contiguous (as Q and K are read in Q·K, U in U·V, dO and V in dU):
// whole 16x16 and 16x8 blocks come by plain ldmatrix where every row of 8 is 16-byte aligned,
// the rest as aligned words of two, else one by one; either way the products equal those of the
// same values given as fp32, bit for bit. Covered: K, M and N with partial blocks at their ends
// and strides that allow ldmatrix; K and strides even but not multiples of 8 (words); K odd, a
// row stride odd, and a base address not 4-byte aligned (one element at a time: a word load
// there would fault on a GPU and aborts in the emulator). The emulator counts the ldmatrix loads.
TEST(CudaMma, Bf16OperandsEqualTheirFp32Values) {
  struct Layout {
    int M, N, K, a_rs, b_cs;
    size_t a_offset;
    bool ldmatrix;  // some block of A or B qualifies
  };
  for (const Layout& l : {Layout{37, 21, 40, 40, 48, 0, true}, {37, 21, 34, 34, 34, 0, false},
                          {37, 21, 35, 35, 36, 0, false}, {20, 9, 16, 17, 16, 0, true}, {20, 9, 16, 16, 16, 1, true},
                          {20, 9, 16, 18, 18, 0, false}}) {
    SCOPED_TRACE(testing::Message() << l.M << "x" << l.N << "x" << l.K << " rs " << l.a_rs << " cs " << l.b_cs
                                    << " offset " << l.a_offset);
    std::mt19937 rng(3);
    // A (m, k) at a[offset + m * a_rs + k], B (k, n) at b[n * b_cs + k]: k contiguous in both.
    std::vector<thx_bf16> a16(l.a_offset + size_t(l.M) * l.a_rs), b16(size_t(l.N) * l.b_cs);
    std::vector<float> a32(a16.size()), b32(b16.size());
    draw(rng, a16, a32), draw(rng, b16, b32);
    auto run = [&](const auto& a, const auto& b) {
      std::vector<float> out(size_t(l.M) * l.N);
      with_shared_operands(a, b, 64, [&](const auto* sa, const auto* sb) {
        const Operand A{sa + l.a_offset, 0, l.a_rs, 1}, B{sb, 0, 1, l.b_cs};
        cuda_mma::block_gemm(true, 1, A, B, l.M, l.N, l.K, [&](int, int m, int n, float v) { out[m * l.N + n] = v; });
      });
      return out;
    };
    const int64_t before = emu::matrix_loads;
    const std::vector<float> words = run(a16, b16);
    EXPECT_EQ(emu::matrix_loads > before, l.ldmatrix);
    EXPECT_EQ(words, run(a32, b32));
  }
}

// bf16 operands whose k is strided (A with m contiguous, B with n contiguous, as V, K, dO, Q and
// the transposed planes are read): whole 16x16 and 16x8 blocks come by ldmatrix .trans where
// every row of 8 is 16-byte aligned, the rest pair by pair; the products equal those of the same
// values given as fp32, bit for bit. Covered: M, N, K with partial blocks at their ends, batches,
// strides that allow ldmatrix and strides and a base that do not.
TEST(CudaMma, StridedBf16OperandsEqualTheirFp32Values) {
  struct Layout {
    int batch, M, N, K, a_cs, b_rs;
    size_t offset;
  };
  for (const Layout& l : {Layout{2, 37, 21, 40, 40, 24, 0}, {1, 32, 16, 32, 32, 16, 0}, {1, 32, 16, 32, 36, 20, 0},
                          {1, 32, 16, 32, 32, 16, 4}}) {
    SCOPED_TRACE(testing::Message() << l.batch << "x" << l.M << "x" << l.N << "x" << l.K << " strides " << l.a_cs
                                    << ", " << l.b_rs << " offset " << l.offset);
    std::mt19937 rng(5);
    // A_g (m, k) at a[offset + g * K * a_cs + k * a_cs + m], B_g (k, n) at b[offset + g * K * b_rs + k * b_rs + n].
    const int64_t a_gs = int64_t(l.K) * l.a_cs, b_gs = int64_t(l.K) * l.b_rs;
    std::vector<thx_bf16> a16(l.offset + l.batch * a_gs), b16(l.offset + l.batch * b_gs);
    std::vector<float> a32(a16.size()), b32(b16.size());
    draw(rng, a16, a32), draw(rng, b16, b32);
    auto run = [&](const auto& a, const auto& b) {
      std::vector<float> out(size_t(l.batch) * l.M * l.N);
      with_shared_operands(a, b, 96, [&](const auto* sa, const auto* sb) {
        const Operand A{sa + l.offset, a_gs, 1, l.a_cs}, B{sb + l.offset, b_gs, l.b_rs, 1};
        cuda_mma::block_gemm(true, l.batch, A, B, l.M, l.N, l.K,
                             [&](int g, int m, int n, float v) { out[(size_t(g) * l.M + m) * l.N + n] = v; });
      });
      return out;
    };
    const int64_t before = emu::matrix_loads_trans;
    const std::vector<float> matrices = run(a16, b16);
    EXPECT_EQ(emu::matrix_loads_trans > before, l.a_cs % 8 == 0 && l.offset % 8 == 0);  // (b_rs alike here)
    EXPECT_EQ(matrices, run(a32, b32));
  }
}

// The control: rounding is what the tensor-core path does; the unrounded sums differ.
TEST(CudaMma, TensorCoresRoundTheirOperands) {
  std::vector<float> a(16 * 16, 1.f + 1.f / 512), b(16 * 8, 1.f);  // 1 + 2^-9 rounds to 1 in bf16
  std::vector<float> out(16 * 8);
  emu::launch({1, 1, 1}, 32, 0, [&] {
    cuda_mma::block_gemm(true, 1, {a.data(), 0, 16, 1}, {b.data(), 0, 8, 1}, 16, 8, 16,
                         [&](int, int m, int n, float v) { out[m * 8 + n] = v; });
  });
  for (float v : out) EXPECT_EQ(v, 16.f);
}

// th_args.h's Divider (x / d by a multiply-high, an add and a shift), against integer division:
// every divisor to 300 over the first 70,000 numerators and at the top of the range, and the
// powers of two to 2^30. A wrong multiplier or shift (one off) fails at the first of these.
TEST(CudaMma, DividerEqualsIntegerDivision) {
  std::vector<int> divisors;
  for (int d = 1; d <= 300; ++d) divisors.push_back(d);
  for (int s = 9; s <= 30; ++s) divisors.push_back(1 << s), divisors.push_back((1 << s) - 1);
  for (const int d : divisors) {
    const cuda_th::Divider v = cuda_th::make_divider(d);
    int wrong = 0;
    for (int x = 0; x < 70000; ++x) wrong += cuda_th::divide(v, x) != x / d;
    for (int x = 0x7fffffff; x > 0x7fffffff - 70000; --x) wrong += cuda_th::divide(v, x) != x / d;
    ASSERT_EQ(wrong, 0) << "divisor " << d;
  }
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
