// The fused talking-heads CUDA kernels (src/attention/cuda/th_kernels.cuh), run on the CPU by the
// emulator of common/cuda_compat.h (each CUDA thread an OS thread, __syncthreads() a barrier, shared memory
// filled with NaN bytes before each block so that a read of what was not written shows), through
// the same host code a GPU runs (th_fused.cpp): O and the gradients of Q, K, V, P_l, P_w and the
// bias against the paper's section 4 core (einsums, autograd) in float64.
//
// Covered: talking-heads with h_k != h != h_v and both hybrids; no bias, T5's [1,h,n,m] bias and
// biases broadcast along other dims; padding and causal masks; n != m; tiles that divide n and m,
// do not, exceed them and are 1x1, and each kernel's own choice under a small shared memory;
// thread counts that do and do not divide the tiles; a row with no key.
// Tolerances: fp32 inputs, 2e-6 + 2e-5 x max|reference| (fp32 sums of a few dozen O(1)
// products, as the other attention tests). bf16 inputs (P and bias fp32): the kernel sums in
// fp32 and rounds each output once to bf16, which moves it by at most 2^-9 of itself; the bound
// 2^-8 x max|reference| leaves the fp32 sum order its share. The control: P_w moved by 1e-3
// fails the fp32 bound.
#include <gtest/gtest.h>

#include <tuple>

#include "attention/cuda/th_fused.h"
#include "attention/fused.h"
#include "bf16_bounds.h"
#include "common/determinism.h"
#include "core_problems.h"
#include "tc_bounds.h"
#include "test_util.h"
#include "th_emulator.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

using torch::Tensor;
using cuda_th::Args;
using th_emu::emulator;

using core::Case;
using core::Extra;
using core::Inputs;
using core::inputs;
using core::TcBounds;
using core::tensor_core_bounds;

const std::vector<Case> kCases = {{"talking_heads", 3, 5, 2, true, true},
                                  {"project_logits", 3, 5, 5, true, false},
                                  {"project_weights", 5, 5, 2, false, true}};

using core::expect_same;
using core::Result;

// `core` under autograd with Q, K, V in `dtype` (P_l, P_w and the bias in fp32 for bf16).
template <typename Core>
Result differentiate(const Inputs& in, torch::Dtype dtype, const Core& core) {
  return core::gradients(core::in_dtype(in, dtype), core);
}

Result reference(const Inputs& in) { return differentiate(in, torch::kFloat64, core::paper_output); }
Result fused(const Inputs& in, torch::Dtype dtype, const cuda_th::Launcher& l, ThTiles tiles) {
  return differentiate(in, dtype, [&](auto&... a) { return fused_th_attention_core(a..., l, tiles); });
}

std::string trace(const Case& c, Extra e, ThTiles t, int threads) {
  return c.name + " extra " + std::to_string(int(e)) + " tiles " + std::to_string(t.R) + "x" + std::to_string(t.C) +
         " threads " + std::to_string(threads);
}

TEST(FusedThEmulated, Fp32EqualsThePapersCoreForEveryVariantMaskAndTiling) {
  for (const Case& c : kCases)
    for (Extra e : {Extra::none, Extra::bias, Extra::padding, Extra::causal, Extra::bias_padding})
      // The last: each kernel's own tiles within 7000 bytes (forward 8x8, backward 8x4 here).
      for (auto [tiles, threads, limit] : {std::tuple{ThTiles{4, 2}, 32, 1 << 20}, {ThTiles{3, 2}, 7, 1 << 20},
                                           {ThTiles{8, 8}, 64, 1 << 20}, {ThTiles{1, 1}, 5, 1 << 20},
                                           {ThTiles{}, 32, 7000}}) {
        SCOPED_TRACE(trace(c, e, tiles, threads));
        torch::manual_seed(11);
        const Inputs in = inputs(c, e, torch::kFloat32);
        expect_same(fused(in, torch::kFloat32, emulator(threads, limit), tiles), reference(in), 2e-6, 2e-5);
      }
}

TEST(FusedThEmulated, BiasGradientSumsOverItsBroadcastDims) {
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{2, 1, 7, 5}, {5, 7, 5}, {1, 1, 1, 5}}) {
    SCOPED_TRACE(c10::str(c10::IntArrayRef(shape)));
    torch::manual_seed(5);
    Inputs in = inputs(kCases.front(), Extra::none, torch::kFloat32);
    in.bias = torch::randn(shape);
    const Result got = fused(in, torch::kFloat32, emulator(32), {4, 2});
    ASSERT_EQ(got.dbias.sizes(), in.bias.sizes());
    expect_same(got, reference(in), 2e-6, 2e-5);
  }
}

