// cuda_mma.h: products of small matrices in shared memory by a whole thread block, on tensor
// cores (bf16 operands, fp32 sums) or as fp32 FMAs, for thx's portable kernels
// (attention/cuda/th_kernels.cuh). The same three compilers as common/cuda_compat.h:
//  - nvcc and clang's PTX check: PTX's mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (sm_80
//    and later), a warp's 16x8 fp32 tile += a 16x16 bf16 tile times a 16x8 bf16 tile.
//  - the emulator: the same instruction, its lanes' operand words exchanged through the warp, the
//    products summed in fp32 in k order.
// Which lane holds what (PTX ISA, "Matrix Fragments for mma.m16n8k16" with .bf16): lane l,
// g = l / 4, t = l % 4. A (16x16, row-major) in four words of two bf16 each (low half: the even
// k): a0 (row g, k 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..). B (16x8) in two:
// b0 (k 2t..2t+1, column g), b1 (k 2t+8.., g). The fp32 accumulator: c0, c1 (row g, columns 2t,
// 2t+1), c2, c3 (row g+8, the same columns). A mistake in this layout gives the same (right)
// results in the emulator and wrong ones on a GPU: MmaOnCuda.* checks it there.
#pragma once
#include "common/cuda_compat.h"

// d[0..3] += A B for one warp's fragments (every lane of the warp taking part).
#if defined(__CUDACC__) || defined(__CUDA__)
THX_DEVICE void thx_mma_bf16_16816(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#else
THX_DEVICE void thx_mma_bf16_16816(float* d, const uint32_t* a, const uint32_t* b) {
  thx::emu::Warp& w = *(*thx::emu::t_block.warps)[threadIdx.x / 32];
  const unsigned lane = threadIdx.x % 32;
  for (int x = 0; x < 4; ++x) w.words[lane][x] = a[x];
  w.words[lane][4] = b[0], w.words[lane][5] = b[1];
  w.barrier.wait();
  auto half = [](uint32_t word, int k) { return thx_bits_to_float((k % 2 ? word >> 16 : word & 0xffffu) << 16); };
  auto A = [&](int row, int k) { return half(w.words[(row % 8) * 4 + (k % 8) / 2][(row >= 8) + 2 * (k >= 8)], k); };
  auto B = [&](int k, int col) { return half(w.words[col * 4 + (k % 8) / 2][4 + (k >= 8)], k); };
  const int g = int(lane) / 4, t = int(lane) % 4;
  for (int x = 0; x < 4; ++x) {
    const int row = g + 8 * (x / 2), col = 2 * t + x % 2;
    float acc = d[x];
    for (int k = 0; k < 16; ++k) acc += A(row, k) * B(k, col);
    d[x] = acc;
  }
  w.barrier.wait();  // before any lane writes its words again
}
#endif

namespace thx::cuda_mma {

// A matrix operand in memory: element (i, j) of batch entry g at p[g * gs + i * rs + j * cs].
struct Operand {
  const float* p;
  int64_t gs, rs, cs;
};

// Two values as a word of two bf16 (round to nearest even), the first in the low half.
THX_DEVICE uint32_t pack_bf16x2(float lo, float hi) {
  return uint32_t(thx_from_float<thx_bf16>(lo).bits) | uint32_t(thx_from_float<thx_bf16>(hi).bits) << 16;
}

// out(g, m, n, sum_k A_g(m, k) B_g(k, n)) for every g < batch, m < M, n < N, each (g, m, n) by
// exactly one thread (so that `out` may add into memory it alone owns). The sums are fp32:
//  - tensor_cores: each warp takes 16x8 output tiles in turn; the operands are rounded to bf16
//    as they are read (nothing outside M, N or K is read: zeros stand in). Needs whole warps.
//  - otherwise plain FMAs, each thread an output, summed in k order (as th_kernels.cuh's
//    version 1 did).
// No barrier: the caller syncs before reading what `out` wrote.
template <class Out>
THX_DEVICE void block_gemm(bool tensor_cores, int batch, Operand A, Operand B, int M, int N, int K, Out out) {
  if (!tensor_cores) {
    for (int x = threadIdx.x; x < batch * M * N; x += blockDim.x) {
      const int g = x / (M * N), m = (x / N) % M, n = x % N;
      const float* a = A.p + g * A.gs + m * A.rs;
      const float* b = B.p + g * B.gs + n * B.cs;
      float acc = 0.f;
      for (int k = 0; k < K; ++k) acc += a[k * A.cs] * b[k * B.rs];
      out(g, m, n, acc);
    }
    return;
  }
  const int tiles_m = (M + 15) / 16, tiles_n = (N + 7) / 8, tiles = batch * tiles_m * tiles_n;
  const int lane = threadIdx.x % 32, g4 = lane / 4, t4 = lane % 4;
  for (int x = threadIdx.x / 32; x < tiles; x += blockDim.x / 32) {  // the same x across a warp
    const int g = x / (tiles_m * tiles_n), m0 = (x / tiles_n) % tiles_m * 16, n0 = x % tiles_n * 8;
    const float* a = A.p + g * A.gs;
    const float* b = B.p + g * B.gs;
    auto at = [&](int m, int k) { return m < M && k < K ? a[m * A.rs + k * A.cs] : 0.f; };
    auto bt = [&](int k, int n) { return k < K && n < N ? b[k * B.rs + n * B.cs] : 0.f; };
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    for (int k0 = 0; k0 < K; k0 += 16) {
      uint32_t aw[4], bw[2];
      for (int w = 0; w < 4; ++w) {
        const int m = m0 + g4 + 8 * (w % 2), k = k0 + 2 * t4 + 8 * (w / 2);
        aw[w] = pack_bf16x2(at(m, k), at(m, k + 1));
      }
      for (int w = 0; w < 2; ++w) {
        const int k = k0 + 2 * t4 + 8 * w;
        bw[w] = pack_bf16x2(bt(k, n0 + g4), bt(k + 1, n0 + g4));
      }
      thx_mma_bf16_16816(d, aw, bw);
    }
    for (int w = 0; w < 4; ++w) {
      const int m = m0 + g4 + 8 * (w / 2), n = n0 + 2 * t4 + w % 2;
      if (m < M && n < N) out(g, m, n, d[w]);
    }
  }
}

}  // namespace thx::cuda_mma
