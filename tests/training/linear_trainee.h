// linear_trainee.h: the smallest Trainee the loop accepts (training/loop.h), for tests of the loop
// itself: a linear layer of 3 inputs under Adafactor, batches of 8 random rows, the mean square of
// its output as the loss, an evaluation that returns {loss: 0}, and no state of its own. A test
// derives from it and overrides the step it makes do something else.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "training/loop.h"
#include "training/optimizer.h"

namespace thx::test {

class LinearTrainee : public Trainee {
 public:
  LinearTrainee() {
    torch::manual_seed(3);
    lin_ = torch::nn::Linear(3, 1);
    opt_ = make_optimizer(OptimizerConfig{}, {{"w", lin_->weight, lin_->weight.sizes().vec()},
                                              {"b", lin_->bias, lin_->bias.sizes().vec()}});
  }
  torch::nn::Module& module() override { return *lin_; }
  std::vector<std::pair<std::string, torch::Tensor>> parameters() override {
    return {{"w", lin_->weight}, {"b", lin_->bias}};
  }
  Optimizer& optimizer() override { return *opt_; }
  std::vector<Batch> next_step(int64_t micro) override {
    std::vector<Batch> out(static_cast<size_t>(micro));
    for (auto& b : out) b.inputs = torch::randn({8 / micro, 3});  // [b,3]
    return out;
  }
  double weight(const Batch& b) override { return double(b.inputs.size(0)); }
  int64_t tokens(const Batch& b) override { return b.inputs.size(0); }
  MicroLoss forward(const Batch& b) override { return {lin_->forward(b.inputs).pow(2).mean(), 0.0, {}}; }
  nlohmann::json evaluate(int64_t) override { return {{"loss", 0.0}}; }
  void save_state(Checkpoint&) override {}
  void load_state(const Checkpoint&) override {}

 protected:
  torch::nn::Linear lin_{nullptr};
  std::unique_ptr<Optimizer> opt_;
};

}  // namespace thx::test
