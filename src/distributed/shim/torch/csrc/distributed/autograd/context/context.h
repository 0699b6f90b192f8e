// Debian's libtorch-dev 1.13 ships torch/csrc/distributed/c10d/reducer.hpp but not this header,
// which reducer.hpp includes for two type names only. Only thx_distributed sees this
// directory (CMakeLists.txt). What reducer.hpp needs from it, and why this is layout-safe:
//   - DistAutogradContext::GradCallback: reducer.hpp static_asserts it is
//     std::function<bool(at::Tensor&)>, its own type;
//   - ContextPtr: a std::shared_ptr to the context, held by the Reducer beside an atomic raw
//     pointer; neither's size depends on the pointee, which thx never touches.
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>

namespace torch {
namespace distributed {
namespace autograd {

class DistAutogradContext {
 public:
  using GradCallback = std::function<bool(at::Tensor&)>;
};
using ContextPtr = std::shared_ptr<DistAutogradContext>;

}  // namespace autograd
}  // namespace distributed
}  // namespace torch
