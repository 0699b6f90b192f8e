// The primitives' probe (cuda_primitives.cuh) as a CUDA kernel: nvcc compiles this file into the
// test binary where thx is built with its CUDA kernels (CMakeLists.txt, thx_tests_cuda), and
// CudaPrimitivesOnCuda.* (cuda_primitives_test.cpp) launches it on device pointers.
#include "common/cuda_primitives.cuh"

namespace thx::test::primitives {

__global__ void __launch_bounds__(kThreads) probe_kernel(Args a) { probe(a); }

// nullptr, or CUDA's error for the launch.
const char* probe_on_cuda(const Args& a) {
  probe_kernel<<<1, kThreads, kSharedBytes>>>(a);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace thx::test::primitives
