// bench_attention.h: `thx bench attention`, forward plus backward of one attention layer.
//
// Times multi_head and talking_heads (h_k = h = h_v, d_k = d_v = d_model / h) and the paper's
// einsum reference, and the fp32 matmul peak of this machine in the same run, so that every
// number reported is a ratio measured side by side. A benchmark, not a test: it asserts
// nothing and prints whether the targets of the foundation issue are met.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attention/config.h"
#include "attention/cuda/th_fused.h"

namespace thx {

struct BenchAttentionOptions {
  int64_t d_model = 768, n = 512, batch = 2;
  // The keys' and values' positions (an encoder-decoder attention's memory); 0: n, self-attention
  // (the queries' own positions are the memory, as in an encoder's layer).
  int64_t m = 0;
  std::vector<int64_t> heads = {6, 12, 24, 48};
  int64_t reps = 5, warmup = 2;
  bool reference = true;
  // T5's relative position bias: each layer's logits get a learned [1, h, n, m] fp32 bias, whose
  // gradient the backward computes (as in T5's first layer; the others share it and add theirs).
  bool bias = false;
  // On a GPU, talking-heads takes `thx --th-path`'s path (attention/fused.h; tiled by default)
  // unless one of these names another: `tiled` the tiled path, `batched` the batched
  // composition, `fused` thx's fused CUDA kernels where built (cuda/th_fused.h; set by their own
  // options); `fma` keeps thx's kernels' bf16 products off the tensor cores (the fused kernels'
  // version 1, the row kernels' FMAs);
  // `unpadded` keeps their bf16 planes' heads unpadded (set_th_padded_heads: the same numbers).
  bool batched = false, tiled = false, fused = false, fma = false, unpadded = false;
  // The fused kernels' forced tiles and threads (--th-tiles, --th-threads; zeros: their own choice).
  ThLaunch th_launch;
  std::string precision = "fp32";  // fp32 | bf16 | both (each with its own matmul peak)
  std::string markdown_out;  // also write the report here
  torch::Device device{torch::kCPU};  // --device (on CUDA the matmul peak is 8192^3); peak memory
                                      // is reported per row there (the GPU's peak of tensors)
};

// Runs the benchmark and returns the Markdown report (also printed to stdout). A variant that runs
// out of device memory (c10::OutOfMemoryError) in a cell says so in its row, and the rest go on.
std::string bench_attention(const BenchAttentionOptions& opt);

// For tests: called before each timed production step with the layer's dimensions, its bias
// (undefined without --bias) and its memory (the keys' and values' inputs: the queries' own
// without --m) (a CPU cannot run out of memory on demand; a test's hook throws
// c10::OutOfMemoryError). Empty by default.
using BenchAttentionStepHook =
    std::function<void(const AttentionDims&, const torch::Tensor& bias, const torch::Tensor& memory)>;
BenchAttentionStepHook& bench_attention_step_hook();
// For tests: called before a variant allocates a cell's inputs (X, dY and the bias) with the
// layer's dimensions and their bytes. Empty by default.
std::function<void(const AttentionDims&, int64_t bytes)>& bench_attention_inputs_hook();

// Best observed GFLOP/s of a square matmul of size `size` in `precision` (fp32 | bf16) on
// `device` (a GPU's timed after it has finished the work).
double matmul_peak_gflops(int64_t size = 2048, int64_t reps = 5, const std::string& precision = "fp32",
                          const torch::Device& device = torch::Device(torch::kCPU));

// --precision of the benchmarks: "fp32", "bf16" or "both" as the list to time, each checked
// on `device` (check_precision: bf16 on a CPU without bf16 hardware is an InputError naming
// `flag`).
std::vector<std::string> bench_precisions(const std::string& value, const std::string& flag,
                                          const torch::Device& device = torch::Device(torch::kCPU));

}  // namespace thx
