// determinism.cpp: deterministic algorithms for a run's scope (determinism.h).
#include "common/determinism.h"

#include <ATen/Context.h>
#include <fmt/format.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common/error.h"

namespace thx {

namespace {
constexpr const char* kCublasVar = "CUBLAS_WORKSPACE_CONFIG";
constexpr const char* kCublasValue = ":4096:8";  // 8 buffers of 4 MiB (ATen's check takes it or :16:8)
}  // namespace

std::string cublas_workspace_refusal(const char* value) {
  if (value == nullptr || std::strcmp(value, ":4096:8") == 0 || std::strcmp(value, ":16:8") == 0) return "";
  return fmt::format("true needs cuBLAS's fixed workspace, but {} is \"{}\"; unset it (thx then sets {}) or set "
                     ":4096:8 or :16:8",
                     kCublasVar, value, kCublasValue);
}

DeterminismScope::DeterminismScope(bool on, const torch::Device& device, const std::string& key) : on_(on) {
  if (!on_) return;
  if (device.is_cuda()) {
    const std::string refusal = cublas_workspace_refusal(std::getenv(kCublasVar));
    if (!refusal.empty()) throw ConfigError(key, refusal);  // ("thx: error: <key>: true needs ...")
    setenv(kCublasVar, kCublasValue, /*overwrite=*/0);
  }
  at::Context& c = at::globalContext();
  was_ = c.deterministicAlgorithms(), was_warn_only_ = c.deterministicAlgorithmsWarnOnly();
  was_cudnn_ = c.deterministicCuDNN();
  c.setDeterministicAlgorithms(true, /*warn_only=*/false);
  c.setDeterministicCuDNN(true);
}

DeterminismScope::~DeterminismScope() {
  if (!on_) return;
  at::Context& c = at::globalContext();
  c.setDeterministicAlgorithms(was_, was_warn_only_);
  c.setDeterministicCuDNN(was_cudnn_);
}

std::string nondeterministic_op(const std::string& what, const std::string& key) {
  const std::string line = what.substr(0, what.find('\n'));
  const size_t at = line.find(" does not have a deterministic implementation");
  if (at != std::string::npos) {
    const std::string op = line.substr(0, at);  // ATen's op, or one of thx's kernels (named "thx's ...")
    return fmt::format("{}: true, but {} has no deterministic implementation{}; set {}: false to train with it", key,
                       op, op.rfind("thx's ", 0) == 0 ? "" : fmt::format(" in this LibTorch ({})", TORCH_VERSION), key);
  }
  if (what.find("Deterministic behavior was enabled") != std::string::npos &&
      what.find("CuBLAS") != std::string::npos)
    return fmt::format("{}: true, but cuBLAS started before {} was set to {} (ATen reads it once, at the first "
                       "product); set it in the environment, or {}: false",
                       key, kCublasVar, kCublasValue, key);
  return "";
}

namespace {
// The integer dtype of a value's bits.
torch::ScalarType bits_of(torch::ScalarType t) {
  switch (c10::elementSize(t)) {
    case 1: return torch::kUInt8;
    case 2: return torch::kInt16;
    case 4: return torch::kInt32;
    default: return torch::kInt64;
  }
}
}  // namespace

std::string repeat_check(const std::function<std::vector<torch::Tensor>()>& run) {
  const std::vector<torch::Tensor> a = run(), b = run();
  if (a.size() != b.size()) return fmt::format("differs: {} tensors, then {}", a.size(), b.size());
  int64_t values = 0, differ = 0;
  double largest = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].defined() || !b[i].defined()) {  // (an absent gradient, say)
      if (a[i].defined() != b[i].defined())
        return fmt::format("differs: tensor {} is {}, then {}", i, a[i].defined() ? "defined" : "undefined",
                           b[i].defined() ? "defined" : "undefined");
      continue;
    }
    if (a[i].sizes() != b[i].sizes() || a[i].scalar_type() != b[i].scalar_type())
      return fmt::format("differs: tensor {} is {} {}, then {} {}", i, c10::toString(a[i].scalar_type()),
                         c10::str(a[i].sizes()), c10::toString(b[i].scalar_type()), c10::str(b[i].sizes()));
    values += a[i].numel();
    if (a[i].is_complex() || a[i].scalar_type() == torch::kBool) {  // (no bits view; none in a step)
      differ += a[i].ne(b[i]).sum().item<int64_t>();
      continue;
    }
    const torch::ScalarType bits = bits_of(a[i].scalar_type());
    const torch::Tensor ne = a[i].view(bits).ne(b[i].view(bits));
    const int64_t n = ne.sum().item<int64_t>();
    if (n == 0) continue;
    differ += n;
    const torch::Tensor d = (a[i].masked_select(ne).to(torch::kDouble) - b[i].masked_select(ne).to(torch::kDouble));
    const double m = d.abs().max().item<double>();  // (NaN where one of a pair is NaN: so is the largest)
    largest = std::isnan(m) || std::isnan(largest) ? m + largest : std::max(largest, m);
  }
  if (differ == 0) return "bitwise";
  return fmt::format("differs: {} of {} values, the largest by {}", differ, values,
                     std::isnan(largest) ? "NaN (a NaN against another value)" : fmt::format("{:.3g}", largest));
}

}  // namespace thx
