// bench_train.h: `thx bench train`, whole T5 training steps on random tokens.
//
// Reports step time, tokens/s, peak RSS and model FLOPs/s as a fraction of the matmul peak of
// the step's precision (fp32 or bf16, --precision both times each), measured in the same run. Model FLOPs = 2 x the multiply-adds of every matmul of the
// forward pass (attention by section 5's formulas, all terms; feed-forward; the output
// projection) x 3 for forward plus backward. Optionally also runs the PyTorch-eager peer
// (../shared/bench/peer_t5.py) on the same configuration and threads, and reports the ratio.
#pragma once
#include <string>
#include <vector>

#include "training/pretrain.h"

namespace thx {

struct BenchTrainOptions {
  PretrainConfig config;      // model, attention, data lengths, batch size, optimizer
  int64_t steps = 5, warmup = 2;
  std::string precision;      // fp32 | bf16 | both; empty: the config's train.precision
  std::string peer;           // path of peer_t5.py; empty: no peer run (bf16 rows run it with --bf16)
  bool peer_kept_heap = false;  // --peer-heap kept: the peer's heap kept as thx keeps its own (runtime.h)
  bool base_sweep = false;    // also: base size, batch 8, 512/114, MH and TH at h 12, 24, 48
  bool profile = false;       // also: one step per row under LibTorch's profiler, by phase (step_profile.h)
  std::string trace_dir;      // with profile, on a GPU: each profiled step's Kineto trace here (<row>.json)
  std::vector<std::string> aten;  // --aten: parts by their ATen composition, not thx's kernels (the CPU's
                                 // loops, a GPU's kernels): adafactor, loss, rms_norm
  std::string markdown_out;
  torch::Device device{torch::kCPU};  // --device: on CUDA the matmul peak is 8192^3, the peer runs
                                      // compiled with SDPA, memory is the GPU's peak of tensors
  int64_t base_batch = 0;             // T5 base rows' batch; 0: 8 on the CPU, 32 on a GPU
  std::vector<int64_t> base_heads;    // the base rows' h; empty: 12, 24, 48 (T5), 12, 48 (BERT, ALBERT)
  std::vector<int64_t> peer_heads{12, 48};  // the T5 base rows the peer runs beside (in bf16)
  bool base_only = false;             // --base without the configured model's rows
  bool tiled = false;                 // on a GPU, talking-heads on the tiled path (not the fused kernels)
  bool deterministic_cost = false;    // also: each row timed again under train.deterministic, in the same run
};

std::string bench_train(const BenchTrainOptions& options);

// Forward multiply-adds of one training example (all matmuls), from the resolved model.
double t5_forward_multiplies(const ModelSpec& spec, int64_t inputs_length, int64_t targets_length,
                             int64_t vocab_size);
// BERT/ALBERT: layers, the E -> d projection, the MLM head over `predictions` positions, pooler.
double encoder_forward_multiplies(const ModelSpec& spec, int64_t length, int64_t predictions, int64_t vocab_size);

}  // namespace thx
