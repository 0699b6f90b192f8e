// parallel.h: thx::parallel_for, at::parallel_for for every compiler that builds thx.
//
// at::parallel_for (LibTorch 1.13, ATen/ParallelOpenMP.h) is a header template around
// `#pragma omp parallel`, so its loops run in parallel only where thx's own compiler generates
// OpenMP code for LibTorch's runtime, GNU's libgomp. GCC does (-fopenmp). clang 14 does for
// LLVM's libomp only: with -fopenmp=libgomp it links libgomp but ignores the pragma, and every
// loop would run on one thread. A second OpenMP runtime in the process is not an option, so under
// clang the region is opened the way GCC compiles that pragma: a call of libgomp's
// GOMP_parallel(fn, data, 0, 0), with the same split of [begin, end) as ATen's invoke_parallel
// (the same chunks on the same thread numbers, so the same numbers) and its rules for when to
// run serially and how an exception comes back. tests/common/parallel_test.cpp checks both.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>

#ifndef _OPENMP
extern "C" {
void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags);
int omp_get_num_threads();
int omp_get_thread_num();
}
#endif

namespace thx {

template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain_size, const F& f) {
#ifdef _OPENMP
  at::parallel_for(begin, end, grain_size, f);
#else
  if (begin >= end) return;
  at::internal::lazy_init_num_threads();
  const int64_t numiter = end - begin;
  if (!(numiter > grain_size && numiter > 1 && !at::in_parallel_region() && at::get_num_threads() > 1)) {
    at::internal::ThreadIdGuard tid_guard(0);
    f(begin, end);
    return;
  }
  struct Job {
    int64_t begin, end, grain_size;
    const F* f;
    std::atomic_flag err_flag = ATOMIC_FLAG_INIT;
    std::exception_ptr eptr = nullptr;
  } job{begin, end, grain_size, &f};
  auto body = [](void* data) {
    Job& j = *static_cast<Job*>(data);
    int64_t num_threads = omp_get_num_threads();
    if (j.grain_size > 0) num_threads = std::min(num_threads, at::divup(j.end - j.begin, j.grain_size));
    const int64_t tid = omp_get_thread_num();
    const int64_t chunk_size = at::divup(j.end - j.begin, num_threads);
    const int64_t begin_tid = j.begin + tid * chunk_size;
    if (begin_tid < j.end) {
      try {
        at::internal::ThreadIdGuard tid_guard(tid);
        (*j.f)(begin_tid, std::min(j.end, chunk_size + begin_tid));
      } catch (...) {
        if (!j.err_flag.test_and_set()) j.eptr = std::current_exception();
      }
    }
  };
  GOMP_parallel(body, &job, 0, 0);
  if (job.eptr) std::rethrow_exception(job.eptr);
#endif
}

}  // namespace thx