TEST(FusedThEmulated, Bf16WithinOneRoundingOfTheOutputs) {
  for (const Case& c : kCases)
    for (Extra e : {Extra::bias_padding, Extra::causal}) {
      SCOPED_TRACE(trace(c, e, {4, 2}, 32));
      torch::manual_seed(11);
      Inputs in = inputs(c, e, torch::kBFloat16);  // the reference sees the same bf16 values
      const Result got = fused(in, torch::kBFloat16, emulator(32), {4, 2});
      EXPECT_EQ(got.O.scalar_type(), torch::kBFloat16);
      EXPECT_EQ(got.dK.scalar_type(), torch::kBFloat16);
      EXPECT_EQ(got.dP_l.defined() ? got.dP_l.scalar_type() : torch::kFloat32, torch::kFloat32);
      expect_same(got, reference(in), 0, 1.0 / 256);
    }
}

TEST(FusedThEmulated, ARowWithEveryKeyMaskedIsZeroNotNaN) {
  torch::manual_seed(11);
  Inputs in = inputs(kCases.front(), Extra::padding, torch::kFloat32);
  in.mask = in.mask.clone();
  in.mask[0].fill_(false);  // example 0 sees no key at all
  const Result got = fused(in, torch::kFloat32, emulator(32), {4, 2});
  EXPECT_TRUE(torch::all(got.O[0] == 0).item<bool>());
  EXPECT_TRUE(torch::all(got.dQ[0] == 0).item<bool>());
  for (const Tensor& t : {got.dQ, got.dK, got.dV, got.dP_l, got.dP_w})
    EXPECT_TRUE(torch::all(torch::isfinite(t)).item<bool>());
  const Result r = reference(in);
  EXPECT_TRUE(close(got.O[1].to(torch::kFloat64), r.O[1], 2e-6, 2e-5));
}

// The control: the fp32 bound sees P_w moved by 1e-3.
TEST(FusedThEmulated, AMovedParameterIsCaught) {
  torch::manual_seed(11);
  const Inputs in = inputs(kCases.front(), Extra::bias, torch::kFloat32);
  Inputs moved = in;
  moved.P_w = in.P_w + 1e-3;
  const Result got = fused(moved, torch::kFloat32, emulator(32), {4, 2});
  EXPECT_FALSE(close(got.O.to(torch::kFloat64), reference(in).O, 2e-6, 2e-5));
}

// The backward adds dK, dV and dbias by atomics: under deterministic algorithms (train.deterministic)
// it is refused, in the line the training loop writes (attention_core routes around it,
// core_paths.cpp). The forward, which adds in a fixed order, runs; the control: without them the
// backward runs.
TEST(FusedThEmulated, DeterministicAlgorithmsRefuseTheBackward) {
  torch::manual_seed(11);
  const Inputs in = inputs(kCases.front(), Extra::bias, torch::kFloat32);
  EXPECT_NO_THROW(fused(in, torch::kFloat32, emulator(32), {4, 2}));
  const DeterminismScope on(true, torch::Device(torch::kCPU), "train.deterministic");
  std::string what;
  try {
    fused(in, torch::kFloat32, emulator(32), {4, 2});  // forward and backward
  } catch (const c10::Error& e) {
    what = e.what_without_backtrace();
  }
  EXPECT_EQ(nondeterministic_op(what, "train.deterministic"),
            "train.deterministic: true, but thx's fused talking-heads backward (dK, dV and dbias by atomics) has no "
            "deterministic implementation; set train.deterministic: false to train with it")
      << what;
}

