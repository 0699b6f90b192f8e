// The flash forward and backward (src/attention/cuda/th_flash_kernels.cuh, th_flash_backward.cuh),
// run on the CPU by the emulator of common/cuda_compat.h through tiled_attention_core as a GPU runs
// them:
//  - every result (O and the gradients of Q, K, V, P_l, P_w and the bias) within the error bound
//    derived from its roundings (tc_bounds.h, J, U, dU, dL and dJ rounded to bf16 once as the
//    products' operands) against float64, for every variant with and without a bias, padding and
//    causal masks; the same with the row kernels' backward after the flash forward;
//  - every bucket of heads and widths they are built for, over two blocks of rows (the second
//    partial) and two tiles of keys (the last partial within a warp, or a warp without keys), and
//    for the backward blocks of keys (the last partial) and chunks of rows: every result within
//    its bound;
//  - the bias's gradient four keys at a time from an fp32 stage: every result equal byte for byte to
//    the scalar additions';
//  - no race: the same with the threads taking turns in either order or all at once (emu::Order);
//  - the controls: the bound rejects a moved P_w, a row with no key gives 0 and no NaN, the
//    problems it does not take (fp32, widths, shared memory, offsets) run the blocks of rows, and
//    flash_unsupported names each reason.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <type_traits>
#include <vector>

#include "attention/fused.h"
#include "attention/tiled.h"
#include "common/determinism.h"
#include "core_problems.h"
#include "rows_emulator.h"
#include "tc_bounds.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

using torch::Tensor;

using namespace core;  // (core_problems.h, tc_bounds.h)

using namespace rows_emu;

const std::vector<Case>& cases() { return core::variant_cases(); }

// f(inputs, d_v) for every variant and extra in bf16, d_k 16 and d_v 16 or 8 (seed 11 each).
void each_variant_case(const std::function<void(const Inputs&, int64_t)>& f) {
  for (const Case& c : cases())
    for (Extra e : {Extra::none, Extra::bias_padding, Extra::causal, Extra::padding})
      for (int64_t dv : {16, 8}) {
        SCOPED_TRACE(c.name + " extra " + std::to_string(int(e)) + " d_v " + std::to_string(dv));
        torch::manual_seed(11);
        f(core::inputs(c, e, torch::kBFloat16, 16, dv), dv);
      }
}

