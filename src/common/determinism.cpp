// determinism.cpp: deterministic algorithms for a run's scope (determinism.h).
#include "common/determinism.h"

#include <ATen/Context.h>
#include <fmt/format.h>
#include <torch/version.h>

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

}  // namespace thx
