// fused.h: the fused CPU attention core of the talking-heads family.
//
// Layout: [b, n, heads, m] ("rows-major"), the layout the input projections produce. For one
// query position, the rows of all heads are one contiguous block, so the head projections
// run on data in cache; BLAS reads and writes each head's [n, m] block in place through its
// leading dimension (blas.h), so no tensor is ever transposed.
//
// attention_core():  Q [b,n,h_k,d_k], K [b,m,h_k,d_k], V [b,m,h_v,d_v] -> O [b,n,h_v,d_v]
//   J = Q·K (per head, BLAS)  ->  per query row, in cache (kernels.h):
//   L = P_l^T J, + bias, mask, W = softmax_m(L), U = P_w^T W  ->  O = U·V (per head, BLAS)
// heads_softmax():   the middle part alone, J [b,n,h_k,m] -> U [b,n,h_v,m] (general bilinear).
//
// P_l [h_k,h] and P_w [h,h_v] may be undefined (multi-head and the hybrids). bias and mask
// are broadcastable to [b,h,n,m] (the attention interface's indexing), mask bool.
// Backward recomputes nothing: it reads W (and J, U where the projections need them) once.
// Per-thread partial sums for dP_l, dP_w and the bias gradient avoid any locking.
//
// bf16 (common/precision.h): with Q, K, V in bf16, attention_core's per-head products are
// oneDNN bf16 matmuls on heads-major tensors, and the same row kernels run on fp32 copies of
// each query row (fused.cpp, "attention_core in bf16"); the result is bf16. heads_softmax
// takes a bf16 J through the fp32 kernels and rounds its result once. P_l, P_w and the bias
// stay fp32 parameters. The head mixings and grams run in fp32 on AVX-512 or AVX2, except on
// CPUs with AMX-BF16 (Sapphire and Emerald Rapids) at 24 or more heads: there they are tile
// products of bf16 factors with fp32 sums (kernels.h, amx), P_l and P_w rounded once per
// call, the stored W into U, and dL into dJ and dP_l rounded; about 1.5x faster at 48 heads
// in one bf16 layer (docs/benchmarks.md). tests/attention/bf16_test.cpp bounds both.
//
// Both fall back to an ATen composition of the same math (the *_reference functions: the
// products in their operands' dtype, logits to weights in fp32) for what the fused code does
// not cover: tensors off the CPU or of another dtype, and a bias or mask broadcast along m. Dropout and the dynamic projections are not here: projected.cpp
// keeps its ATen path for them.
#pragma once
#include <torch/torch.h>

#include <string>