// Every variant and extra, d_k and d_v 16: one launch forward, two backward (passes D and G),
// every result within the bound; with d_v 8 (which the flash backward does not take) the row
// kernels' backward on tensor cores after the flash forward, within the same bound.
TEST(Flash, Bf16WithinTheDerivedBoundForEveryVariantAndMask) {
  const cuda_th::RowsLauncher kernels = emulator_flash(32);
  each_variant_case([&](const Inputs& in, int64_t dv) {
    const int flash = g_flash_launches, back = g_flash_back_launches, tc = g_tc_launches;
    const std::vector<Tensor> got = run(in, 0, &kernels);
    EXPECT_EQ(g_flash_launches - flash, 1);
    EXPECT_EQ(g_flash_back_launches - back, dv == 16 ? 2 : 0);
    EXPECT_EQ(g_tc_launches - tc, dv == 16 ? 0 : 1);  // the row kernels' backward
    EXPECT_EQ(got[0].scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(within_tc_bounds(got, tensor_core_bounds(in, true)));
  });
}

// b 2 with n query rows, m keys; h_k, h, h_v heads; d_k 16 (or as given); a [1,h,n,m] bias and
// a padding mask (example 1 sees 40 keys).
Inputs wide_inputs(int64_t hk, int64_t h, int64_t hv, int64_t dv, int64_t n, int64_t m, int64_t dk = 16) {
  const int64_t b = 2;
  Inputs in;
  auto bf = [](const Tensor& t) { return t.to(torch::kBFloat16); };
  in.Q = bf(torch::randn({b, n, hk, dk}) / std::sqrt(double(dk))), in.K = bf(torch::randn({b, m, hk, dk}));
  in.V = bf(torch::randn({b, m, hv, dv})), in.dO = bf(torch::randn({b, n, hv, dv}));
  in.P_l = torch::randn({hk, h}) / std::sqrt(double(hk)), in.P_w = torch::randn({h, hv}) / std::sqrt(double(h));
  in.bias = torch::randn({1, h, n, m});
  in.mask = (torch::arange(m).view({1, m}) < torch::tensor({m, int64_t{40}}).view({b, 1})).view({b, 1, 1, m});
  return in;
}

// Each bucket (H, D): 12 / 16 / 10 heads of 16 (16, 16), 20 / 32 / 24 of 32 (32, 32), 40 / 48 / 33
// of 16 (48, 16), 12 heads of 64 (16, 64) and 16 of 32 (16, 32); 20 rows (a block or chunk of 16
// and one of 4) and 70 or 100 keys (a tile of 64, then 6 keys in warp 0, or 16, 16 and 4 in warps
// 0-2 and none in warp 3; for the backward, blocks of 16 keys and a last one of 6 or 4). dQ's
// additions are vector reductions, one per four of its elements and block of keys, and at m = 100
// the bias's gradient's too, one per four of its elements and example.
using Widths = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>;  // h_k, h, h_v, d, m
const std::vector<Widths>& bucket_widths() {
  static const std::vector<Widths> w = {
      {12, 16, 10, 16, 70}, {20, 32, 24, 32, 100}, {40, 48, 33, 16, 70}, {12, 12, 12, 64, 100}, {16, 16, 16, 32, 70}};
  return w;
}

TEST(Flash, EveryBucketOverBlocksOfRowsAndKeys) {
  const cuda_th::RowsLauncher kernels = emulator_flash(32);
  for (auto [hk, h, hv, d, m] : bucket_widths()) {
    SCOPED_TRACE(std::to_string(h) + " heads, d " + std::to_string(d) + ", m " + std::to_string(m));
    torch::manual_seed(5);
    const Inputs in = wide_inputs(hk, h, hv, d, 20, m, d);
    const int flash = g_flash_launches, back = g_flash_back_launches;
    const int64_t reductions = emu::vector_reductions, copies = emu::async_copies;
    EXPECT_TRUE(within_tc_bounds(run(in, 0, &kernels), tensor_core_bounds(in, true)));
    EXPECT_EQ(g_flash_launches - flash, 1);
    EXPECT_EQ(g_flash_back_launches - back, 2);
    // dQ: one vector reduction of four floats per element and block of 16 keys, none of them lost;
    // where m is a multiple of four, the bias's gradient one per four of its elements and example.
    const int64_t bias = m % 4 == 0 ? in.dO.size(0) * in.bias.numel() / 4 : 0;
    EXPECT_EQ(emu::vector_reductions - reductions, (m + 15) / 16 * in.Q.numel() / 4 + bias);
    // Staged by cp.async (copy_keys, copy_values), 16 bytes at a time: the forward's keys of K below
    // m at every head, once a pass (two) and block of rows, and in the 48-head bucket its values, V^T's
    // rows of every head over the keys below m8, once a block; the backward's keys of K and V below m
    // at every head, once a pass (two) and chunk of rows, where its bucket stages them (width 32 at most).
    const int64_t row_blocks = in.Q.size(0) * ((in.Q.size(1) + 15) / 16), m8 = (m + 7) / 8 * 8;
    const int64_t values = cuda_th::flash_values_staged(int(h)) ? row_blocks * hv * d * m8 / 8 : 0;
    const int64_t staged_back = cuda_th::flash_back_keys_staged(int(d)) ? row_blocks * 2 * (hk + hv) * m * d / 8 : 0;
    EXPECT_EQ(emu::async_copies - copies, row_blocks * 2 * hk * m * d / 8 + values + staged_back);
  }
}

// The bias's gradient added four keys at a time from its fp32 stage (half a block's keys at a time)
// changes no number: every result equal byte for byte to the scalar additions' (the same problem
// with the device's shared memory one stage short), with one vector reduction per four elements and
// example more, at 16 and 48 heads (m = 36); and m = 34, whose keys are not in fours, keeps the
// scalar additions.
TEST(Flash, BiasGradientFourKeysAtATimeChangesNoNumber) {
  using Problem = std::tuple<int, int, int, int64_t>;  // h_k, h, h_v, m
  for (auto [hk, h, hv, m] : {Problem{12, 16, 10, 36}, Problem{12, 16, 10, 34}, Problem{40, 48, 33, 36}}) {
    SCOPED_TRACE(std::to_string(h) + " heads, m " + std::to_string(m));
    torch::manual_seed(9);
    const Inputs in = wide_inputs(hk, h, hv, 16, 20, m);
    const int H = cuda_th::flash_bucket(std::max({hk, h, hv}), 16).H;
    const int64_t forward = cuda_th::flash_layout(H, hk, 16, 16).bytes,
                  scalar = cuda_th::flash_back_layout(H, hk, 16, hv, 16, false, true).bytes,
                  staged = cuda_th::flash_back_layout(H, hk, 16, hv, 16, true, true).bytes;
    ASSERT_LT(std::max(forward, scalar), staged);
    const cuda_th::RowsLauncher with_stage = emulator_flash(32);
    const cuda_th::RowsLauncher without = emulator_flash(32, std::max(forward, scalar));
    int64_t reductions = emu::vector_reductions;
    const std::vector<Tensor> got = run(in, 0, &with_stage);
    const int64_t vectors = emu::vector_reductions - reductions;
    reductions = emu::vector_reductions;
    const int back = g_flash_back_launches;
    const std::vector<Tensor> want = run(in, 0, &without);
    EXPECT_EQ(g_flash_back_launches - back, 2);  // the flash backward, its bias's gradient scalar
    EXPECT_EQ(vectors - (emu::vector_reductions - reductions), m % 4 == 0 ? 2 * in.bias.numel() / 4 : 0);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(torch::equal(got[i], want[i])) << i;
  }
}

// The shared-memory reads and stores of each key, bank by bank (32 banks of 4 bytes; an 8-byte
// read is served a half warp at a time): the lanes' reads of their rows' LSE or D (row_pair, the
// forward's weights and both backward passes) each half warp on 32 distinct banks, and a warp's
// stores of one key's dL into the bias's stage on 32 distinct banks, at 16, 32 and 48 heads for
// every output tile. (Rows of H words, the layout before, fail the first: four and eight ways.)
TEST(Flash, RowPairReadsAndBiasStoresTakeEveryBankOnce) {
  auto read_banks = [](auto row_pair, int words, int nt, int half, int lanes0) {
    std::vector<float> rows(words);
    for (int i = 0; i < words; ++i) rows[i] = float(i);  // each word holds its own index
    std::set<int> banks;
    for (int l = lanes0; l < lanes0 + 16; ++l) {
      const ThxBytes8 v = row_pair(rows.data(), cuda_th::rows_tc::Lane{0, l / 4, l % 4, l}, nt, half);
      for (const uint32_t w : v.w) banks.insert(int(thx_bits_to_float(w)) % 32);
    }
    return banks.size();
  };
  auto check = [&](auto H, auto row_pair) {
    for (int nt = 0; nt < H / 8; ++nt)
      for (int half = 0; half < 2; ++half)
        for (int lanes0 : {0, 16})
          EXPECT_EQ(read_banks(row_pair, cuda_th::kFlashRows * (H + cuda_th::kFlashLsePad), nt, half, lanes0), 32u)
              << H << " heads, tile " << nt << ", half " << half << ", lanes " << lanes0;
    for (int key = 0; key < 8; ++key)
      for (int nt = 0; nt < H / 8; ++nt)
        for (int x = 0; x < 4; ++x) {
          std::set<int> banks;
          for (int l = 0; l < 32; ++l) {
            const cuda_th::rows_tc::Lane L{key, l / 4, l % 4, l};
            banks.insert(cuda_th::flash_bias_slot(cuda_th::rows_tc::head_at(L, nt, x), L.w, L.g + 8 * (x >> 1)) % 32);
          }
          EXPECT_EQ(banks.size(), 32u) << H << " heads, key " << key << ", tile " << nt << ", element " << x;
        }
  };
  check(std::integral_constant<int, 16>(), cuda_th::flash::row_pair<16>);
  check(std::integral_constant<int, 32>(), cuda_th::flash::row_pair<32>);
  check(std::integral_constant<int, 48>(), cuda_th::flash::row_pair<48>);
}

// The faults of a stage's layout at(head, key, row) (H heads of 16 keys and 16 rows; head h's 256
// places from h x head_stride), bank by bank: a place not its own or outside its head's; an 8-lane
// phase of ldmatrix (eight heads at one key, or eight keys at one head, 16 bytes each) not on 8
// distinct 16-byte groups of the 128-byte period; a warp's word stores of a head's keys g (+ 8) at
// rows 2t, or of a key's heads g (+ 8), not on 32 distinct banks.
int stage_faults(int (*at)(int, int, int), int H, int head_stride) {
  int bad = 0;
  std::set<int> places;
  for (int head = 0; head < H; ++head)
    for (int key = 0; key < 16; ++key)
      for (int row = 0; row < 16; ++row) {
        const int p = at(head, key, row), from = head * head_stride;
        places.insert(p);
        bad += p < from || p >= from + 256;
      }
  bad += int(places.size()) != H * 256;
  auto group = [](int element) { return element * 2 / 16 % 8; };
  auto bank = [](int element) { return element / 2 % 32; };
  for (int half = 0; half < 2; ++half)
    for (int fixed = 0; fixed < 16; ++fixed) {
      for (int h0 = 0; h0 < H; h0 += 8) {  // eight heads at key `fixed`
        std::set<int> g;
        for (int r = 0; r < 8; ++r) g.insert(group(at(h0 + r, fixed, 8 * half)));
        bad += g.size() != 8u;
      }
      for (int k0 = 0; k0 < 16; k0 += 8) {  // eight keys at head `fixed` (of the first 16)
        std::set<int> g;
        for (int r = 0; r < 8; ++r) g.insert(group(at(fixed, k0 + r, 8 * half)));
        bad += g.size() != 8u;
      }
    }
  for (int fixed = 0; fixed < 16; ++fixed)
    for (int nt = 0; nt < 2; ++nt)
      for (int plus = 0; plus < 16; plus += 8) {
        std::set<int> keys, heads;
        for (int l = 0; l < 32; ++l) {
          const int g = l / 4, row = 8 * nt + 2 * (l % 4);
          keys.insert(bank(at(fixed, g + plus, row)));
          heads.insert(bank(at(16 * (fixed % (H / 16)) + g + plus, fixed, row)));
        }
        bad += (keys.size() != 32u) + (heads.size() != 32u);
      }
  return bad;
}

// The forward's stage (flash_stage_at, no padding, heads 256 elements apart), by stage_faults: its
// ldmatrix reads (stage_logits, stage_rows_by_keys) and word stores (store_keys, store_heads).
TEST(Flash, ForwardStageTakesEveryBankOnce) {
  for (int H : {16, 32, 48}) EXPECT_EQ(stage_faults(cuda_th::flash_stage_at, H, 256), 0) << H << " heads";
}

// The backward's stages (flash_back_stage_at), by stage_faults: ldmatrix over eight heads at one key
// (stage_rows_a, staged_b, chunk_projections) and over eight keys at one head (keys_by_rows,
// rows_by_keys), word stores of keys (store_back_keys) and of heads (store_heads); and a warp's
// 2-byte stores of W and dL (chunk_weights: heads 2t + x % 2 at rows g + 8 (x / 2)) on no bank
// twice but in one word. The control: the layout before, unswizzled, has keys k and k + 4 on one bank.
TEST(Flash, BackwardStagesTakeEveryBankOnce) {
  using Layout = int (*)(int, int, int);
  auto faults = [](Layout at, int H) {
    int bad = stage_faults(at, H, cuda_th::kFlashBackHeadStride);
    for (int key = 0; key < 16; ++key)
      for (int nt = 0; nt < H / 8; ++nt)
        for (int x = 0; x < 4; ++x) {
          std::map<int, std::set<int>> words;  // bank -> the words the warp stores into it
          for (int l = 0; l < 32; ++l) {
            const cuda_th::rows_tc::Lane L{0, l / 4, l % 4, l};
            const int p = at(cuda_th::rows_tc::head_at(L, nt, x), key, L.g + 8 * (x >> 1));
            words[p / 2 % 32].insert(p / 2);
          }
          for (const auto& [b, w] : words) bad += w.size() != 1u;
        }
    return bad;
  };
  const Layout unswizzled = [](int head, int key, int row) {
    return head * cuda_th::kFlashBackHeadStride + key * cuda_th::kFlashBackKeyStride + row;
  };
  for (int H : {16, 32, 48}) {
    EXPECT_EQ(faults(cuda_th::flash_back_stage_at, H), 0) << H << " heads";
    EXPECT_GT(faults(unswizzled, H), 0) << H << " heads: the control";
  }
}

// The rows of Q and dO in shared memory (flash_row_stride, flash_row_at), bank by bank, at every
// width from 16 to 1,024: each row's places are its own, inside its stride; the lanes' 8-byte reads
// of their rows g (+ 8) at columns 16 i + 4 t (key_row_product) take each bank once a half warp; and
// ldmatrix's eight rows at one column (keys_by_rows) fall on eight 16-byte groups. The control: rows
// of width + 16 from their first place, the layout before, fail at T5's width (768: ldmatrix two
// ways) and at 48 (its 8-byte reads eight ways).
using RowLayout = std::function<int(int row, int col)>;
// The half warps whose 8-byte reads of rows g and g + 8 (of 16) at columns 16 i + 4 t (lane 4 g + t:
// key_row_product's operands) do not take each bank once, over a row's `width` columns.
int eight_byte_read_faults(const RowLayout& at, int width) {
  int bad = 0;
  for (int nt = 0; nt < 2; ++nt)
    for (int i = 0; i < width / 16; ++i)
      for (int lanes0 : {0, 16}) {
        std::set<int> banks;
        for (int l = lanes0; l < lanes0 + 16; ++l) {
          const int p = at(8 * nt + l / 4, 16 * i + 4 * (l % 4));
          banks.insert(p / 2 % 32), banks.insert((p / 2 + 1) % 32);
        }
        bad += banks.size() != 32u;
      }
  return bad;
}

TEST(Flash, QueryRowsTakeEveryBankOnce) {
  auto faults = [](const RowLayout& at, int width, int stride) {
    int bad = eight_byte_read_faults(at, width);
    for (int row = 0; row < cuda_th::kFlashRows; ++row) {
      std::set<int> places;
      for (int col = 0; col < width; ++col) places.insert(at(row, col));
      bad += int(places.size()) != width || *places.begin() < row * stride || *places.rbegin() >= (row + 1) * stride;
    }
    for (int half = 0; half < 2; ++half)
      for (int e = 0; e < width / 8; ++e) {
        std::set<int> groups;
        for (int r = 0; r < 8; ++r) groups.insert(at(8 * half + r, 8 * e) * 2 / 16 % 8);
        bad += groups.size() != 8u;
      }
    return bad;
  };
  for (int width = 16; width <= 1024; width += 16) {
    const int stride = cuda_th::flash_row_stride(width);
    EXPECT_EQ(faults([&](int row, int col) { return cuda_th::flash_row_at(row, col, stride); }, width, stride), 0)
        << "width " << width;
  }
  for (int width : {768, 48})
    EXPECT_GT(faults([&](int row, int col) { return row * (width + 16) + col; }, width, width + 16), 0)
        << "the control, width " << width;
}

// The forward's staged keys of K ([16 keys][flash_key_stride(d_k)], copy_keys), bank by bank, at
// every d_k from 16 to 1,024: the lanes' 8-byte reads of keys g and g + 8 (staged_key_row_product)
// take each bank once a half warp, and every key starts 16 bytes aligned (cp.async's copies). The
// control: keys d_k apart take two ways at d_k = 32 and four at 64.
TEST(Flash, StagedKeysTakeEveryBankOnce) {
  for (int d = 16; d <= 1024; d += 16) {
    const int stride = cuda_th::flash_key_stride(d);
    EXPECT_GE(stride, d);
    EXPECT_EQ(stride % 8, 0) << "d_k " << d;
    EXPECT_EQ(eight_byte_read_faults([&](int key, int col) { return key * stride + col; }, d), 0) << "d_k " << d;
  }
  for (int d : {32, 64}) {
    const int bad = eight_byte_read_faults([&](int key, int col) { return key * d + col; }, d);
    EXPECT_GT(bad, 0) << "the control, d_k " << d;
  }
}

// The controls: the bound rejects P_w moved by 0.03 (its entries are about 0.45; the bf16 bounds
// here are a few hundredths, so 0.01 can hide in them); a row with no key gives 0 and every result
// is finite; fp32, widths and shared memory it does not take run the blocks of rows (no launch).
TEST(Flash, Controls) {
  const cuda_th::RowsLauncher kernels = emulator_flash(32);
  torch::manual_seed(11);
  Inputs in = core::inputs(cases().front(), Extra::bias_padding, torch::kBFloat16, 16, 16), moved = in;
  moved.P_w = in.P_w + 0.03;
  const core::TcBounds B = tensor_core_bounds(in, true);
  EXPECT_TRUE(within_tc_bounds(run(in, 0, &kernels), B));
  EXPECT_FALSE(within_tc_bounds(run(moved, 0, &kernels), B));
  in.mask = in.mask.clone();
  in.mask[0].fill_(false);  // example 0 sees no key at all
  const std::vector<Tensor> none = run(in, 0, &kernels);
  EXPECT_TRUE(torch::all(none[0][0] == 0).item<bool>());
  for (const Tensor& t : none)
    if (t.defined()) EXPECT_TRUE(torch::all(torch::isfinite(t)).item<bool>());
  const int flash = g_flash_launches, back = g_flash_back_launches;
  run(core::inputs(cases().front(), Extra::bias_padding, torch::kFloat32, 16, 8), 0, &kernels);
  run(core::inputs(cases().front(), Extra::bias_padding, torch::kBFloat16, 4, 8), 0, &kernels);  // d_k 4
  run(core::inputs(cases().front(), Extra::bias_padding, torch::kBFloat16, 16, 6), 0, &kernels);  // d_v 6
  const cuda_th::RowsLauncher small = emulator_flash(32, 1024);  // too little shared memory
  run(core::inputs(cases().front(), Extra::bias_padding, torch::kBFloat16, 16, 8), 0, &small);
  EXPECT_EQ(g_flash_launches, flash);
  EXPECT_EQ(g_flash_back_launches, back);
}

// The kernels' threads taking turns in ascending and in descending order, and all at once
// (emu::Order: a thread that reads what another wrote without a barrier between, or overwrites
// what another has yet to read, sees different bytes in one of the first two): O equal bit for
// bit in all three (the forward adds in a fixed order), and every result within its bound in each
// (the backward's atomics add in the order the threads come). A variant with bias, padding and a
// causal mask over two blocks of rows and three of keys. (CTest runs this file's tests in the
// descending order too, all but its three exhaustive sweeps: cmake/gtest_suites.cmake.)
TEST(Flash, NoRaceWhenThreadsTakeTurnsInEitherOrder) {
  const cuda_th::RowsLauncher kernels = emulator_flash(32);
  torch::manual_seed(11);
  Inputs in = wide_inputs(12, 16, 10, 16, 20, 40);
  in.mask = in.mask & torch::ones({20, 40}, torch::kBool).tril().view({1, 1, 20, 40});
  const core::TcBounds B = tensor_core_bounds(in, true);
  std::vector<Tensor> O;
  for (emu::Order order : {emu::Order::ascending, emu::Order::descending, emu::Order::concurrent}) {
    SCOPED_TRACE(int(order));
    emu::ScopedOrder turns(order);
    const std::vector<Tensor> got = run(in, 0, &kernels);
    O.push_back(got[0]);
    EXPECT_TRUE(torch::equal(got[0], O[0]));
    EXPECT_TRUE(within_tc_bounds(got, B));
  }
}

// Under deterministic algorithms (train.deterministic) the flash backward, which adds by atomics,
// steps aside (tiled.cpp): after the flash forward the row kernels' backward runs, every result
// within the same bound and equal bit for bit whichever order the threads take turns in. The
// control: without them the same problem takes the flash backward (two passes).
TEST(Flash, DeterministicAlgorithmsTakeTheRowKernelsBackward) {
  const cuda_th::RowsLauncher kernels = emulator_flash(32);
  torch::manual_seed(11);
  const Inputs in = wide_inputs(12, 16, 10, 16, 20, 40);
  const core::TcBounds B = tensor_core_bounds(in, true);
  int back = g_flash_back_launches;
  run(in, 0, &kernels);
  EXPECT_EQ(g_flash_back_launches - back, 2);
  const DeterminismScope on(true, torch::Device(torch::kCPU), "train.deterministic");
  std::vector<Tensor> first;
  for (emu::Order order : {emu::Order::ascending, emu::Order::descending, emu::Order::concurrent}) {
    SCOPED_TRACE(int(order));
    emu::ScopedOrder turns(order);
    const int flash = g_flash_launches, tc = g_tc_launches;
    back = g_flash_back_launches;
    const std::vector<Tensor> got = run(in, 0, &kernels);
    EXPECT_EQ(g_flash_launches - flash, 1);
    EXPECT_EQ(g_flash_back_launches - back, 0);
    EXPECT_GE(g_tc_launches - tc, 1);  // the row kernels' backward
    EXPECT_TRUE(within_tc_bounds(got, B));
    if (first.empty()) first = got;
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i].defined()) EXPECT_TRUE(torch::equal(got[i], first[i])) << "result " << i;
  }
}

