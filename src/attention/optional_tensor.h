// optional_tensor.h: an optional tensor through an autograd Function's arguments: LibTorch 1.13's
// Function::apply takes no undefined tensor, so an empty one stands for it there.
#pragma once
#include <torch/torch.h>

namespace thx {

inline torch::Tensor placeholder(const torch::Tensor& t) { return t.defined() ? t : torch::empty({0}); }
inline torch::Tensor present(const torch::Tensor& t) { return t.numel() > 0 ? t : torch::Tensor(); }

}  // namespace thx