namespace thx {

struct AttentionDims;  // attention/config.h
namespace cuda_th {
struct RowsLauncher;  // attention/cuda/th_rows_args.h
}

torch::Tensor attention_core(const torch::Tensor& Q, const torch::Tensor& K,
                             const torch::Tensor& V, const torch::Tensor& P_l,
                             const torch::Tensor& P_w, const torch::Tensor& bias,
                             const torch::Tensor& mask);

torch::Tensor heads_softmax(const torch::Tensor& J, const torch::Tensor& P_l,
                            const torch::Tensor& P_w, const torch::Tensor& bias,
                            const torch::Tensor& mask);

// The plain ATen compositions (and fallbacks). Same arguments, same results.
torch::Tensor attention_core_reference(const torch::Tensor& Q, const torch::Tensor& K,
                                       const torch::Tensor& V, const torch::Tensor& P_l,
                                       const torch::Tensor& P_w, const torch::Tensor& bias,
                                       const torch::Tensor& mask);
torch::Tensor heads_softmax_reference(const torch::Tensor& J, const torch::Tensor& P_l,
                                      const torch::Tensor& P_w, const torch::Tensor& bias,
                                      const torch::Tensor& mask);

// fused.cpp's CPU cores alone (fp32 or bf16 Q, K, V on the CPU, fp32 projections and bias, a bias
// and mask readable row by row, the fused code enabled); undefined where they do not take the
// call. attention_core (core_paths.cpp) routes through it.
torch::Tensor cpu_attention_core(const torch::Tensor& Q, const torch::Tensor& K, const torch::Tensor& V,
                                 const torch::Tensor& P_l, const torch::Tensor& P_w, const torch::Tensor& bias,
                                 const torch::Tensor& mask);

// Which core takes bf16 Q, K, V on the CPU (core_paths.cpp). `bf16`: the bf16 core above, its
// per-head products oneDNN's bf16 matmuls. `fp32`: the fp32 core on Q, K, V widened to fp32
// (exact), its products and sums in fp32, the output (and Q's, K's, V's gradients) rounded to
// bf16 once: no less accurate than the bf16 core, whose weights W are rounded before U V.
// `automatic` takes the fp32 core where the CPU has no AMX-BF16 and no head is wider than
// kBf16CoreFp32Width: on an AVX512-BF16 EPYC (Zen 5, 2026-12-02) oneDNN's bf16 matmuls over
// heads of 4 to 16 ran one layer 1.1-2.0x slower than the fp32 core's products in cache; at 32
// the two were within 1.17x, at 64 the bf16 core was 1.25-1.5x faster. With AMX (an Emerald
// Rapids Xeon) the bf16 core won at n = 512 and on tiles (docs/benchmarks.md, "The bf16 core at
// small heads on an EPYC without AMX", and the section before it). Heads of exactly 16 take the
// bf16 core where its head mixings run on VDPBF16PS (kernels.h, amx::pays): one talking-heads
// layer at 48 heads, d_model 768, n = 512 ran 1.2x faster there, and no layer measured slower
// that day (docs/benchmarks.md, "The bf16 head mixings through VDPBF16PS"; a later run found the
// fp32 core 1.1-1.25x faster at n = 128, batch 8: left so, see "Many narrow heads"). Narrower
// heads mixed there take the bf16 core where the heads times the keys' length m come to
// kBf16CoreHeadRows: there the mixings' work outweighs oneDNN's narrow products, and one
// talking-heads layer ran 1.07-2.3x faster on the bf16 core (d_model 192 to 768, 32 to 768 heads,
// n 128 to 512); below it the fp32 core was up to 1.34x faster, the bf16 core at most 1.14x
// (docs/benchmarks.md, "Many narrow heads: the bf16 core by heads x length"). The keys decide, not
// the queries: where h x m came to it the bf16 core was 1.19-1.8x faster at 8 to 114 queries
// (an encoder-decoder attention's) and tied at one ("Encoder-decoder attention: the keys decide").
// THX_BF16_CORE=auto|bf16|fp32 chooses for a run (read once); tests set it.
enum class Bf16Core { automatic, bf16, fp32 };
constexpr int64_t kBf16CoreFp32Width = 16, kBf16CoreHeadRows = 16384;
void set_bf16_core(Bf16Core core);
Bf16Core bf16_core();
// Whether the bf16 core's head mixings of h_k -> h (P_l) and h -> h_v (P_w) run on tiles
// (fused.cpp's choice: kernels::amx::pays).
bool bf16_mixings_on_tiles(int64_t h_k, int64_t h, int64_t h_v, bool P_l, bool P_w);
// Whether bf16 Q, K, V with h heads of d_k and d_v over m keys, and head mixings on tiles or not,
// take the fp32 core (the choice above; the queries' number does not enter it).
bool bf16_core_in_fp32(int64_t d_k, int64_t d_v, int64_t h, int64_t m, bool mixings_on_tiles);
// What is wrong with THX_BF16_CORE, in one line, or "" (thx refuses it before any work: cli.cpp).
std::string bf16_core_env_error();
// Whether bf16 attention of `dims` over m keys trained on `device` runs on that fp32
// core (the CPU, the choice above, and attention_core's route to fused.cpp's cores: no dynamic
// projections, no attention dropout, the fused code enabled), which keeps Q, K, V and the weights
// in fp32 for backward: the memory check's bound (models/spec.h) counts them at 4 bytes there.
bool bf16_on_fp32_core(const AttentionDims& dims, int64_t m, const torch::Device& device);

// Use the fused code where it applies (default true). For tests and benchmarks.
void set_fused_attention(bool enabled);
bool fused_attention_enabled();

// Multi-head (no P_l, no P_w) on a GPU with a LibTorch that has it (2.x, THX_HAVE_SDPA): PyTorch's
// scaled_dot_product_attention (its flash or memory-efficient kernels), scale 1 (thx's logits
// are unscaled, as T5's: the 1/sqrt(d_k) lives in P_q's initialization), the bias and mask as
// one additive mask in the operands' dtype. The switch turns it off (benchmarks, tests).
void set_sdpa_attention(bool enabled);

// The talking-heads family (P_l or P_w) off the CPU: tiled.h's blocks of query rows, keeping
// nothing of size [b,h,n,m] for backward (default true), or the batched composition
// attention_core_reference (false; benchmarks).
void set_tiled_attention(bool enabled);
// Within that: thx's fused CUDA kernels (attention/cuda/th_fused.h) where thx was built with them
// and they take the problem (default true), or the tiled path always (false; benchmarks).
void set_th_kernels(bool enabled);
// On the tiled path: the work between its products by thx's row kernels (attention/cuda/
// th_rows_args.h) where thx was built with them and they take the problem (default true), or by
// ATen's composition (false: `thx --th-path tiled-aten`, `gemm-aten`). With set_tiled_narrow, and
// on the heads-major path, their launcher's softmax kernels take the bias, mask and softmax alone
// (tiled.h, rows_softmax).
void set_tiled_row_kernels(bool enabled);
// On the tiled path with the row kernels: bf16 mixed on tensor cores where th_tensor_cores (cuda/
// th_fused.h) also allows (default true), or as fp32 FMAs (false: `thx --th-path tiled-fma`).
void set_row_tensor_cores(bool enabled);
// On the tiled path with the row kernels on tensor cores: bf16 as flash-style kernels forward and
// backward (attention/cuda/th_flash_args.h) where they take the problem (true: `thx --th-path
// flash`), or over blocks of rows (default false).
void set_flash_kernels(bool enabled);
// The talking-heads family off the CPU as the folded products (attention/folded.h: the mixings
// folded into Q and V, every multiply in cuBLAS's large GEMMs, the weights kept for backward;
// true: `thx --th-path folded`), ahead of the tiled path and the fused kernels (default false).
void set_folded_attention(bool enabled);
// The folded products in a benchmark's words.
std::string folded_path_description();
// The talking-heads family off the CPU as heads-major products in the operands' dtype
// (attention/heads_gemm.h: the mixings as cuBLAS GEMMs over the n m positions, the weights kept
// for backward; true: `thx --th-path gemm` and `gemm-aten`), ahead of the tiled path (default
// false). Its softmax takes thx's softmax kernels where set_tiled_row_kernels leaves them on (gemm).
void set_heads_gemm_attention(bool enabled);
// The heads-major products in a benchmark's words.
std::string heads_gemm_path_description();
// On the tiled path: the work between its products as ATen's composition in the operands' dtype,
// the mixings cuBLAS's products (true: `thx --th-path tiled-gemm`; tiled.h's `narrow`), its
// softmax by thx's softmax kernels where set_tiled_row_kernels leaves them on; else as set_tiled_row_kernels
// says (default false).
void set_tiled_narrow(bool enabled);
// The tiled path in a benchmark's words: its products, and what runs between them now.
std::string tiled_path_description();
// CPU tensors of the talking-heads family take the path set_th_path chose, as off the CPU
// (true), not the CPU's own cores (default false). For the tests: a whole model's step through
// the paths a GPU would run, on the CPU: the ATen-only ones (tiled-aten, tiled-gemm, gemm-aten,
// folded), and with `rows` (the row kernels' launcher: the tests' CPU emulator) those that run
// them (tiled, gemm); without it tiled is tiled-aten there and gemm gemm-aten. The launcher must
// outlive the autograd nodes made meanwhile (the tiled path's keeps its address).
void set_th_paths_on_cpu(bool enabled, const cuda_th::RowsLauncher* rows = nullptr);
// What a user asked for (`thx --th-path`): "tiled" (the default: thx's row kernels between
// cuBLAS's products where built, bf16 mixings on tensor cores), "tiled-fma" (the same with the row
// kernels' fp32 FMAs for bf16 too: set_row_tensor_cores(false)), "tiled-aten" (the same path with
// ATen's composition between them: no thx kernel), "tiled-gemm" (ATen's composition in the
// operands' dtype, the softmax by thx's kernels: set_tiled_narrow(true)), "flash" (tiled with the flash kernels:
// set_flash_kernels(true)), "fused" (thx's fused CUDA kernels where built and the problem is
// theirs, else tiled), "folded" (set_folded_attention(true)), "gemm"
// (set_heads_gemm_attention(true), the softmax by thx's kernels), "gemm-aten" (the same with
// ATen's softmax: set_tiled_row_kernels(false)) or "batched"; sets the eight switches above.
// `chosen`: named by the user, not the default (a benchmark's own path flags may then not
// contradict it). Tiled is the default because it measured faster than the fused kernels on an
// H100 at 7 of 9 layer shapes (3-5x at n = 8192) and keeps no [b,h,n,m] tensor, unlike batched
// (docs/benchmarks.md, the third session).
void set_th_path(const std::string& path, bool chosen = true);
const std::string& th_path();
bool th_path_chosen();
// Whether attention of `dims` trained on `device` keeps a tensor of size [b,h,n,m] for backward
// (what the memory check's lower bound counts, models/spec.h): on the CPU, yes (the fused cores
// keep W, and J and U where the mixings need them); off it, no for multi-head through
// scaled_dot_product_attention and for the talking-heads family on the tiled path or the fused
// kernels (the default), yes for the batched composition (`--th-path batched`), the folded and
// the heads-major products (`--th-path folded`, `--th-path gemm`: the weights), the dynamic
// projections, attention dropout and general bilinear, which take ATen's composition everywhere.
bool keeps_attention_weights(const AttentionDims& dims, const torch::Device& device);
// The same on the tiled path (`--th-path tiled`, whichever path is chosen): what a run that keeps
// them only by its path's choice (batched, folded, gemm) would keep there.
bool keeps_attention_weights_on_tiled_path(const AttentionDims& dims, const torch::Device& device);
// Whether `path` (a --th-path value) is one of the tiled path's five forms.
inline bool tiled_path(const std::string& path) {
  return path == "tiled" || path == "tiled-fma" || path == "tiled-aten" || path == "tiled-gemm" || path == "flash";
}
// Whether `path` is one of the heads-major path's two forms (heads_gemm.h).
inline bool heads_gemm_path(const std::string& path) { return path == "gemm" || path == "gemm-aten"; }

}  // namespace thx