// Nothing reads memory that nothing wrote (test_util.h's PoisonedCpuMemory: every new CPU tensor
// NaN, as LibTorch 2.x fills new tensors under deterministic algorithms): every variant and extra,
// and two buckets over blocks of rows and keys (16 and 48 heads, a bias, a padding mask; m = 70,
// whose last blocks of keys are partial), forward and backward, and the flash forward with the row
// kernels' backward after it (train.deterministic's route, and that of d_v 8). Each result is
// equal bit for bit to the same run's in memory as the heap gives it.
TEST(Flash, ReadNoMemoryNothingWrote) {
  const cuda_th::RowsLauncher kernels = emulator_flash(32);
  const int flash = g_flash_launches, back = g_flash_back_launches;
  each_variant_case([&](const Inputs& in, int64_t) {
    EXPECT_TRUE(same_in_poisoned_memory([&] { return run(in, 0, &kernels); }));
  });
  for (size_t i : {0, 2}) {
    const auto [hk, h, hv, d, m] = bucket_widths()[i];
    SCOPED_TRACE(std::to_string(h) + " heads, d " + std::to_string(d) + ", m " + std::to_string(m));
    torch::manual_seed(5);
    const Inputs in = wide_inputs(hk, h, hv, d, 20, m, d);
    EXPECT_TRUE(same_in_poisoned_memory([&] { return run(in, 0, &kernels); }));
  }
  EXPECT_EQ(g_flash_launches - flash, 2 * (int(cases().size()) * 4 * 2 + 2));
  EXPECT_EQ(g_flash_back_launches - back, 2 * 2 * (int(cases().size()) * 4 + 2));
}

