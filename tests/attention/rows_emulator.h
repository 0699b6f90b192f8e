// rows_emulator.h: the tiled path's row kernels (and the flash, softmax and mixing kernels) run
// by the CPU emulator of common/cuda_compat.h as launchers, with counts of their launches, and the
// tiled path's results under autograd: what th_rows_emu_test.cpp and th_flash_emu_test.cpp share.
#pragma once
#include <torch/torch.h>

#include <atomic>
#include <vector>

#include "attention/cuda/th_flash_backward.cuh"
#include "attention/cuda/th_flash_forward_for.cuh"
#include "attention/cuda/th_mix_kernels.cuh"
#include "attention/cuda/th_rows_kernels.cuh"
#include "attention/cuda/th_rows_tc_kernels.cuh"
#include "attention/cuda/th_softmax_kernels.cuh"
#include "attention/tiled.h"
#include "core_problems.h"

namespace thx::test::rows_emu {

using torch::Tensor;

// Launches of any row or softmax kernel, of the tensor-core ones, of the flash forward, of the
// flash backward's passes and of the softmax kernels.
inline std::atomic<int> g_launches{0}, g_tc_launches{0}, g_flash_launches{0}, g_flash_back_launches{0},
    g_softmax_launches{0};
// Launches of the mixing kernels across few heads (th_mix_kernels.cuh), of their gradients' and
// of either taking positions in pairs.
inline std::atomic<int> g_mix_launches{0}, g_mix_grad_launches{0}, g_mix_pairs_launches{0};
// The last softmax launch's keys kept a lane (softmax_cache) and whether it took keys in pairs.
inline std::atomic<int> g_softmax_cache{-1}, g_softmax_pairs{-1};

template <typename T, bool Backward>
void emulate(const cuda_th::RowsArgs<T>& a, int H, unsigned gx, unsigned gy, int threads, int64_t bytes) {
  ++g_launches;
  emu::launch({gx, gy, 1}, threads, size_t(bytes), [&a, H] { cuda_th::rows_kernel_for<T, Backward>(H)(a); });
}

// The heads-major path's softmax kernels (th_softmax_kernels.cuh).
template <typename T>
void emulate_softmax(const cuda_th::RowsArgs<T>& a, int cache, bool pairs, unsigned gx) {
  ++g_launches, ++g_softmax_launches, g_softmax_cache = cache, g_softmax_pairs = pairs;
  emu::launch({gx, 1, 1}, cuda_th::kSoftmaxThreads, 0,
              [&a, cache, pairs] { cuda_th::softmax_kernel_for<T>(cache, pairs)(a); });
}

// The heads-major path's mixings across few heads (th_mix_kernels.cuh).
template <typename T>
void emulate_mix(const cuda_th::MixArgs<T>& a, bool grad, bool pairs, unsigned gx, unsigned gy) {
  ++(grad ? g_mix_grad_launches : g_mix_launches), g_mix_pairs_launches += pairs;  // (not g_launches)
  emu::launch({gx, gy, 1}, cuda_th::kMixThreads, 0, [&a, grad, pairs] { cuda_th::mix_kernel_for<T>(grad, pairs)(a); });
}

inline cuda_th::RowsLauncher emulator(int threads, int64_t group_rows_from = 4096) {
  cuda_th::RowsLauncher l{threads, group_rows_from, emulate<float, false>, emulate<thx_bf16, false>,
                          emulate<float, true>, emulate<thx_bf16, true>};
  l.softmax_f32 = emulate_softmax<float>, l.softmax_bf16 = emulate_softmax<thx_bf16>;
  l.mix_f32 = emulate_mix<float>, l.mix_bf16 = emulate_mix<thx_bf16>;
  return l;
}

// The same with bf16 on tensor cores (th_rows_tc_kernels.cuh).
template <bool Backward>
void emulate_tc(const cuda_th::RowsArgs<thx_bf16>& a, int H, unsigned gx, unsigned gy, int threads, int64_t bytes) {
  ++g_launches, ++g_tc_launches;
  emu::launch({gx, gy, 1}, threads, size_t(bytes), [&a, H] { cuda_th::rows_tc_kernel_for<Backward>(H)(a); });
}
inline cuda_th::RowsLauncher emulator_tc(int threads, int64_t group_rows_from = 4096) {
  cuda_th::RowsLauncher l = emulator(threads, group_rows_from);
  l.forward_bf16_tc = emulate_tc<false>, l.backward_bf16_tc = emulate_tc<true>;
  return l;
}

// And with the flash forward (th_flash_kernels.cuh) and backward (th_flash_backward.cuh), `limit`
// bytes of shared memory a block (an H100's by default).
inline void emulate_flash(const cuda_th::FlashArgs<thx_bf16>& a, int H, int DV, unsigned gx, unsigned gy,
                          int64_t bytes) {
  ++g_flash_launches;
  emu::launch({gx, gy, 1}, cuda_th::kFlashThreads, size_t(bytes), [&a, H, DV] { cuda_th::flash_kernel_for(H, DV)(a); });
}
inline void emulate_flash_backward(const cuda_th::FlashBackArgs<thx_bf16>& a, int H, int D, bool grads, unsigned gx,
                                   unsigned gy, int64_t bytes) {
  ++g_flash_back_launches;
  emu::launch({gx, gy, 1}, cuda_th::kFlashBackThreads, size_t(bytes), [&a, H, D, grads] {
    (grads ? cuda_th::flash_backward_kernel_for<true>(H, D) : cuda_th::flash_backward_kernel_for<false>(H, D))(a);
  });
}
// backward false: the flash forward with the row kernels' backward.
inline cuda_th::RowsLauncher emulator_flash(int threads, int64_t limit = 227 * 1024, bool backward = true) {
  cuda_th::RowsLauncher l = emulator_tc(threads);
  l.flash_forward = emulate_flash, l.flash_shared_limit = limit;
  if (backward) l.flash_backward = emulate_flash_backward;
  return l;
}

// O, dQ, dK, dV, dP_l, dP_w, dbias (undefined where absent) of a core (Q, K, V, P_l, P_w, bias,
// mask -> O) under autograd (backward: false, O alone).
template <typename Core>
std::vector<Tensor> run_core(const core::Inputs& in, const Core& attention, bool backward = true) {
  auto leaf = [](const Tensor& t) { return t.defined() ? t.detach().clone().requires_grad_(true) : t; };
  Tensor Q = leaf(in.Q), K = leaf(in.K), V = leaf(in.V), P_l = leaf(in.P_l), P_w = leaf(in.P_w), bias = leaf(in.bias);
  const Tensor O = attention(Q, K, V, P_l, P_w, bias, in.mask);
  if (!backward) return {O.detach()};
  (O.to(torch::kFloat64) * in.dO.to(torch::kFloat64)).sum().backward();
  auto grad = [](const Tensor& t) { return t.defined() ? t.grad() : t; };
  return {O.detach(), grad(Q), grad(K), grad(V), grad(P_l), grad(P_w), grad(bias)};
}
// The same of the tiled path.
inline std::vector<Tensor> run(const core::Inputs& in, int64_t block, const cuda_th::RowsLauncher* kernels,
                               bool backward = true) {
  auto tiled = [&](const auto&... a) { return tiled_attention_core(a..., block, kernels); };
  return run_core(in, tiled, backward);
}

inline core::Inputs to_cuda(const core::Inputs& in) { return core::to_device(in, torch::kCUDA); }
inline std::vector<Tensor> on_cpu(std::vector<Tensor> r) {
  for (Tensor& t : r)
    if (t.defined()) t = t.cpu();
  return r;
}

}  // namespace thx::test::rows_emu