// What the kernels do not take, each with its reason: the dispatch (fused.cpp) sends these to
// the tiled path.
TEST(FusedThEmulated, UncoveredProblemsAreNamed) {
  torch::manual_seed(11);
  const Inputs in = inputs(kCases.front(), Extra::bias_padding, torch::kFloat32);
  const cuda_th::Launcher l = emulator(32);
  auto why = [&](const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l, const Tensor& P_w,
                 const Tensor& bias, const Tensor& mask, const cuda_th::Launcher& launcher) {
    return fused_th_unsupported(Q, K, V, P_l, P_w, bias, mask, launcher);
  };
  EXPECT_EQ(why(in.Q, in.K, in.V, in.P_l, in.P_w, in.bias, in.mask, l), "");
  const Tensor Q64 = in.Q.to(torch::kFloat64), K64 = in.K.to(torch::kFloat64), V64 = in.V.to(torch::kFloat64);
  EXPECT_EQ(why(Q64, K64, V64, in.P_l, in.P_w, in.bias, in.mask, l), "dtype is not fp32 or bf16");
  EXPECT_EQ(why(in.Q, in.K.to(torch::kBFloat16), in.V, in.P_l, in.P_w, in.bias, in.mask, l),
            "Q, K and V differ in dtype");
  EXPECT_EQ(why(in.Q, in.K, in.V, {}, {}, in.bias, in.mask, l), "no head mixing (multi-head takes SDPA)");
  EXPECT_EQ(why(in.Q, in.K, in.V, in.P_l.t(), in.P_w, in.bias, in.mask, l), "P_l is not [h_k,h]");
  EXPECT_EQ(why(in.Q, in.K, in.V, in.P_l, in.P_w.t(), in.bias, in.mask, l), "P_w is not [h,h_v]");
  EXPECT_EQ(why(in.Q, in.K, in.V, in.P_l, {}, in.bias, in.mask, l), "without P_w, h_v must equal h");
  EXPECT_EQ(why(in.Q, in.K, in.V, in.P_l, in.P_w, torch::zeros({3, 7, 5}), in.mask, l),
            "bias does not broadcast to [b,h,n,m]");
  EXPECT_EQ(why(in.Q, in.K, in.V, in.P_l, in.P_w, in.bias, in.mask.to(torch::kFloat32), l),
            "mask is not bool broadcastable to [b,h,n,m]");
  EXPECT_EQ(why(in.Q, in.K, in.V, in.P_l, in.P_w, in.bias, in.mask, emulator(32, 64)),
            "one row and one key do not fit the shared memory");
  EXPECT_EQ(why(in.Q.narrow(1, 0, 0), in.K, in.V, in.P_l, in.P_w, {}, {}, l),
            "no example or no query row (an empty grid)");
}

// The tiles: the largest pair from the list that fits, for each kernel; at T5-base's d_model 768
// on an H100's 227 KB every head count has one for both, the forward's no smaller.
TEST(FusedThEmulated, TilesAreTheLargestThatFit) {
  for (bool backward : {false, true}) {
    const ThTiles t = fused_th_tiles(3, 5, 2, 4, 6, 1 << 20, backward);
    EXPECT_EQ(t.R, 64);
    EXPECT_EQ(t.C, 64);
    EXPECT_EQ(fused_th_tiles(3, 5, 2, 4, 6, 16, backward).R, 0);
  }
  for (int h : {6, 12, 24, 48}) {
    SCOPED_TRACE(h);
    const int d = 768 / h;
    const ThTiles fwd = fused_th_tiles(h, h, h, d, d, 227 * 1024, false);
    const ThTiles bwd = fused_th_tiles(h, h, h, d, d, 227 * 1024, true);
    EXPECT_GE(bwd.R, 4);
    EXPECT_GE(fwd.R * fwd.C, bwd.R * bwd.C);
    EXPECT_LE(cuda_th::kernel_layout({fwd.R, fwd.C, h, h, h, d, d}, {}, false).bytes, 227 * 1024);
    EXPECT_LE(cuda_th::kernel_layout({bwd.R, bwd.C, h, h, h, d, d}, {}, true).bytes, 227 * 1024);
    // bf16 on tensor cores, Q, K, V, dO and the operand-only planes kept in bf16: each kernel's
    // block holds 16 rows or more (a whole MMA tile's height), the forward 16 x 16 keys.
    const cuda_th::Widths tc{2, 2, 2, 256};
    const ThTiles fwd16 = fused_th_tiles(h, h, h, d, d, 227 * 1024, false, tc);
    const ThTiles bwd16 = fused_th_tiles(h, h, h, d, d, 227 * 1024, true, tc);
    EXPECT_GE(fwd16.R, 16);
    EXPECT_GE(fwd16.C, 16);
    EXPECT_GE(bwd16.R, 16);
    EXPECT_GE(bwd16.R * bwd16.C, 2 * bwd.R * bwd.C);
    if (h <= 24) {
      EXPECT_EQ(bwd16.C, 16);  // with dQ's sums in registers
    }
  }
  // At 12 heads the forward's 16 x 16 block, its output sums in registers, takes under half of
  // an H100 multiprocessor's 228 KB (each block also reserves 1 KB): two blocks share one.
  EXPECT_LE(cuda_th::kernel_layout({16, 16, 12, 12, 12, 64, 64}, {2, 2, 2, 256}, false).bytes, 113 * 1024);
  // The layout: every piece 16-byte aligned (word loads), bf16 pieces half the fp32 ones.
  const cuda_th::Layout f32 = cuda_th::kernel_layout({16, 8, 12, 12, 12, 64, 64}, {}, true);
  const cuda_th::Layout b16 = cuda_th::kernel_layout({16, 8, 12, 12, 12, 64, 64}, {2, 2, 2}, true);
  for (int64_t at : {b16.q, b16.dq, b16.dout, b16.k, b16.v, b16.j, b16.dj, b16.l, b16.dw, b16.u, b16.du, b16.m,
                     b16.s, b16.bytes})
    EXPECT_EQ(at % 16, 0);
  EXPECT_EQ(b16.dq - b16.q, (f32.dq - f32.q) / 2);  // Q
  EXPECT_EQ(b16.l - b16.dj, (f32.l - f32.dj) / 2);  // dJ
  EXPECT_EQ(b16.dw - b16.l, f32.dw - f32.l);        // L, W: fp32 always
}