// What flash_unsupported names: each reason on its own, "" for T5-base's widths at n = m = 2048.
TEST(Flash, UnsupportedNamesWhy) {
  const int64_t none[4] = {0, 0, 0, 0}, t5[4] = {0, 2048 * 2048, 2048, 1}, big[4] = {0, 1 << 30, 1 << 20, 1};
  const int64_t h100 = 227 * 1024;
  for (auto [h, d] : {std::pair{12, 64}, {24, 32}, {48, 16}})
    EXPECT_EQ(cuda_th::flash_unsupported(h, h, h, d, d, 2048, 2048, t5, none, true, h100), "") << h;
  EXPECT_EQ(cuda_th::flash_unsupported(49, 49, 49, 16, 16, 64, 64, none, none, true, h100),
            "more than 48 heads, or heads and widths past the flash buckets");
  EXPECT_EQ(cuda_th::flash_unsupported(48, 48, 48, 16, 32, 64, 64, none, none, true, h100),
            "more than 48 heads, or heads and widths past the flash buckets");
  EXPECT_EQ(cuda_th::flash_unsupported(12, 12, 12, 8, 64, 64, 64, none, none, true, h100),
            "d_k not a multiple of 16 or d_v of 8");
  EXPECT_EQ(cuda_th::flash_unsupported(12, 12, 12, 64, 60, 64, 64, none, none, true, h100),
            "d_k not a multiple of 16 or d_v of 8");
  EXPECT_EQ(cuda_th::flash_unsupported(12, 12, 12, 64, 64, 64, 64, none, none, false, h100),
            "Q, K or O not 16-byte aligned");
  EXPECT_EQ(cuda_th::flash_unsupported(48, 48, 48, 16, 16, 64, 64, none, none, true, 128 * 1024),
            "more shared memory than the device allows");
  EXPECT_EQ(cuda_th::flash_unsupported(12, 12, 12, 64, 64, 16 * 65536, 64, none, none, true, h100),
            "more than 65,535 blocks of 16 rows");
  EXPECT_EQ(cuda_th::flash_unsupported(12, 12, 12, 64, 64, 64, 1 << 22, none, none, true, h100),
            "an example's Q, K, V or O past 32-bit offsets");
  EXPECT_EQ(cuda_th::flash_unsupported(12, 12, 12, 64, 64, 64, 64, none, big, true, h100),
            "bias or mask offsets past 32 bits");
  // The backward: T5-base's widths, then each of its own reasons.
  for (auto [h, d] : {std::pair{12, 64}, {24, 32}, {48, 16}})
    EXPECT_EQ(cuda_th::flash_back_unsupported(h, h, h, d, d, 32, 2048, 2048, t5, none, t5, true, h100), "") << h;
  EXPECT_EQ(cuda_th::flash_back_unsupported(12, 12, 12, 64, 8, 2, 64, 64, none, none, none, true, h100),
            "d_v not a multiple of 16");
  EXPECT_EQ(cuda_th::flash_back_unsupported(48, 48, 48, 16, 32, 2, 64, 64, none, none, none, true, h100),
            "more than 48 heads, or heads and widths past the flash buckets");  // d_v 32 with 48 heads
  EXPECT_EQ(cuda_th::flash_back_unsupported(48, 48, 48, 16, 16, 2, 64, 64, none, none, none, true, 164 * 1024),
            "more shared memory than the device allows");
  EXPECT_EQ(cuda_th::flash_back_unsupported(12, 12, 12, 64, 64, 65536, 64, 64, none, none, none, true, h100),
            "more than 65,535 examples");
  EXPECT_EQ(cuda_th::flash_back_unsupported(12, 12, 12, 64, 64, 2, 64, 64, none, none, big, true, h100),
            "bias gradient offsets past 32 bits");
}

