// The one generated header of c10's CUDA half that a CPU-only LibTorch (Debian's) lacks, for the
// CUDA compiles a machine without a GPU checks: scripts/cuda_build_check.sh and CudaKernels.*
// put this folder after the LibTorch's own headers, so that a CUDA LibTorch's copy wins.
#pragma once
#define C10_CUDA_BUILD_SHARED_LIBS
