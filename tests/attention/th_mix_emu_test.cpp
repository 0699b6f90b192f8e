// The heads-major path's mixings across few heads (th_mix_kernels.cuh) on the CPU emulator
// (rows_emulator.h), against float64 sums of the same values (T and P as the kernel takes them:
// P rounded to T's dtype, both widened).
//
// The mixing out[o] = sum_k P[k,o] T[k], g terms summed in fp32 (k in order, each product's
// rounding and each addition's at most 2^-24 relative): |out - out64| <= (g + 1) 2^-24 S, S =
// sum_k |P[k,o] T[k]|, in fp32; in bf16 the sum is rounded once more to bf16 (its unit roundoff
// 2^-8 of itself): <= 2^-8 |out64| + 1.01 (g + 1) 2^-24 S.
// The gradient dP[k,o] = sum over the examples and positions of A[k,p] B[o,p], in fp32: a thread's
// sum of up to 2 kMixGradSteps products, a warp's five butterfly steps, the block's 8 warps in
// order, then ATen's sum of the b x blocks partials: <= (2 kMixGradSteps + 5 + 8 + b blocks + 1)
// 2^-24 S, S = sum |A B|.
// Each for fp32 and bf16, heads from 1 to 12 in and out (g != g2 too), positions in pairs (N even,
// aligned) and one at a time (N odd, or T one element off its pair's alignment), several blocks an
// example and a partial last block; one launch each. The controls: P, or B, scaled by 1.01 fails
// each bound. Then what the kernels do not take gives an undefined result (cuBLAS's products run),
// and the heads-major path with them launches them 2 times forward and 3 + 2 backward. On a GPU,
// the same bounds through CUDA's launcher at T5-base's width (RowsMixOnCuda).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "attention/cuda/th_rows_args.h"
#include "attention/heads_gemm.h"
#include "attention/tiled.h"
#include "rows_emulator.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

using torch::Tensor;
using namespace rows_emu;

struct Shape {
  int64_t b, g, g2, n, m;
  bool off;   // T (or A) one element past its allocation's start
  bool pairs;  // whether the kernel takes positions in pairs
};
std::vector<Shape> shapes() {
  return {{2, 12, 12, 7, 10, false, true},     {3, 3, 7, 5, 9, false, false},  {1, 12, 1, 4, 6, true, false},
          {2, 1, 12, 40, 30, false, true},     {1, 5, 4, 61, 21, false, false}, {1, 12, 12, 90, 100, false, true},
          {2, 2, 3, 33, 300, false, true}};
}
std::string name(const Shape& s, torch::ScalarType t) {
  return std::string(t == torch::kBFloat16 ? "bf16" : "fp32") + " b" + std::to_string(s.b) + " g" +
         std::to_string(s.g) + " g2 " + std::to_string(s.g2) + " N " + std::to_string(s.n * s.m) +
         (s.off ? " off" : "");
}
// t as a contiguous tensor whose data starts one element past an allocation's start.
Tensor one_element_off(const Tensor& t) {
  Tensor off = torch::empty({t.numel() + 1}, t.options()).narrow(0, 1, t.numel()).view(t.sizes());
  return off.copy_(t);
}
bool within(const Tensor& got, const Tensor& want, const Tensor& bound) {
  return ((got.to(torch::kFloat64) - want).abs() <= bound).all().item<bool>();
}

