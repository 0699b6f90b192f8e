// rms_norm_cuda.h: T5's RMS norm as thx's own CUDA kernels (rms_norm_kernels.cuh, launched by
// rms_norm_cuda.cu, built with nvcc for sm_90 where LibTorch has CUDA and nvcc is found:
// THX_CUDA_KERNELS; tested on the CPU by tests/models/rms_norm_emu_test.cpp). Declared in plain C++, so
// that the rest of thx compiles without CUDA's headers. The math is RMSNormFn's (t5.cpp):
//   y = x * r * scale, r = rsqrt(mean(x^2) + 1e-6) per row of the last dim;
//   dx = r * (dy*scale - x * r^2 * mean(dy*scale*x)),  dscale = sum over rows of dy * x * r.
// One pass over x forward, one over x and dy backward, against five and about eight kernels
// of the ATen composition. x, y, dy: fp32 or bf16, contiguous; scale, r and the sums fp32.
#pragma once
#include <ATen/ATen.h>

namespace thx::cuda {

// y (allocated, x's shape, fp32 or bf16) and r ([rows], fp32) from x and scale [d].
void rms_norm_forward(const at::Tensor& x, const at::Tensor& scale, at::Tensor& y, at::Tensor& r);
// dx (x's dtype) and dscale ([d], fp32) from what the forward kept and dy (y's dtype).
void rms_norm_backward(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& r, const at::Tensor& dy,
                       at::Tensor& dx, at::Tensor& dscale);

}  // namespace thx::cuda
