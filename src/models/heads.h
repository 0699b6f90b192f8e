// heads.h: a fine-tuning task head on top of an encoder (BERT/ALBERT), as their run_classifier,
// run_squad and run_race add one: a dense layer w [d, out] + bias [out], w drawn from a
// truncated normal of std 0.02 (their initializer), bias 0. Which vector it reads (the pooled
// [CLS] vector, or every position for spans) is the trainer's choice, not the head's.
//
// Shapes: b examples, n positions, d = d_model, out = classes (classification), 1 (regression,
// a multiple-choice option's score) or 2 (span start and end logits).
#pragma once
#include <torch/torch.h>

namespace thx {

class TaskHeadImpl : public torch::nn::Module {
 public:
  TaskHeadImpl(int64_t d, int64_t out);
  // pooled [b,d] -> [b,out]; or hidden [b,n,d] -> [b,n,out]
  torch::Tensor forward(const torch::Tensor& x) const;
  torch::Tensor w, b;  // registered as "w" and "bias": heads/<task>/w, heads/<task>/bias
};
TORCH_MODULE(TaskHead);

}  // namespace thx