// rows_mix(T, P) within the bound above of the float64 mixing (and P scaled by 1.01 not), any
// device; the count of pair launches where the launcher is the emulator's.
void check_mix(const Tensor& T, const Tensor& P, const cuda_th::RowsLauncher* kernels, bool pairs) {
  const auto dtype = T.scalar_type();
  const Tensor T64 = T.cpu().to(torch::kFloat64), P64 = P.cpu().to(dtype).to(torch::kFloat64);
  const Tensor want = torch::einsum("bknm,ko->bonm", {T64, P64});
  const Tensor S = torch::einsum("bknm,ko->bonm", {T64.abs(), P64.abs()});
  const double g = double(T.size(1) + 1) * std::ldexp(1.0, -24);
  const Tensor bound = dtype == torch::kFloat32 ? g * S : std::ldexp(1.0, -8) * want.abs() + 1.01 * g * S;
  const int before = g_mix_launches, pair_launches = g_mix_pairs_launches;
  const Tensor out = rows_mix(T, P, kernels);
  ASSERT_TRUE(out.defined());
  if (T.is_cpu()) {
    EXPECT_EQ(g_mix_launches - before, 1);
    EXPECT_EQ(g_mix_pairs_launches - pair_launches, pairs ? 1 : 0);
  }
  EXPECT_EQ(out.scalar_type(), dtype);
  EXPECT_EQ(out.sizes(), want.sizes());
  EXPECT_TRUE(within(out.cpu(), want, bound)) << (out.cpu().to(torch::kFloat64) - want).abs().max().item<double>();
  EXPECT_FALSE(within(rows_mix(T, P * 1.01, kernels).cpu(), want, bound));  // the control
}
// rows_mix_grad(A, B) within the bound above of the float64 sum (and B scaled by 1.01 not).
void check_mix_grad(const Tensor& A, const Tensor& B, const cuda_th::RowsLauncher* kernels, bool pairs) {
  const Tensor A64 = A.cpu().to(torch::kFloat64), B64 = B.cpu().to(torch::kFloat64);
  const Tensor want = torch::einsum("bknm,bonm->ko", {A64, B64});
  const Tensor S = torch::einsum("bknm,bonm->ko", {A64.abs(), B64.abs()});
  const int64_t N = A.size(2) * A.size(3), per_block = int64_t(cuda_th::kMixThreads) * (pairs ? 2 : 1) *
                                                          cuda_th::kMixGradSteps;
  const int64_t blocks = A.size(0) * ((N + per_block - 1) / per_block);
  const Tensor bound = double(2 * cuda_th::kMixGradSteps + 5 + 8 + blocks + 1) * std::ldexp(1.0, -24) * S;
  const int before = g_mix_grad_launches, pair_launches = g_mix_pairs_launches;
  const Tensor grad = rows_mix_grad(A, B, kernels);
  ASSERT_TRUE(grad.defined());
  if (A.is_cpu()) {
    EXPECT_EQ(g_mix_grad_launches - before, 1);
    EXPECT_EQ(g_mix_pairs_launches - pair_launches, pairs ? 1 : 0);
  }
  EXPECT_EQ(grad.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(within(grad.cpu(), want, bound)) << (grad.cpu().to(torch::kFloat64) - want).abs().max().item<double>();
  EXPECT_FALSE(within(rows_mix_grad(A, B * 1.01, kernels).cpu(), want, bound));  // the control
}

// body(shape, T) for each dtype and shape: T [b,g,n,m] of it, one element off where the shape says.
void for_each_shape(uint64_t seed, const std::function<void(const Shape&, const Tensor&)>& body) {
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16})
    for (const Shape& s : shapes()) {
      SCOPED_TRACE(name(s, dtype));
      torch::manual_seed(seed);
      const Tensor T = torch::randn({s.b, s.g, s.n, s.m}).to(dtype);
      body(s, s.off ? one_element_off(T) : T);
    }
}

TEST(RowsMix, WithinFp32SumsOfTheFloat64Mixing) {
  const cuda_th::RowsLauncher kernels = emulator(32);
  for_each_shape(5, [&](const Shape& s, const Tensor& T) { check_mix(T, torch::randn({s.g, s.g2}), &kernels, s.pairs); });
}

TEST(RowsMix, GradientWithinFp32SumsOfTheFloat64Sum) {
  const cuda_th::RowsLauncher kernels = emulator(32);
  for_each_shape(6, [&](const Shape& s, const Tensor& A) {
    check_mix_grad(A, torch::randn({s.b, s.g2, s.n, s.m}).to(A.scalar_type()), &kernels, s.pairs);
  });
}