// The forward's staged values (copy_values: rows of V^T kFlashValueStride elements apart), bank by
// bank: a warp's word reads of rows 8 e + g at keys 16 ks + 2 t (+ 8) (rows_by_staged_keys) take
// each bank once, and every row starts 16 bytes aligned (cp.async). The control: rows of the tile's
// 64 keys alone put every row g on one bank, eight ways.
TEST(Flash, StagedValuesTakeEveryBankOnce) {
  auto faults = [](int stride) {
    int bad = 0;
    for (int e = 0; e < 8; ++e)
      for (int ks = 0; ks < 4; ++ks)
        for (int second = 0; second < 2; ++second) {
          std::set<int> banks;
          for (int l = 0; l < 32; ++l)
            banks.insert(((8 * e + l / 4) * stride + 16 * ks + 2 * (l % 4) + 8 * second) / 2 % 32);
          bad += banks.size() != 32u;
        }
    return bad;
  };
  EXPECT_EQ(cuda_th::kFlashValueStride % 8, 0);
  EXPECT_EQ(faults(cuda_th::kFlashValueStride), 0);
  EXPECT_GT(faults(64), 0) << "the control";
}

// Shared memory at T5-base's widths (12 heads of 64, 24 of 32, 48 of 16), as an H100 or H200 holds
// it (228 KiB a multiprocessor, 1 KiB of it reserved a block; 227 KiB a block at most): the staged
// keys of K (forward) and of K and V (backward) cost no pass a block a multiprocessor: the forward
// two, two and one blocks, the backward's pass D at 12 heads two (its registers allow two; at 24
// and 48 heads they allow one); and pass G with the bias's fp32 stage still fits at 48 heads (its
// 8 KiB of staged keys leave 256 bytes), so T5's bias gradient keeps its vector reductions.
TEST(Flash, T5BaseWidthsKeepTheirBlocksAMultiprocessor) {
  const int64_t block_max = 227 * 1024;
  auto blocks = [](int64_t bytes) { return 228 * 1024 / (bytes + 1024); };
  const std::tuple<int, int, int64_t> widths[] = {{12, 64, 2}, {24, 32, 2}, {48, 16, 1}};  // h, d, forward's blocks
  for (auto [h, d, forward_blocks] : widths) {
    SCOPED_TRACE(std::to_string(h) + " heads of " + std::to_string(d));
    const cuda_th::FlashBucket B = cuda_th::flash_bucket(h, d);
    const bool keys = cuda_th::flash_back_keys_staged(B.DV);
    EXPECT_EQ(keys, d <= 32);
    EXPECT_EQ(blocks(cuda_th::flash_layout(B.H, h, d, B.DV).bytes), forward_blocks);
    const int64_t pass_d = cuda_th::flash_back_layout(B.H, h, d, h, d, false, keys).bytes;
    const int64_t pass_g = cuda_th::flash_back_layout(B.H, h, d, h, d, true, keys).bytes;
    EXPECT_LE(pass_g, block_max);
    if (h == 12) EXPECT_EQ(blocks(pass_d), 2);
  }
}

