// th_launch.cuh: a launch of one of thx's talking-heads kernels as the .cu files make it, on the
// current stream with the dynamic shared memory it needs opted in (above 48 KB a kernel must ask).
// The row kernels (th_rows.cu, th_rows_bf16.cu: fp32 and bf16 FMAs; th_rows_tc.cu: tensor cores)
// and the flash kernels (th_flash_forward.cu, th_flash_backward.cu) are launched from files of
// their own, so that nvcc compiles their kernels side by side, not one after another.
#pragma once
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>  // (c10's: ATen/cuda/CUDAContext.h would double nvcc's host time)

#include "attention/cuda/th_rows_args.h"
#include "attention/cuda/th_rows_kernels.cuh"

namespace thx::cuda_th {

template <typename A>
void start_kernel(void (*f)(A), const A& a, unsigned gx, unsigned gy, int threads, int64_t bytes) {
  C10_CUDA_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  f<<<dim3(gx, gy), threads, size_t(bytes), c10::cuda::getCurrentCUDAStream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The FMA row kernels, instantiated for fp32 in th_rows.cu and for bf16 in th_rows_bf16.cu.
template <typename T, bool Backward>
void launch_rows(const RowsArgs<T>& a, int H, unsigned gx, unsigned gy, int threads, int64_t bytes) {
  start_kernel(rows_kernel_for<T, Backward>(H), a, gx, gy, threads, bytes);
}

}  // namespace thx::cuda_th
