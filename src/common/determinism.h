// determinism.h: train.deterministic (and finetune.deterministic): every step of a run repeats to
// the bit on its device, so that a run killed there resumes bit for bit there.
//
// On the CPU thx's steps repeat anyway: its kernels and ATen's CPU ops add in a fixed order
// (the CPU-bitwise tests hold whatever the setting). On a GPU three things can vary from run to
// run, and a deterministic run fixes each:
//  - ATen's CUDA ops that add by atomics (index_add_, scatter_add_, SDPA's backward, ...):
//    at::Context's deterministic algorithms make ATen take an ordered kernel where it has one
//    (multi-head's SDPA: the flash backward's deterministic mode, the memory-efficient backward
//    with one split of the keys, no cuDNN; 2.x's attention_backward.cu and sdp_utils.cpp), and
//    make the op throw where it has none (the training loop turns that into one line,
//    nondeterministic_op; a CPU op such as put_ throws alike);
//  - cuBLAS: its products repeat only with a fixed workspace, CUBLAS_WORKSPACE_CONFIG :4096:8
//    or :16:8 (the values ATen's check accepts), set before cuBLAS starts. thx sets :4096:8 where
//    it is unset, before the run's first product;
//  - thx's own kernels that add by atomics: the fused kernels' backward (dK, dV, dbias) and the
//    flash backward (D, dQ, dbias). Where deterministic algorithms are on, core_paths.cpp routes
//    around the first and tiled.cpp around the second (the tiled path's backward, from the
//    same LSE), each in its one place. Every other kernel of thx's adds in a fixed order.
// LibTorch 2.x also fills every new tensor with NaN under the flag (fill_uninitialized_memory), so
// a kernel that read memory nothing wrote would show it there; none does (the tests'
// PoisonedCpuMemory, tests/test_util.h, runs steps, paths and the emulated kernels in NaN memory).
// `thx bench train --deterministic-cost` times each row with and without it, in one run.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

namespace thx {

// Why CUBLAS_WORKSPACE_CONFIG's value (nullptr: unset) stops a deterministic run's cuBLAS from
// repeating: "" where it is unset (thx sets it) or :4096:8 or :16:8; else the rest of a line that
// starts with the key ("true needs ...").
std::string cublas_workspace_refusal(const char* value);

// From construction to destruction, deterministic algorithms (at::Context's, cuDNN's) where `on`;
// the previous settings after. On a CUDA device also CUBLAS_WORKSPACE_CONFIG where it is unset
// (a ConfigError naming `key` where it holds another value). Off: nothing changes.
class DeterminismScope {
 public:
  DeterminismScope(bool on, const torch::Device& device, const std::string& key);
  ~DeterminismScope();
  DeterminismScope(const DeterminismScope&) = delete;
  DeterminismScope& operator=(const DeterminismScope&) = delete;

 private:
  bool on_ = false, was_ = false, was_warn_only_ = false, was_cudnn_ = false;
};

// Where `what` (an exception's message) is ATen's refusal of an op under deterministic algorithms,
// or of cuBLAS started without a deterministic workspace: the op and what to change, in one line,
// naming `key`; else "".
std::string nondeterministic_op(const std::string& what, const std::string& key);

// Whether `run` gives the same tensors twice: it is called twice (it must reseed what it draws
// from), and the two lists are compared bit for bit (a value's bits, so -0 is not 0 and a NaN
// equals only the same NaN; undefined tensors equal undefined ones). "bitwise" where every value is
// equal; else "differs: " and how ("N of M values, the largest by X", or the lists' shapes).
// `thx bench train --deterministic-cost` asks it of a step of each row, with and without
// train.deterministic; the tests, of kernels run with and without poisoned memory.
std::string repeat_check(const std::function<std::vector<torch::Tensor>()>& run);

}  // namespace thx
