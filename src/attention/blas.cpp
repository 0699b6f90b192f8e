#include "attention/blas.h"

#include <dlfcn.h>

#include "common/parallel.h"

// The Fortran interface, which every BLAS provides (CBLAS is not in the reference BLAS).
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n,
                       const int* k, const float* alpha, const float* a, const int* lda,
                       const float* b, const int* ldb, const float* beta, float* c,
                       const int* ldc);

namespace thx::blas {

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
           int64_t ldc) {
  if (M == 0 || N == 0) return;
  // Row-major C = op(A) op(B) is column-major C' = op(B)' op(A)', with X' the same memory.
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
  const int la = static_cast<int>(lda), lb = static_cast<int>(ldb), lc = static_cast<int>(ldc);
  sgemm_(&tb, &ta, &m, &n, &k, &alpha, B, &lb, A, &la, &beta, C, &lc);
}

}  // namespace thx::blas

namespace thx::blas {
namespace {

// OpenBLAS's thread-count controls, if OpenBLAS is the BLAS loaded (looked up once).
struct OpenBlasThreads {
  void (*set)(int) = nullptr;
  int (*get)() = nullptr;
  OpenBlasThreads() {
    set = reinterpret_cast<void (*)(int)>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
    get = reinterpret_cast<int (*)()>(::dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
    if (!set || !get) set = nullptr, get = nullptr;
  }
};

const OpenBlasThreads& openblas() {
  static const OpenBlasThreads t;
  return t;
}

}  // namespace

void parallel_gemms(int64_t count, const std::function<void(int64_t)>& fn) {
  const auto& ob = openblas();
  if (!ob.set || at::get_num_threads() < 2 || count < 2) {
    for (int64_t i = 0; i < count; ++i) fn(i);
    return;
  }
  const int before = ob.get();
  ob.set(1);
  thx::parallel_for(0, count, 1, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) fn(i);
  });
  ob.set(before);
}

}  // namespace thx::blas