// A forced launch (set_th_launch: `thx bench attention --th-tiles, --th-threads`): each kernel
// takes its own forced tiles and the threads, the results stay right, the last launch reports
// them, a tile passed to the core comes first, and forced tiles that do not fit are an error
// naming them (as fused_th_launch_unfit names them before a benchmark runs).
TEST(FusedThEmulated, AForcedLaunchIsUsedReportedAndChecked) {
  torch::manual_seed(11);
  const Inputs in = inputs(kCases.front(), Extra::bias_padding, torch::kFloat32);
  const Result want = reference(in);
  const cuda_th::Launcher l = emulator(32, 7000);
  ThLaunch forced;
  forced.forward = {4, 2}, forced.backward = {2, 3}, forced.threads = 40;
  set_th_launch(forced);
  expect_same(fused(in, torch::kFloat32, l, {}), want, 2e-6, 2e-5);
  ThLaunch last = fused_th_last_launch();
  EXPECT_EQ(last.forward.R * 10 + last.forward.C, 42);
  EXPECT_EQ(last.backward.R * 10 + last.backward.C, 23);
  EXPECT_EQ(last.threads, 40);
  expect_same(fused(in, torch::kFloat32, l, {1, 1}), want, 2e-6, 2e-5);
  last = fused_th_last_launch();
  EXPECT_EQ(last.forward.R + last.backward.C, 2);
  forced.backward = {64, 64};
  set_th_launch(forced);
  EXPECT_NE(fused_th_launch_unfit(forced, 4, 4, false, l).find("backward tiles 64x64 need"), std::string::npos);
  EXPECT_EQ(fused_th_launch_unfit(forced, 4, 4, false, emulator(32)), "");
  try {
    fused(in, torch::kFloat32, l, {});
    ADD_FAILURE() << "tiles that do not fit ran";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("the forced backward tiles 64x64 need"), std::string::npos) << e.what();
  }
  set_th_launch({});
}

// The backward's shared sums (th_args.h's KeySums, `thx bench attention --th-atomics`). Each
// element of dK, dV and dbias gets one addition from each block in every mode, and the emulator
// runs the blocks in turn: those are bit-equal across in-order, staggered and vector. Staggering
// changes the order in which a block sums dQ (and its dP_l, dP_w) over its key tiles: with four
// tiles in fp32, dQ's bits move (the control that the mode reaches the kernel) within fp32's
// bound. Vector delivers the same sums four at a time: bit-equal to staggered, and counted. On
// T5's [1,h,n,m] bias, 16 rows and keys of width 8 in tiles of 4x4 (4 blocks, 4 key tiles).
TEST(FusedThEmulated, BackwardSumsAgreeInEveryOrder) {
  const Case& c = kCases.front();
  torch::manual_seed(13);
  Inputs in;
  in.Q = torch::randn({2, 16, c.hk, 8}), in.K = torch::randn({2, 16, c.hk, 8});
  in.V = torch::randn({2, 16, c.hv, 8}), in.dO = torch::randn({2, 16, c.hv, 8});
  in.P_l = torch::randn({c.hk, c.h}) / 2, in.P_w = torch::randn({c.h, c.hv}) / 2;
  in.bias = torch::randn({1, c.h, 16, 16});
  using cuda_th::KeySums;
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 on tensor cores" : "fp32");
    std::vector<Result> r;
    for (KeySums sums : {KeySums::kInOrder, KeySums::kStaggered, KeySums::kVector}) {
      ThLaunch launch;
      launch.key_sums = sums;
      set_th_launch(launch);
      const int64_t before = emu::vector_reductions, copies = emu::vector_copies;
      r.push_back(fused(in, bf16 ? torch::kBFloat16 : torch::kFloat32, emulator(64, 1 << 20, bf16), {4, 4}));
      EXPECT_EQ(fused_th_last_launch().key_sums, sums);
      EXPECT_EQ(emu::vector_reductions > before, sums == KeySums::kVector) << int(sums);
      EXPECT_GT(emu::vector_copies, copies) << "rows of width 24 load 16 bytes at a time (load_rows)";
    }
    set_th_launch({});
    for (const Result& x : {r[0], r[1]})
      for (auto [a, b, name] : {std::tuple{x.dK, r[2].dK, "dK"}, {x.dV, r[2].dV, "dV"}, {x.dbias, r[2].dbias, "dbias"}})
        EXPECT_TRUE(torch::equal(a, b)) << name;
    for (auto [a, b, name] : {std::tuple{r[1].O, r[2].O, "O"}, {r[1].dQ, r[2].dQ, "dQ"},
                              {r[1].dP_l, r[2].dP_l, "dP_l"}, {r[1].dP_w, r[2].dP_w, "dP_w"}})
      EXPECT_TRUE(torch::equal(a, b)) << name;
    if (bf16) continue;
    EXPECT_FALSE(torch::equal(r[0].dQ, r[1].dQ));
    expect_same(r[0], reference(in), 2e-6, 2e-5);
    expect_same(r[2], reference(in), 2e-6, 2e-5);
  }
}