// On a GPU (where thx was built with its CUDA kernels): CUDA's launcher with the flash kernels.
// Every variant and mask within the derived bound, with the flash backward (d_v 16) and with the
// row kernels' backward after the flash forward (d_v 8), as on the emulator; at T5-base's widths (12 heads of 64, 48 of
// 16) over 300 rows and keys (a partial block of rows and tile of keys), with T5's bias and a
// padding mask, every result within it; attention_core takes it under `--th-path flash`, equal
// bit for bit, and its O differs from the row kernels' forward (the flash kernel ran).
// compute-sanitizer runs the first (scripts/gpu_session.sh).
TEST(FlashOnCuda, Bf16WithinTheDerivedBound) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const cuda_th::RowsLauncher* flash = cuda_th_rows_launcher(true, true);
  if (!flash) GTEST_SKIP() << "thx built without its CUDA kernels (THX_CUDA_KERNELS)";
  for (const Case& c : cases())
    for (Extra e : {Extra::none, Extra::bias_padding, Extra::causal, Extra::padding})
      for (int64_t dv : {16, 8}) {  // the flash backward; the row kernels' backward after the flash forward
        SCOPED_TRACE(c.name + " extra " + std::to_string(int(e)) + " d_v " + std::to_string(dv));
        torch::manual_seed(11);
        const Inputs in = core::inputs(c, e, torch::kBFloat16, 16, dv);
        EXPECT_TRUE(within_tc_bounds(on_cpu(run(to_cuda(in), 0, flash)), tensor_core_bounds(in, true)));
      }
}

