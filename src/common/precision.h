// precision.h: the dtype thx's matmuls compute in (train.precision, eval.precision).
//
// bf16 is mixed precision with fp32 master weights, as Mesh TensorFlow trained the paper's
// models: parameters, their gradients and the optimizer stay fp32; the matmuls (projections,
// feed-forward layers, output and task heads, the attention core's per-head products) take
// bf16 operands; everything that normalizes (softmax, RMS/layer norm statistics, logsumexp,
// cross-entropy, z-loss, loss sums) runs in fp32 on converted values.
//
// How: explicit casts, not LibTorch's autocast. A scope sets this thread's compute dtype; a
// layer casts its matmul operands with to_compute() (a no-op in fp32, so fp32 numbers are
// those of a build without this file). Autograd casts each gradient back to its parameter's
// dtype, so gradients land in fp32. Residual streams stay fp32: in this ATen a mixed-dtype
// add (fp32 + bf16) is ~10x slower than a cast followed by a same-dtype add (measured: 12.5
// against 1.6 ms on 6M elements), so layers add with plus(), which casts first. Nothing here
// assumes the CPU: on CUDA the same casts select cuBLAS's bf16 GEMMs.
#pragma once
#include <torch/torch.h>

#include <string>

namespace thx {

// "fp32" or "bf16" (the only values train.precision accepts) as a dtype.
torch::ScalarType precision_dtype(const std::string& precision);

// This thread's compute dtype: kFloat32 (meaning: no casts) unless a bf16 PrecisionScope is open.
torch::ScalarType compute_dtype();

// Sets this thread's compute dtype until destroyed (scopes nest). "" keeps the current one.
class PrecisionScope {
 public:
  explicit PrecisionScope(const std::string& precision);
  explicit PrecisionScope(torch::ScalarType dtype);
  ~PrecisionScope();
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  torch::ScalarType saved_;
};

// t as a matmul operand: in a bf16 scope a floating-point t is cast to bf16; otherwise t
// itself, whatever its dtype (fp32 casts nothing, so float64 models stay float64).
torch::Tensor to_compute(const torch::Tensor& t);
// The dtype of a layer output computed from x: bf16 in a bf16 scope, else x's own.
torch::ScalarType output_dtype(const torch::Tensor& x);
// x + y in x's dtype (y cast first).
torch::Tensor plus(const torch::Tensor& x, const torch::Tensor& y);
// t widened to fp32 if it is bf16 or fp16 (before a normalizing reduction); fp32 and float64
// tensors are returned as they are.
torch::Tensor to_fp32(const torch::Tensor& t);

// What this CPU has for bf16, from /proc/cpuinfo (read once).
struct CpuBf16 {
  std::string model;          // "model name", e.g. "Intel(R) Xeon(R) Platinum 8488C"
  // "cpu family" and "model", e.g. "family 25, model 17" (a Zen 4 EPYC, whose model name in a VM
  // may be only "AMD EPYC"); empty where /proc/cpuinfo has neither.
  std::string family;
  bool amx_bf16 = false;      // AMX tiles with bf16 (Sapphire Rapids and later)
  bool avx512_bf16 = false;   // VDPBF16PS (Cooper Lake, Sapphire Rapids, AMD Zen 4 and later)
  bool native() const { return amx_bf16 || avx512_bf16; }
  // "amx_bf16 avx512_bf16", or "no amx_bf16, no avx512_bf16".
  std::string features() const;
  // "<model> (<family>; <features>)": what a benchmark names beside its numbers.
  std::string describe() const { return model + " (" + (family.empty() ? "" : family + "; ") + features() + ")"; }
};
const CpuBf16& cpu_bf16();

// The environment variable that lets bf16 run on a CPU without bf16 hardware (with a warning):
// for tests, which check the bf16 path at small sizes wherever they run.
inline constexpr const char* kBf16AnyCpuEnv = "THX_BF16_ANY_CPU";

// `precision` on `device`: InputError (exit 2) naming `where` for anything but fp32/bf16, and
// for bf16 on a CPU without AMX-BF16 or AVX512-BF16 (the message gives a bf16 and an fp32
// matmul rate measured now, unless kBf16AnyCpuEnv is set). On CUDA both are allowed.
void check_precision(const std::string& precision, const torch::Device& device, const std::string& where);
// The same on a described CPU instead of this one (tests: the refusal on any machine).
void check_precision(const std::string& precision, const torch::Device& device, const std::string& where,
                     const CpuBf16& cpu);

}  // namespace thx