// Nothing reads memory that nothing wrote (test_util.h's PoisonedCpuMemory: every new CPU tensor
// NaN, as LibTorch 2.x fills new tensors under deterministic algorithms): every variant with a bias
// and padding and with a causal mask, fp32 and bf16 on FMAs, bf16 on tensor cores, two tilings.
// Each result is equal bit for bit to the same run's in memory as the heap gives it.
TEST(FusedThEmulated, ReadNoMemoryNothingWrote) {
  for (const Case& c : kCases)
    for (Extra e : {Extra::bias_padding, Extra::causal})
      for (auto [dtype, tc] : {std::pair{torch::kFloat32, false}, {torch::kBFloat16, false}, {torch::kBFloat16, true}})
        for (auto [tiles, threads] : {std::pair{ThTiles{4, 2}, 32}, {ThTiles{}, 64}}) {
          SCOPED_TRACE(trace(c, e, tiles, threads) + " " + c10::toString(dtype) + (tc ? " tensor cores" : ""));
          torch::manual_seed(11);
          const Inputs in = inputs(c, e, dtype);
          const cuda_th::Launcher l = emulator(threads, 1 << 20, tc);
          const torch::Dtype type = dtype;  // (a lambda takes no structured binding in C++17)
          const ThTiles t = tiles;
          EXPECT_TRUE(same_in_poisoned_memory([&] {
            std::vector<Tensor> r;
            for (const auto& [got, name] : fused(in, type, l, t).all()) r.push_back(got);
            return r;
          }));
        }
}

// ---- version 2: bf16 products on tensor cores ----------------------------------------------
// The kernels' bf16 algorithm with its error bound: tc_bounds.h.
::testing::AssertionResult within_tc_bounds(const Result& got, const TcBounds& B) {
  return core::within_tc_bounds({got.O, got.dQ, got.dK, got.dV, got.dP_l, got.dP_w, got.dbias}, B);
}

TEST(FusedThEmulated, Bf16OnTensorCoresWithinTheDerivedBound) {
  for (const Case& c : kCases)
    for (Extra e : {Extra::bias_padding, Extra::causal})
      for (auto [tiles, threads] : {std::pair{ThTiles{4, 2}, 32}, {ThTiles{}, 64}}) {
        SCOPED_TRACE(trace(c, e, tiles, threads));
        torch::manual_seed(11);
        const Inputs in = inputs(c, e, torch::kBFloat16);
        const Result got = fused(in, torch::kBFloat16, emulator(threads, 1 << 20, true), tiles);
        EXPECT_EQ(got.O.scalar_type(), torch::kBFloat16);
        EXPECT_TRUE(within_tc_bounds(got, tensor_core_bounds(in)));
      }
}

