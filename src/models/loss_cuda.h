// loss_cuda.h: loss.h's cross-entropy with z-loss as thx's own CUDA kernels (loss_kernels.cuh,
// launched by loss_cuda.cu, built with nvcc for sm_90 where LibTorch has CUDA and nvcc is found:
// THX_CUDA_KERNELS; tested on the CPU by tests/models/loss_emu_test.cpp). Declared in plain C++,
// so that the rest of thx compiles without CUDA's headers. One read of the logits forward and one
// read and one write backward, where the ATen composition (loss_reference) makes an fp32 copy
// of them and some fifteen passes over [N,V] in fp32. x: [N,V], fp32 or bf16, contiguous;
// targets: [N] int64 inside [0, V) (the caller checks); lse, the row sums and g fp32.
#pragma once
#include <ATen/ATen.h>

namespace thx::cuda {

// lse [N], and per row nll (lse - x_t) and zz (lse^2), both 0 where the target is 0 (padding).
void cross_entropy_forward(const at::Tensor& x, const at::Tensor& targets, at::Tensor& lse, at::Tensor& nll,
                           at::Tensor& zz);
// dx (x's dtype, allocated) from what the forward kept and g [2]: the gradients of the loss sum
// (nll + z sum lse^2) and of the nll sum, on the device (no copy to the host).
void cross_entropy_backward(const at::Tensor& x, const at::Tensor& targets, const at::Tensor& lse,
                            const at::Tensor& g, double z, at::Tensor& dx);

}  // namespace thx::cuda
