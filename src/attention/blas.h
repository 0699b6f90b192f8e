// blas.h: row-major single-precision GEMM on the BLAS LibTorch itself links (OpenBLAS on
// Debian), for the fused attention core, which needs leading dimensions that ATen's bmm does
// not expose: a head's [n, m] block of a [b, n, heads, m] tensor has row stride heads*m.
#pragma once
#include <cstdint>

namespace thx::blas {

// C[M,N] = alpha * op(A) op(B) + beta * C, all row-major with leading dimensions lda, ldb,
// ldc; op(A) is A^T when trans_a (then A is stored [K, M]).
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
           int64_t ldc);

}  // namespace thx::blas