// Where the widths let ldmatrix read whole 16-row blocks of the operands, .trans where k is strided
// (V, K, dO and Q, the U and dJ planes in the key gradients, and at 16 heads the J and dU planes in
// the mixings: d 8, tiles 16 x 16) and plain where it is contiguous (the U and dJ planes in U·V and
// dJ·K, the planes in the mixings' gradients), the results hold the same derived bound (both
// kinds counted); n = m = 20 leaves partial blocks at the ends, read pair by pair.
TEST(FusedThEmulated, Bf16OnTensorCoresWithLdmatrixWithinTheDerivedBound) {
  torch::manual_seed(13);
  const int64_t b = 1, n = 20, m = 20, h = 16, d = 8;
  Inputs in;
  in.Q = (torch::randn({b, n, h, d}) / std::sqrt(double(d))).to(torch::kBFloat16);
  in.K = torch::randn({b, m, h, d}).to(torch::kBFloat16), in.V = torch::randn({b, m, h, d}).to(torch::kBFloat16);
  in.dO = torch::randn({b, n, h, d}).to(torch::kBFloat16);
  in.P_l = torch::randn({h, h}) / std::sqrt(double(h)), in.P_w = torch::randn({h, h}) / std::sqrt(double(h));
  in.bias = torch::randn({1, h, n, m});
  const int64_t plain = emu::matrix_loads, trans = emu::matrix_loads_trans;
  const Result got = fused(in, torch::kBFloat16, emulator(64, 1 << 20, true), {16, 16});
  EXPECT_TRUE(within_tc_bounds(got, tensor_core_bounds(in)));
  EXPECT_GT(emu::matrix_loads, plain);
  EXPECT_GT(emu::matrix_loads_trans, trans);
}

// The controls: the same bound rejects the result of P_w moved by 0.01 (its entries are about
// 0.45); the tensor-core path ran (its roundings differ from version 1's FMAs, and switching it
// off gives version 1's numbers, and a backward keeps its forward's choice); threads that are not
// whole warps take the FMAs.
TEST(FusedThEmulated, Bf16OnTensorCoresControls) {
  torch::manual_seed(11);
  const Inputs in = inputs(kCases.front(), Extra::bias, torch::kBFloat16);
  Inputs moved = in;
  moved.P_w = in.P_w + 0.01;
  const TcBounds B = tensor_core_bounds(in);
  const Result tc = fused(in, torch::kBFloat16, emulator(32, 1 << 20, true), {4, 2});
  EXPECT_TRUE(within_tc_bounds(tc, B));
  EXPECT_FALSE(within_tc_bounds(fused(moved, torch::kBFloat16, emulator(32, 1 << 20, true), {4, 2}), B));
  const Result v1 = fused(in, torch::kBFloat16, emulator(32), {4, 2});
  EXPECT_FALSE(torch::equal(tc.O, v1.O));
  set_th_tensor_cores(false);
  EXPECT_TRUE(torch::equal(fused(in, torch::kBFloat16, emulator(32, 1 << 20, true), {4, 2}).O, v1.O));
  set_th_tensor_cores(true);
  // The backward rounds as its forward did, even when the switch changed in between.
  const cuda_th::Launcher l = emulator(32, 1 << 20, true);
  const Result switched = differentiate(in, torch::kBFloat16, [&](auto&... a) {
    const Tensor O = fused_th_attention_core(a..., l, {4, 2});
    set_th_tensor_cores(false);
    return O;
  });
  set_th_tensor_cores(true);
  EXPECT_TRUE(torch::equal(switched.dQ, tc.dQ));
  EXPECT_TRUE(torch::equal(switched.dP_l, tc.dP_l));
  EXPECT_TRUE(torch::equal(fused(in, torch::kBFloat16, emulator(48, 1 << 20, true), {4, 2}).O,
                           fused(in, torch::kBFloat16, emulator(48), {4, 2}).O));
}