TEST(RowsMix, WhatTheKernelsDoNotTakeIsLeftToCublas) {
  const cuda_th::RowsLauncher kernels = emulator(32);
  cuda_th::RowsLauncher without = kernels;
  without.mix_f32 = nullptr, without.mix_bf16 = nullptr;
  const Tensor T = torch::randn({2, 3, 4, 5}), P = torch::randn({3, 4}), B = torch::randn({2, 4, 4, 5});
  const int before = g_mix_launches + g_mix_grad_launches;
  EXPECT_TRUE(rows_mix(T, P, &kernels).defined());
  EXPECT_TRUE(rows_mix_grad(T, B, &kernels).defined());
  for (const cuda_th::RowsLauncher* k : std::vector<const cuda_th::RowsLauncher*>{nullptr, &without}) {
    EXPECT_FALSE(rows_mix(T, P, k).defined());
    EXPECT_FALSE(rows_mix_grad(T, B, k).defined());
  }
  EXPECT_FALSE(rows_mix(T.to(torch::kFloat64), P, &kernels).defined());
  EXPECT_FALSE(rows_mix(T.to(torch::kFloat16), P, &kernels).defined());
  EXPECT_FALSE(rows_mix(T.transpose(2, 3), P, &kernels).defined());
  EXPECT_FALSE(rows_mix(torch::randn({2, 3, 0, 5}), P, &kernels).defined());
  EXPECT_FALSE(rows_mix(torch::randn({2, 13, 4, 5}), torch::randn({13, 4}), &kernels).defined());
  EXPECT_FALSE(rows_mix(T, torch::randn({3, 13}), &kernels).defined());
  EXPECT_FALSE(rows_mix(torch::randn({65536, 1, 1, 1}), torch::randn({1, 1}), &kernels).defined());
  EXPECT_FALSE(rows_mix(T.view({2, 3, 20}), P, &kernels).defined());
  EXPECT_THROW(rows_mix(T, torch::randn({4, 4}), &kernels), c10::Error);
  EXPECT_FALSE(rows_mix_grad(T, B.to(torch::kBFloat16), &kernels).defined());
  EXPECT_FALSE(rows_mix_grad(T, B.transpose(2, 3), &kernels).defined());
  EXPECT_FALSE(rows_mix_grad(T, torch::randn({2, 4, 5, 4}), &kernels).defined());
  EXPECT_FALSE(rows_mix_grad(T, torch::randn({1, 4, 4, 5}), &kernels).defined());
  EXPECT_FALSE(rows_mix_grad(T, torch::randn({2, 13, 4, 5}), &kernels).defined());
  EXPECT_EQ(g_mix_launches + g_mix_grad_launches - before, 2);
}

// The heads-major path with the launcher mixes through the kernels where both mixings take at most
// 12 heads: forward L = P_l^T J and U = P_w^T W; backward U again, dW and dJ, and P_w's and P_l's
// gradients. At 13 heads, none (cuBLAS's products). Its numbers against float64 are
// Cores/AtenPath.*/gemm's (folded_test.cpp, through the emulated launcher).
TEST(RowsMix, TheHeadsMajorPathMixesThroughThem) {
  const cuda_th::RowsLauncher kernels = emulator(32);
  for (const int64_t h : {12, 13}) {
    SCOPED_TRACE(h);
    torch::manual_seed(7);
    auto leaf = [](Tensor t) { return t.requires_grad_(true); };
    const Tensor Q = leaf(torch::randn({2, 5, h, 4})), K = leaf(torch::randn({2, 6, h, 4})),
                 V = leaf(torch::randn({2, 6, h, 4})), P_l = leaf(torch::randn({h, h})),
                 P_w = leaf(torch::randn({h, h})), bias = torch::randn({1, h, 5, 6});
    const int mixes = g_mix_launches, grads = g_mix_grad_launches;
    const Tensor O = heads_gemm_attention_core(Q, K, V, P_l, P_w, bias, Tensor(), &kernels);
    EXPECT_EQ(g_mix_launches - mixes, h == 12 ? 2 : 0);
    O.sum().backward();
    EXPECT_EQ(g_mix_launches - mixes, h == 12 ? 5 : 0);
    EXPECT_EQ(g_mix_grad_launches - grads, h == 12 ? 2 : 0);
    EXPECT_TRUE(P_l.grad().defined() && P_w.grad().defined());
  }
}

// Through CUDA's launcher at T5-base's width: 12 heads into 12 and into 7, an example's positions
// 512 x 512 (in pairs, 32 blocks of the gradient) and 113 x 511 (one at a time), fp32 and bf16,
// within the bounds above.
TEST(RowsMixOnCuda, WithinFp32SumsAtT5BaseWidth) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const cuda_th::RowsLauncher* kernels = cuda_th_rows_launcher();
  if (!kernels) GTEST_SKIP() << "thx built without its CUDA kernels (THX_CUDA_KERNELS)";
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16})
    for (const int64_t g2 : {12, 7})
      for (const auto& [n, m] : {std::pair<int64_t, int64_t>{512, 512}, {113, 511}}) {
        SCOPED_TRACE(std::string(dtype == torch::kBFloat16 ? "bf16" : "fp32") + " into " + std::to_string(g2) +
                     " at " + std::to_string(n) + " x " + std::to_string(m));
        torch::manual_seed(8);
        const Tensor T = torch::randn({2, 12, n, m}, o).to(dtype);
        check_mix(T, torch::randn({12, g2}, o), kernels, n * m % 2 == 0);
        check_mix_grad(T, torch::randn({2, g2, n, m}, o).to(dtype), kernels, n * m % 2 == 0);
      }
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
