// core_paths.cpp: which path attention_core takes (attention/fused.h: the switches, `--th-path`).
// On the CPU the fused row-kernel cores of fused.cpp where they take the call; on CUDA,
// multi-head by ATen's scaled_dot_product_attention and the talking-heads family by the fused
// kernels (cuda/th_fused.h), the flash kernels, blocks of query rows (tiled.h), the folded
// products (folded.h) or the heads-major products (heads_gemm.h); else the ATen composition
// attention_core_reference. One place decides, for every caller.
#include <ATen/Context.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>

#include "attention/config.h"
#include "attention/cuda/th_fused.h"
#include "attention/cuda/th_rows_args.h"
#include "attention/folded.h"
#include "attention/fused.h"
#include "attention/heads_gemm.h"
#include "attention/kernels.h"
#include "attention/tiled.h"
#include "common/runtime.h"
#include "common/torch_compat.h"

namespace thx {

using torch::Tensor;

namespace {
std::atomic<bool> g_sdpa{true}, g_tiled{true}, g_th_kernels{false};  // (th_path's default: tiled)
std::atomic<bool> g_row_kernels{true}, g_row_tensor_cores{true}, g_flash_kernels{false}, g_folded{false},
    g_gemm{false}, g_tiled_narrow{false}, g_th_paths_on_cpu{false};
}  // namespace
void set_sdpa_attention(bool enabled) { g_sdpa = enabled; }
void set_tiled_attention(bool enabled) { g_tiled = enabled; }
void set_th_kernels(bool enabled) { g_th_kernels = enabled; }
void set_tiled_row_kernels(bool enabled) { g_row_kernels = enabled; }
void set_row_tensor_cores(bool enabled) { g_row_tensor_cores = enabled; }
void set_flash_kernels(bool enabled) { g_flash_kernels = enabled; }
void set_folded_attention(bool enabled) { g_folded = enabled; }
void set_heads_gemm_attention(bool enabled) { g_gemm = enabled; }
void set_tiled_narrow(bool enabled) { g_tiled_narrow = enabled; }
namespace {
std::atomic<const cuda_th::RowsLauncher*> g_cpu_rows{nullptr};  // set_th_paths_on_cpu's launcher
}  // namespace
void set_th_paths_on_cpu(bool enabled, const cuda_th::RowsLauncher* rows) {
  g_th_paths_on_cpu = enabled, g_cpu_rows = enabled ? rows : nullptr;
}
namespace {
bool row_tensor_cores() { return g_row_tensor_cores && th_tensor_cores(); }
// Deterministic algorithms are on (train.deterministic, common/determinism.h): thx's kernels that
// add by atomics, the fused kernels' and the flash backward, step aside (here and in tiled.cpp).
bool deterministic() { return at::globalContext().deterministicAlgorithms(); }
}  // namespace
std::string tiled_path_description() {
  const bool rows = g_row_kernels && cuda_th_rows_launcher();
  if (g_tiled_narrow)
    return std::string("the tiled path (cuBLAS products; between them, in the operands' dtype, bf16 mixings as cuBLAS "
                       "products and ") +
           (rows ? "the bias, mask and softmax in one launch of thx's softmax kernel)" : "ATen's softmax)");
  if (!rows) return "the tiled path (cuBLAS products, ATen's composition between)";
  if (g_flash_kernels && row_tensor_cores() && deterministic())
    return "thx's flash forward (bf16 on tensor cores), the backward by the tiled path (the flash backward adds by "
           "atomics, and deterministic algorithms are on: train.deterministic; cuBLAS products, thx's row kernels "
           "between)";
  if (g_flash_kernels && row_tensor_cores())
    return "thx's flash kernels (bf16 on tensor cores, forward and backward; else the tiled path: cuBLAS products, "
           "thx's row kernels between)";
  return std::string("the tiled path (cuBLAS products, thx's row kernels between; bf16 mixings ") +
         (row_tensor_cores() ? "on tensor cores)" : "as fp32 FMAs)");
}

std::string folded_path_description() {
  return "the folded products (P_l folded into Q, P_w into V; cuBLAS's products, ATen's softmax; the weights kept)";
}

std::string heads_gemm_path_description() {
  const bool rows = g_row_kernels && cuda_th_rows_launcher();
  return std::string("heads-major products in the operands' dtype (the mixings as cuBLAS GEMMs over n m; ") +
         (rows ? "the bias, mask and softmax in one launch of thx's softmax kernel" : "ATen's softmax") +
         "; the weights kept)";
}

namespace {
std::string g_th_path = "tiled";  // set once, before any command runs
bool g_th_path_chosen = false;
}  // namespace
void set_th_path(const std::string& path, bool chosen) {
  TORCH_CHECK(path == "fused" || tiled_path(path) || path == "batched" || path == "folded" || heads_gemm_path(path),
              "set_th_path: ", path);
  g_th_path = path, g_th_path_chosen = chosen;
  set_tiled_attention(path != "batched");
  set_th_kernels(path == "fused");
  set_tiled_row_kernels(path != "tiled-aten" && path != "gemm-aten");
  set_tiled_narrow(path == "tiled-gemm");
  set_row_tensor_cores(path != "tiled-fma");
  set_flash_kernels(path == "flash");
  set_folded_attention(path == "folded");
  set_heads_gemm_attention(heads_gemm_path(path));
}
const std::string& th_path() { return g_th_path; }
bool th_path_chosen() { return g_th_path_chosen; }

namespace {
// keeps_attention_weights's rule, the talking-heads family's route given: on the tiled path (or
// the fused kernels) or not, and with the folded or heads-major products chosen or not.
bool keeps_weights(const AttentionDims& d, const torch::Device& device, bool tiled, bool folded_or_gemm) {
  // (attention_core's routes below, and projected.cpp's for dropout and dynamic projections)
  if (device.is_cpu() || d.d_k == 0 || d.any_dynamic() || d.dropout > 0) return true;
  if (!d.has_P_l() && !d.has_P_w()) return !(THX_HAVE_SDPA && device.is_cuda() && g_sdpa);
  return !tiled || folded_or_gemm;
}
}  // namespace

bool keeps_attention_weights(const AttentionDims& d, const torch::Device& device) {
  return keeps_weights(d, device, g_tiled, g_folded || g_gemm);
}
bool keeps_attention_weights_on_tiled_path(const AttentionDims& d, const torch::Device& device) {
  return keeps_weights(d, device, true, false);
}

namespace {
std::atomic<int> g_bf16_core{-1};  // -1: as THX_BF16_CORE says; else a Bf16Core set by set_bf16_core
// THX_BF16_CORE's choice: unset, empty or "auto" automatic; nullopt for a value that is none.
std::optional<Bf16Core> env_choice() {
  const char* v = std::getenv("THX_BF16_CORE");
  const std::string s = v ? v : "";
  if (s.empty() || s == "auto") return Bf16Core::automatic;
  if (s == "bf16") return Bf16Core::bf16;
  if (s == "fp32") return Bf16Core::fp32;
  return std::nullopt;
}
Bf16Core env_bf16_core() {
  static const Bf16Core core = env_choice().value_or(Bf16Core::automatic);  // (refused before any work: cli.cpp)
  return core;
}
}  // namespace
void set_bf16_core(Bf16Core core) { g_bf16_core = int(core); }
Bf16Core bf16_core() {
  const int set = g_bf16_core;
  return set < 0 ? env_bf16_core() : Bf16Core(set);
}
bool bf16_mixings_on_tiles(int64_t h_k, int64_t h, int64_t h_v, bool P_l, bool P_w) {
  return (P_l && kernels::amx::pays(h, h_k, 0)) || (P_w && kernels::amx::pays(h_v, h, 0));
}
bool bf16_core_in_fp32(int64_t d_k, int64_t d_v, int64_t h, int64_t m, bool mixings_on_tiles) {
  switch (bf16_core()) {
    case Bf16Core::bf16: return false;
    case Bf16Core::fp32: return true;
    default: break;
  }
  const int64_t width = std::max(d_k, d_v);
  const bool mixings_pay = mixings_on_tiles && (width == kBf16CoreFp32Width || h * m >= kBf16CoreHeadRows);
  return !kernels::amx::cpu_has_amx() && width <= kBf16CoreFp32Width && !mixings_pay;
}
bool bf16_on_fp32_core(const AttentionDims& d, int64_t m, const torch::Device& device) {
  const bool th_routed_off = g_th_paths_on_cpu && (d.has_P_l() || d.has_P_w());  // (the tests' tiled route)
  return device.is_cpu() && d.d_k > 0 && !d.any_dynamic() && d.dropout <= 0 && !th_routed_off &&
         fused_attention_enabled() && cpu_kernels_enabled() &&
         bf16_core_in_fp32(d.d_k, d.d_v, d.h, m,
                           bf16_mixings_on_tiles(d.h_k, d.h, d.h_v, d.has_P_l(), d.has_P_w()));
}
std::string bf16_core_env_error() {
  if (env_choice()) return "";
  return "THX_BF16_CORE=" + std::string(std::getenv("THX_BF16_CORE")) +
         ": not a choice of the CPU's bf16 attention core; allowed: auto, bf16, fp32";
}

namespace {
// bf16 Q, K, V on the CPU where bf16_core_in_fp32: the fp32 core on them widened, its result
// rounded to bf16 (autograd rounds Q's, K's and V's gradients the same way); undefined where the
// fp32 core does not take the call.
Tensor bf16_by_fp32_core(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l, const Tensor& P_w,
                         const Tensor& bias, const Tensor& mask) {
  const auto bf16 = [](const Tensor& t) { return t.scalar_type() == torch::kBFloat16; };
  if (!Q.is_cpu() || !bf16(Q) || !bf16(K) || !bf16(V) || Q.dim() != 4 || V.dim() != 4)
    return Tensor();
  // Q [b,n,h_k,d_k], V [b,m,h_v,d_v], P_l [h_k,h], P_w [h,h_v]
  const int64_t h = P_l.defined() ? P_l.size(1) : P_w.defined() ? P_w.size(0) : Q.size(2);
  if (!bf16_core_in_fp32(Q.size(3), V.size(3), h, K.size(1),
                         bf16_mixings_on_tiles(Q.size(2), h, V.size(2), P_l.defined(), P_w.defined())))
    return Tensor();
  const auto fp32 = [](const Tensor& t) { return t.defined() ? t.to(torch::kFloat32) : t; };
  const Tensor O = cpu_attention_core(fp32(Q), fp32(K), fp32(V), fp32(P_l), fp32(P_w), fp32(bias), mask);
  return O.defined() ? O.to(torch::kBFloat16) : O;
}
}  // namespace

Tensor attention_core(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l,
                      const Tensor& P_w, const Tensor& bias, const Tensor& mask) {
  RECORD_USER_SCOPE("thx::attention_core");  // (a profile's phase: experiments/step_profile.h)
#if THX_HAVE_SDPA
  if (!P_l.defined() && !P_w.defined() && Q.is_cuda() && g_sdpa) {
    c10::optional<Tensor> additive;  // broadcastable to [b,h,n,m]; true = attend for a bool mask
    if (bias.defined())
      additive = mask.defined() ? torch::where(mask, bias, -std::numeric_limits<double>::infinity()).to(Q.scalar_type())
                                : bias.to(Q.scalar_type());
    else if (mask.defined())
      additive = mask;
    const Tensor O = at::scaled_dot_product_attention(Q.transpose(1, 2), K.transpose(1, 2), V.transpose(1, 2),
                                                      additive, /*dropout_p=*/0.0, /*is_causal=*/false,
                                                      /*scale=*/1.0);  // [b,h,n,d_v]
    return O.transpose(1, 2);                                        // [b,n,h,d_v]
  }
#endif
  // The talking-heads family off the CPU: thx's fused CUDA kernels (cuda/th_fused.h) where built,
  // the problem is one they take and deterministic algorithms are off, else blocks of query rows
  // (tiled.h: cuBLAS's products, thx's row kernels between them where built); neither keeps
  // anything of size [b,h,n,m]. Or, where
  // chosen (`--th-path folded`), the folded products (folded.h), or (`--th-path gemm`) the
  // heads-major products (heads_gemm.h: the softmax by thx's softmax kernel where built, `gemm-aten`
  // by ATen's), which keep the weights.
  const bool th_off_cpu = (P_l.defined() || P_w.defined()) && (!Q.device().is_cpu() || g_th_paths_on_cpu);
  if (th_off_cpu && g_folded) return folded_attention_core(Q, K, V, P_l, P_w, bias, mask);
  const cuda_th::RowsLauncher* rows = !g_row_kernels ? nullptr
                                      : Q.is_cuda()   ? cuda_th_rows_launcher(row_tensor_cores(), g_flash_kernels)
                                      : Q.is_cpu()    ? g_cpu_rows.load()  // (the tests' emulator, or null)
                                                      : nullptr;
  if (th_off_cpu && g_gemm) return heads_gemm_attention_core(Q, K, V, P_l, P_w, bias, mask, rows);
  if (th_off_cpu && g_tiled) {
    const cuda_th::Launcher* kernels = Q.is_cuda() && g_th_kernels && !deterministic() ? cuda_th_launcher() : nullptr;
    if (kernels && fused_th_unsupported(Q, K, V, P_l, P_w, bias, mask, *kernels).empty())
      return fused_th_attention_core(Q, K, V, P_l, P_w, bias, mask, *kernels);
    return tiled_attention_core(Q, K, V, P_l, P_w, bias, mask, 0, rows, g_tiled_narrow);
  }
  if (const Tensor O = bf16_by_fp32_core(Q, K, V, P_l, P_w, bias, mask); O.defined()) return O;
  const Tensor O = cpu_attention_core(Q, K, V, P_l, P_w, bias, mask);
  return O.defined() ? O : attention_core_reference(Q, K, V, P_l, P_w, bias, mask);
}

}  // namespace thx
