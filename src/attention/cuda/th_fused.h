// th_fused.h: the fused talking-heads attention core (th_kernels.cuh: flash-style, nothing of
// size [b,h,n,m] in memory, forward and backward), prepared and checked in plain C++. The
// kernels run through a Launcher: CUDA's (th_fused.cu, where thx is built with nvcc:
// THX_CUDA_KERNELS) or the CPU emulator the tests use (common/cuda_compat.h).
#pragma once
#include <torch/torch.h>

#include <string>

#include "attention/cuda/th_args.h"

namespace thx {

// Why the fused kernels do not take this problem, or "" where they do. They take: Q, K, V of one
// dtype, fp32 or bf16, [b,n,h_k,d_k], [b,m,h_k,d_k], [b,m,h_v,d_v]; P_l [h_k,h] and P_w [h,h_v]
// (either may be undefined, not both); bias broadcastable to [b,h,n,m]; a bool mask broadcastable
// to it (true: attend); and tiles of one row and one key fitting the launcher's shared memory.
std::string fused_th_unsupported(const torch::Tensor& Q, const torch::Tensor& K, const torch::Tensor& V,
                                 const torch::Tensor& P_l, const torch::Tensor& P_w, const torch::Tensor& bias,
                                 const torch::Tensor& mask, const cuda_th::Launcher& launcher);

// The tiles: R query rows per block, C keys per tile, the largest pair from a fixed list
// (64x64 down to 1x1, R >= C) with which the forward (or the backward, which keeps more) fits
// `shared_limit_bytes`, its tiles as wide as `widths` (th_args.h; the default: all fp32); {0, 0}
// if none. Each kernel takes its own.
struct ThTiles {
  int R = 0, C = 0;
};
ThTiles fused_th_tiles(int h_k, int h, int h_v, int d_k, int d_v, int64_t shared_limit_bytes, bool backward,
                       const cuda_th::Widths& widths = {});

// The core, as tiled_attention_core (tiled.h): O [b,n,h_v,d_v] in V's dtype, differentiable in Q,
// K, V, P_l, P_w and bias; a row with no key gets O = 0 and no gradient. The problem must be
// supported (above). tiles {0, 0}: fused_th_tiles's choice for each kernel; else both use these.
// The autograd node keeps the launcher's address for the backward, so it must outlive that
// (CUDA's is static); a temporary does not compile.
torch::Tensor fused_th_attention_core(const torch::Tensor& Q, const torch::Tensor& K, const torch::Tensor& V,
                                      const torch::Tensor& P_l, const torch::Tensor& P_w, const torch::Tensor& bias,
                                      const torch::Tensor& mask, const cuda_th::Launcher& launcher,
                                      ThTiles tiles = {});
torch::Tensor fused_th_attention_core(const torch::Tensor& Q, const torch::Tensor& K, const torch::Tensor& V,
                                      const torch::Tensor& P_l, const torch::Tensor& P_w, const torch::Tensor& bias,
                                      const torch::Tensor& mask, const cuda_th::Launcher&& launcher,
                                      ThTiles tiles = {}) = delete;

// bf16 problems' products on tensor cores where the launcher has them (version 2, default true),
// or as fp32 FMAs, as fp32 problems always run (version 1; false: benchmarks compare the two).
// The tiled path's row kernels follow the same switch (fused.cpp's attention_core): their bf16
// mixings on tensor cores (th_rows_tc_kernels.cuh) or as fp32 FMAs (th_rows_kernels.cuh).
void set_th_tensor_cores(bool enabled);
bool th_tensor_cores();
// The bf16 planes' heads padded to a multiple of 16 where that costs nothing (cuda_th::Widths::pad,
// version 2.4; default true), or not: the same numbers either way, for tests and measurements.
void set_th_padded_heads(bool enabled);
// Whether the kernel (backward or forward) with tiles and heads `x` and widths `w` pads its heads
// where set_th_padded_heads allows: where some plane is bf16 (w.j or w.u 2), some heads are not a
// multiple of 16, and padding costs nothing: the padded tiles fit `limit` (the bytes of shared
// memory a block may have) and as many blocks a multiprocessor as the unpadded ones, up to the
// kernel's launch bounds (th_args.h: two forwards, one backward), counting the limit plus the 1 KB
// each block reserves (as on sm_90) for a multiprocessor. Tiles are chosen unpadded (fused_th_tiles).
bool fused_th_pad_heads(const cuda_th::LayoutShape& x, cuda_th::Widths w, bool backward, int64_t limit);

// How the kernels are launched, for tuning them on a GPU (`thx bench attention --th-tiles,
// --th-threads, --th-atomics`): each kernel's tiles ({0, 0}: fused_th_tiles's choice), the
// threads per block (0: the launcher's) and how the backward adds dK, dV and dbias. A tile passed
// to fused_th_attention_core comes first; a forced tile that does not fit the shared memory is an
// error. The backward keeps its forward's threads.
struct ThLaunch {
  ThTiles forward, backward;
  int threads = 0;
  cuda_th::KeySums key_sums = cuda_th::KeySums::kVector;  // the backward's dK, dV, dbias sums
  bool forward_padded = false, backward_padded = false;  // reported only: heads padded (set_th_padded_heads)
};
void set_th_launch(const ThLaunch& launch);
// What the last forward and backward launches used (tiles, threads, the backward's atomics), for reports.
ThLaunch fused_th_last_launch();
// Why `launch`'s forced tiles cannot run talking-heads (P_l and P_w, h heads of width d, in bf16
// or fp32) on `launcher`: one line naming the kernel, the tiles and the shared memory they need
// and have; "" where they can.
std::string fused_th_launch_unfit(const ThLaunch& launch, int h, int d, bool bf16, const cuda_th::Launcher& launcher);

}  // namespace thx
