// blas.h: row-major single-precision GEMM on the BLAS LibTorch itself links (OpenBLAS on
// Debian), for the fused attention core, which needs leading dimensions that ATen's bmm does
// not expose: a head's [n, m] block of a [b, n, heads, m] tensor has row stride heads*m.
#pragma once
#include <cstdint>
#include <functional>

namespace thx::blas {

// C[M,N] = alpha * op(A) op(B) + beta * C, all row-major with leading dimensions lda, ldb,
// ldc; op(A) is A^T when trans_a (then A is stored [K, M]).
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
           int64_t ldc);

// Run fn(i) for i in [0, count) across LibTorch's threads, each call a whole GEMM on one
// core: OpenBLAS is told to use one thread for the duration (when it is the BLAS in use), so
// that small per-head products do not pay for OpenBLAS's own thread synchronization.
void parallel_gemms(int64_t count, const std::function<void(int64_t)>& fn);

}  // namespace thx::blas
