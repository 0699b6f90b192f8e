#include "common/precision.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/log.h"

namespace thx {

namespace {
thread_local torch::ScalarType g_compute = torch::kFloat32;
}  // namespace

torch::ScalarType precision_dtype(const std::string& precision) {
  if (precision == "fp32") return torch::kFloat32;
  if (precision == "bf16") return torch::kBFloat16;
  THX_CHECK(false, "precision '{}': allowed: fp32, bf16", precision);
  return torch::kFloat32;
}

torch::ScalarType compute_dtype() { return g_compute; }

PrecisionScope::PrecisionScope(const std::string& precision) : saved_(g_compute) {
  if (!precision.empty()) g_compute = precision_dtype(precision);
}
PrecisionScope::PrecisionScope(torch::ScalarType dtype) : saved_(g_compute) { g_compute = dtype; }
PrecisionScope::~PrecisionScope() { g_compute = saved_; }

torch::Tensor to_compute(const torch::Tensor& t) {
  if (g_compute == torch::kFloat32 || !t.defined() || !t.is_floating_point() || t.scalar_type() == g_compute) return t;
  return t.to(g_compute);
}

torch::ScalarType output_dtype(const torch::Tensor& x) {
  return g_compute == torch::kFloat32 ? x.scalar_type() : g_compute;
}

torch::Tensor plus(const torch::Tensor& x, const torch::Tensor& y) {
  return y.scalar_type() == x.scalar_type() ? x + y : x + y.to(x.scalar_type());
}

torch::Tensor to_fp32(const torch::Tensor& t) {
  if (!t.defined() || (t.scalar_type() != torch::kBFloat16 && t.scalar_type() != torch::kHalf)) return t;
  return t.to(torch::kFloat32);
}

std::string CpuBf16::features() const {
  if (!native()) return "no amx_bf16, no avx512_bf16";
  std::string s = amx_bf16 ? "amx_bf16" : "";
  if (avx512_bf16) s += std::string(s.empty() ? "" : " ") + "avx512_bf16";
  return s;
}

const CpuBf16& cpu_bf16() {
  static const CpuBf16 c = [] {
    CpuBf16 r;
    std::string family, model_number;
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      const std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
      const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
      if (key == "model name" && r.model.empty()) r.model = value;
      if (key == "cpu family" && family.empty()) family = value;
      if (key == "model" && model_number.empty()) model_number = value;
      if (key == "flags") {
        std::istringstream flags(value);
        for (std::string f; flags >> f;) {
          if (f == "amx_bf16") r.amx_bf16 = true;
          if (f == "avx512_bf16") r.avx512_bf16 = true;
        }
        break;  // every core reports the same flags
      }
    }
    if (r.model.empty()) r.model = "unknown CPU";
    if (!family.empty() && !model_number.empty()) r.family = "family " + family + ", model " + model_number;
    return r;
  }();
  return c;
}

namespace {

// GFLOP/s of a 256^3 matmul in `dtype`, best of 3: enough to tell hardware from emulation.
double quick_matmul_gflops(torch::ScalarType dtype) {
  const torch::Tensor a = torch::randn({256, 256}).to(dtype), b = torch::randn({256, 256}).to(dtype);
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    torch::Tensor c = torch::mm(a, b);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * 256 * 256 * 256 / best / 1e9;
}

}  // namespace

void check_precision(const std::string& precision, const torch::Device& device, const std::string& where) {
  check_precision(precision, device, where, cpu_bf16());
}

void check_precision(const std::string& precision, const torch::Device& device, const std::string& where,
                     const CpuBf16& cpu) {
  if (precision != "fp32" && precision != "bf16")
    throw InputError(fmt::format("{}: '{}' is not allowed; allowed: fp32, bf16", where, precision));
  if (precision != "bf16" || !device.is_cpu() || cpu.native()) return;
  if (const char* v = std::getenv(kBf16AnyCpuEnv); v && *v && std::string(v) != "0") {
    static bool said = false;
    if (!said)
      thx::log("runtime")->warn("{}: bf16 on {} ({}), allowed by {}: correct, but its matmuls are emulated", where,
                                cpu.model, cpu.features(), kBf16AnyCpuEnv);
    said = true;
    return;
  }
  const double bf = quick_matmul_gflops(torch::kBFloat16), fp = quick_matmul_gflops(torch::kFloat32);
  throw InputError(fmt::format("{}: bf16 needs a CPU with AMX-BF16 or AVX512-BF16, and this {} has neither "
                               "(/proc/cpuinfo flags: {}): a bf16 matmul runs {:.1f} GFLOP/s here against {:.1f} "
                               "in fp32 (measured now, {:.0f}x slower); use fp32",
                               where, cpu.model, cpu.features(), bf, fp, fp / std::max(bf, 1e-9)));
}

}  // namespace thx