// The row sums kept in the warps' registers (the forward's O, the backward's dQ) equal those
// kept in shared memory, bit for bit. At 64-row tiles, 32 threads take 20 pairs of tiles a warp
// (shared memory) and 128 take 5 (registers): project_logits's O (h_v 5, d_v 6) and
// project_weights's dQ (h_k 5, d_k 4). Which warp sums a tile changes nothing else, so every
// result must be equal.
TEST(FusedThEmulated, SumsInRegistersEqualThoseInSharedMemory) {
  for (bool backward : {false, true}) {
    ASSERT_FALSE(cuda_th::sums_in_registers(32, 64, 5, 6, backward));
    ASSERT_TRUE(cuda_th::sums_in_registers(128, 64, 5, 6, backward));
  }
  for (const Case& c : {kCases[1], kCases[2]}) {
    SCOPED_TRACE(c.name);
    torch::manual_seed(11);
    const Inputs in = inputs(c, Extra::bias_padding, torch::kBFloat16);
    const Result shared = fused(in, torch::kBFloat16, emulator(32, 1 << 20, true), {64, 64});
    const Result registers = fused(in, torch::kBFloat16, emulator(128, 1 << 20, true), {64, 64});
    for (auto [x, y, name] : {std::tuple{shared.O, registers.O, "O"}, {shared.dQ, registers.dQ, "dQ"},
                              {shared.dK, registers.dK, "dK"}, {shared.dV, registers.dV, "dV"}})
      EXPECT_TRUE(torch::equal(x, y)) << name;
    EXPECT_TRUE(within_tc_bounds(registers, tensor_core_bounds(in)));
  }
  // And the layouts leave O and dQ out only where the registers hold them.
  const cuda_th::LayoutShape shape{64, 64, 5, 5, 5, 4, 6};
  for (bool backward : {false, true}) {
    const int64_t saved = cuda_th::kernel_layout(shape, {2, 2, 4, 32}, backward).bytes -
                          cuda_th::kernel_layout(shape, {2, 2, 4, 128}, backward).bytes;
    EXPECT_EQ(saved, backward ? 4 * 64 * 5 * 4 : 4 * 64 * 5 * 6) << backward;
  }
}

// On a GPU (where thx was built with its CUDA kernels): the same kernels through CUDA's launcher,
// against the paper's core in float64 on the CPU, with the tiles the launcher picks for the
// device's shared memory and with small forced ones; and at T5-base's width (d_model 768,
// 12 and 48 heads, 256 threads) over lengths no tile divides. Same bounds as above: bf16 on
// tensor cores (sm_80+) within the derived bound, and with them switched off (version 1) within
// one rounding. compute-sanitizer runs these (scripts/gpu_session.sh).
Result on_cuda(const Result& r) {
  auto cpu = [](const Tensor& t) { return t.defined() ? t.cpu() : t; };
  return {cpu(r.O), cpu(r.dQ), cpu(r.dK), cpu(r.dV), cpu(r.dP_l), cpu(r.dP_w), cpu(r.dbias)};
}
Inputs to_cuda(const Inputs& in) { return core::to_device(in, torch::kCUDA); }

TEST(FusedThOnCuda, EqualsThePapersCoreForEveryVariantMaskAndDtype) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const cuda_th::Launcher* l = cuda_th_launcher();
  if (!l) GTEST_SKIP() << "thx built without its CUDA kernels (THX_CUDA_KERNELS)";
  for (const Case& c : kCases)
    for (Extra e : {Extra::none, Extra::bias_padding, Extra::causal})
      for (ThTiles tiles : {ThTiles{}, ThTiles{4, 2}})
        for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
          SCOPED_TRACE(trace(c, e, tiles, l->threads) + (dtype == torch::kFloat32 ? " fp32" : " bf16"));
          torch::manual_seed(11);
          const Inputs in = inputs(c, e, dtype);
          const Result got = on_cuda(fused(to_cuda(in), dtype, *l, tiles));
          if (dtype == torch::kFloat32) {
            expect_same(got, reference(in), 2e-6, 2e-5);
            continue;
          }
          if (l->tensor_cores) EXPECT_TRUE(within_tc_bounds(got, tensor_core_bounds(in)));
          else expect_same(got, reference(in), 0, 1.0 / 256);
          set_th_tensor_cores(false);
          expect_same(on_cuda(fused(to_cuda(in), dtype, *l, tiles)), reference(in), 0, 1.0 / 256);
          set_th_tensor_cores(true);
        }
}

TEST(FusedThOnCuda, EqualsThePapersCoreAtT5BaseWidth) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const cuda_th::Launcher* l = cuda_th_launcher();
  if (!l) GTEST_SKIP() << "thx built without its CUDA kernels (THX_CUDA_KERNELS)";
  for (int64_t h : {12, 48}) {
    SCOPED_TRACE(h);
    torch::manual_seed(3);
    const int64_t b = 2, n = 77, m = 45, d = 768 / h;
    Inputs in;
    in.Q = torch::randn({b, n, h, d}) / std::sqrt(double(d)), in.K = torch::randn({b, m, h, d});
    in.V = torch::randn({b, m, h, d}), in.dO = torch::randn({b, n, h, d});
    in.P_l = torch::randn({h, h}) / std::sqrt(double(h)), in.P_w = torch::randn({h, h}) / std::sqrt(double(h));
    in.bias = torch::randn({1, h, n, m});
    in.mask = (torch::arange(m).view({1, m}) < torch::tensor({int64_t{30}, m}).view({b, 1})).view({b, 1, 1, m});
    expect_same(on_cuda(fused(to_cuda(in), torch::kFloat32, *l, {})), reference(in), 2e-6, 2e-5);
    // bf16 on tensor cores: the same problem's bf16 values, against their derived bound.
    Inputs bf = in;
    for (Tensor* t : {&bf.Q, &bf.K, &bf.V, &bf.dO}) *t = t->to(torch::kBFloat16);
    if (l->tensor_cores) {
      EXPECT_TRUE(within_tc_bounds(on_cuda(fused(to_cuda(bf), torch::kBFloat16, *l, {})), tensor_core_bounds(bf)));
    }
  }
}

