// Version 2.4's padded heads (cuda_th::Widths::pad, th_fused.h's fused_th_pad_heads): where the
// bf16 planes J and dU and the copies of P_l and P_w hold their heads up to a multiple of 16, the
// extra ones zero, the mixings' products read whole blocks of them by ldmatrix where they read
// pairs before, and no number changes: the zeros stand where the pair loads put zeros. Checked
// on the emulator (common/cuda_compat.h), outputs and every gradient equal bit for bit with
// padding on and off, at 12 and 24 heads and at h_k, h, h_v = 3, 5, 2, with T5's bias; and when
// padding is taken: only where it costs no tile and no block a multiprocessor.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "attention/cuda/th_fused.h"
#include "test_util.h"
#include "th_emulator.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

using torch::Tensor;

// O and the gradients of Q, K, V, P_l, P_w and the bias, bf16 on tensor cores (tiles 16 x 16, two
// warps), and the ldmatrix loads (plain and .trans) the run made.
std::pair<std::vector<Tensor>, int64_t> run(int64_t h_k, int64_t h, int64_t h_v, bool pad) {
  torch::manual_seed(23);
  const int64_t b = 2, n = 20, m = 21, d = 8;
  auto bf16 = [](const Tensor& t) { return t.to(torch::kBFloat16).requires_grad_(true); };
  Tensor Q = bf16(torch::randn({b, n, h_k, d}) / std::sqrt(double(d))), K = bf16(torch::randn({b, m, h_k, d}));
  Tensor V = bf16(torch::randn({b, m, h_v, d}));
  Tensor P_l = (torch::randn({h_k, h}) / std::sqrt(double(h_k))).requires_grad_(true);
  Tensor P_w = (torch::randn({h, h_v}) / std::sqrt(double(h))).requires_grad_(true);
  Tensor bias = torch::randn({1, h, n, m}).requires_grad_(true);
  const Tensor dO = torch::randn({b, n, h_v, d}).to(torch::kBFloat16);
  set_th_padded_heads(pad);
  const int64_t loads = emu::matrix_loads + emu::matrix_loads_trans;
  // (The autograd node keeps the launcher's address for the backward: it must outlive the
  // backward, so not a temporary; ASan found one here, read after its scope.)
  const auto launcher = th_emu::emulator(64, 1 << 20, true);
  const Tensor O = fused_th_attention_core(Q, K, V, P_l, P_w, bias, Tensor(), launcher, {16, 16});
  (O.to(torch::kFloat64) * dO.to(torch::kFloat64)).sum().backward();
  set_th_padded_heads(true);
  return {{O.detach(), Q.grad(), K.grad(), V.grad(), P_l.grad(), P_w.grad(), bias.grad()},
          emu::matrix_loads + emu::matrix_loads_trans - loads};
}

TEST(FusedThPadded, SameNumbersAndMoreBlocksByLdmatrix) {
  for (auto [h_k, h, h_v] : {std::tuple{12, 12, 12}, {24, 24, 24}, {3, 5, 2}}) {
    SCOPED_TRACE(testing::Message() << "heads " << h_k << ", " << h << ", " << h_v);
    const auto [plain, plain_loads] = run(h_k, h, h_v, false);
    const auto [padded, padded_loads] = run(h_k, h, h_v, true);
    const char* names[] = {"O", "dQ", "dK", "dV", "dP_l", "dP_w", "dbias"};
    for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(torch::equal(plain[i], padded[i])) << names[i];
    EXPECT_GT(padded_loads, plain_loads);
  }
}

// fused_th_pad_heads at T5-base widths (d_model 768), bf16 on tensor cores, 256 threads, sm_90's
// 227 KB a block: padding 12 heads costs nothing; 48 need none; at 24 heads the forward's 16 x 32
// tiles would not fit; and a limit where two unpadded blocks fit a multiprocessor but two padded
// ones would not declines it. fp32 planes are never padded.
TEST(FusedThPadded, OnlyWhereItCostsNothing) {
  cuda_th::Widths w;
  w.in = w.j = w.u = 2, w.threads = 256;
  const int64_t kb227 = 227 * 1024;
  const cuda_th::LayoutShape h12{16, 16, 12, 12, 12, 64, 64};
  EXPECT_TRUE(fused_th_pad_heads(h12, w, false, kb227));
  EXPECT_TRUE(fused_th_pad_heads(h12, w, true, kb227));
  EXPECT_FALSE(fused_th_pad_heads({16, 16, 48, 48, 48, 16, 16}, w, false, kb227));
  EXPECT_FALSE(fused_th_pad_heads({16, 32, 24, 24, 24, 32, 32}, w, false, kb227));
  EXPECT_TRUE(fused_th_pad_heads({16, 16, 24, 24, 24, 32, 32}, w, true, kb227));
  const int64_t plain = cuda_th::kernel_layout(h12, w, false).bytes;
  const int64_t two_just_fit = 2 * (plain + 1024) - 1024;
  EXPECT_FALSE(fused_th_pad_heads(h12, w, false, two_just_fit));
  EXPECT_TRUE(fused_th_pad_heads(h12, w, false, two_just_fit + 16 * 1024));
  cuda_th::Widths fp32 = w;
  fp32.in = fp32.j = fp32.u = 4;
  EXPECT_FALSE(fused_th_pad_heads(h12, fp32, false, kb227));
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