TEST(FlashOnCuda, WithinTheBoundAtT5BaseWidth) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const cuda_th::RowsLauncher *flash = cuda_th_rows_launcher(true, true), *rows = cuda_th_rows_launcher(true);
  if (!flash) GTEST_SKIP() << "thx built without its CUDA kernels (THX_CUDA_KERNELS)";
  for (int64_t h : {12, 48}) {
    SCOPED_TRACE(h);
    torch::manual_seed(3);
    const Inputs in = wide_inputs(h, h, h, 768 / h, 300, 300, 768 / h);
    EXPECT_TRUE(within_tc_bounds(on_cpu(run(to_cuda(in), 0, flash)), tensor_core_bounds(in, true)));
    const Inputs g = to_cuda(in);
    const Tensor O = tiled_attention_core(g.Q, g.K, g.V, g.P_l, g.P_w, g.bias, g.mask, 0, flash);
    set_th_path("flash", false);
    const Tensor core = attention_core(g.Q, g.K, g.V, g.P_l, g.P_w, g.bias, g.mask);
    set_th_path("tiled", false);
    EXPECT_TRUE(torch::equal(core, O));
    EXPECT_FALSE(torch::equal(O, tiled_attention_core(g.Q, g.K, g.V, g.P_l, g.P_w, g.bias, g.mask, 0, rows)));
  }
}

// The emulator's bucket test on a GPU: every bucket over blocks of rows and keys (the last
// partial), every result within its bound.
TEST(FlashOnCuda, EveryBucketOverBlocksOfRowsAndKeys) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const cuda_th::RowsLauncher* flash = cuda_th_rows_launcher(true, true);
  if (!flash) GTEST_SKIP() << "thx built without its CUDA kernels (THX_CUDA_KERNELS)";
  for (auto [hk, h, hv, d, m] : bucket_widths()) {
    SCOPED_TRACE(std::to_string(h) + " heads, d " + std::to_string(d) + ", m " + std::to_string(m));
    torch::manual_seed(5);
    const Inputs in = wide_inputs(hk, h, hv, d, 20, m, d);
    EXPECT_TRUE(within_tc_bounds(on_cpu(run(to_cuda(in), 0, flash)), tensor_core_bounds(in, true)));
  }
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
