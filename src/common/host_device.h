// host_device.h: THX_HOST_DEVICE, for the few functions that both a launch (on the host, to lay out
// shared memory or check a problem) and the kernels call (attention/cuda/*_args.h): __host__
// __device__ under nvcc, clang's attributes under its PTX check (common/cuda_compat.h), nothing
// for a plain C++ compiler (the host code and the CPU emulator).
#pragma once

#if defined(__CUDACC__)  // nvcc
#define THX_HOST_DEVICE __host__ __device__
#elif defined(__CUDA__)  // clang -x cuda -nocudainc
#define THX_HOST_DEVICE __attribute__((host)) __attribute__((device))
#else
#define THX_HOST_DEVICE
#endif