// On the GPU too, the row sums in registers (256 threads: 12 of O's and dQ's tiles a warp) equal
// those in shared memory (64 threads: 48 a warp), bit for bit, at T5-base width with the same
// 16 x 16 tiles: O and dQ (dK and dV are summed across blocks by atomics, in no fixed order).
TEST(FusedThOnCuda, SumsInRegistersEqualThoseInSharedMemory) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const cuda_th::Launcher* l = cuda_th_launcher();
  if (!l) GTEST_SKIP() << "thx built without its CUDA kernels (THX_CUDA_KERNELS)";
  if (!l->tensor_cores) GTEST_SKIP() << "no bf16 tensor cores (sm_80+)";
  for (bool backward : {false, true}) {
    ASSERT_TRUE(cuda_th::sums_in_registers(l->threads, 16, 12, 64, backward));
    ASSERT_FALSE(cuda_th::sums_in_registers(64, 16, 12, 64, backward));
  }
  torch::manual_seed(5);
  const int64_t b = 2, n = 77, m = 45, h = 12, d = 64;
  Inputs in;
  in.Q = (torch::randn({b, n, h, d}) / 8).to(torch::kBFloat16), in.K = torch::randn({b, m, h, d}).to(torch::kBFloat16);
  in.V = torch::randn({b, m, h, d}).to(torch::kBFloat16), in.dO = torch::randn({b, n, h, d}).to(torch::kBFloat16);
  in.P_l = torch::randn({h, h}) / std::sqrt(double(h)), in.P_w = torch::randn({h, h}) / std::sqrt(double(h));
  const Result registers = on_cuda(fused(to_cuda(in), torch::kBFloat16, *l, {16, 16}));
  ThLaunch narrow;
  narrow.threads = 64;
  set_th_launch(narrow);
  const Result shared = on_cuda(fused(to_cuda(in), torch::kBFloat16, *l, {16, 16}));
  set_th_launch({});
  EXPECT_TRUE(torch::equal(registers.O, shared.O));
  EXPECT_TRUE(torch::equal(registers.dQ, shared.dQ));
  EXPECT_TRUE(within_tc_bounds(shared, tensor_core_bounds(in)));
}

// What the kernels do not take goes through attention_core's dispatch to the tiled path, with the
// right result: float64, and heads too wide for one row and one key in shared memory.
TEST(FusedThOnCuda, UncoveredProblemsTakeTheTiledPath) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const cuda_th::Launcher* l = cuda_th_launcher();
  if (!l) GTEST_SKIP() << "thx built without its CUDA kernels (THX_CUDA_KERNELS)";
  torch::manual_seed(11);
  Inputs wide;
  wide.Q = torch::randn({1, 3, 2, 20000}) / 100, wide.K = torch::randn({1, 4, 2, 20000}) / 100;
  wide.V = torch::randn({1, 4, 2, 8}), wide.dO = torch::randn({1, 3, 2, 8});
  wide.P_l = torch::randn({2, 2}), wide.P_w = torch::randn({2, 2});
  const Inputs f64 = inputs(kCases.front(), Extra::bias_padding, torch::kFloat32);
  for (auto [in, type, name] : {std::tuple{f64, torch::kFloat64, "float64"}, {wide, torch::kFloat32, "wide heads"}}) {
    SCOPED_TRACE(name);
    const torch::Dtype dtype = type;  // a lambda cannot capture a structured binding in C++17
    const Inputs dev = to_cuda(in);
    auto cast = [&](const Tensor& t) { return t.defined() ? t.to(dtype) : t; };
    EXPECT_NE(fused_th_unsupported(cast(dev.Q), cast(dev.K), cast(dev.V), cast(dev.P_l), cast(dev.P_w), cast(dev.bias),
                                   dev.mask, *l),
              "");
    const Result got = on_cuda(differentiate(dev, dtype, [](auto&... a) { return attention_core(a...); }));
    expect_same(got, reference(in), 2e-6, 2e-5);
  }
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
