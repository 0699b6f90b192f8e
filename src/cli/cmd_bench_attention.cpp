// thx bench attention: one attention layer timed (experiments/bench_attention.h).
#include "cli/command.h"
#include "common/runtime.h"
#include "experiments/bench_attention.h"

namespace thx {
namespace {

struct BenchAttentionCommand : Command {
  BenchAttentionOptions opt;
  bool no_reference = false;

  explicit BenchAttentionCommand(CLI::App& parent) {
    app = parent.add_subcommand(
        "attention", "Forward+backward of one attention layer: multi_head vs talking_heads at "
                     "each h, vs the paper's einsum reference, vs the fp32 matmul peak");
    app->add_option("--d-model", opt.d_model)->capture_default_str()->check(CLI::PositiveNumber);
    app->add_option("--n", opt.n, "n = m")->capture_default_str()->check(CLI::PositiveNumber);
    app->add_option("--batch", opt.batch)->capture_default_str()->check(CLI::PositiveNumber);
    app->add_option("--heads", opt.heads, "head counts h (d_k = d_v = d_model / h)")
        ->delimiter(',')
        ->capture_default_str();
    app->add_option("--reps", opt.reps, "timed runs per layer (median)")
        ->capture_default_str()->check(CLI::PositiveNumber);
    app->add_flag("--no-reference", no_reference, "skip the einsum reference");
    app->add_option("--precision", opt.precision, "fp32 | bf16 | both (each with its own matmul peak; the einsum "
                                                  "reference runs in fp32)")->capture_default_str();
    app->add_option("--out", opt.markdown_out, "also write the Markdown report here");
    CLI::Option* batched = app->add_flag("--batched", opt.batched, "on a GPU, talking-heads through the batched ATen "
                                                                 "composition (every [b,h,n,m] tensor kept)");
    CLI::Option* tiled = app->add_flag("--tiled", opt.tiled, "on a GPU, talking-heads through the tiled ATen path, "
                                                             "not thx's fused CUDA kernels")->excludes(batched);
    app->add_flag("--fma", opt.fma, "on a GPU, the fused kernels' bf16 products as fp32 FMAs (their version 1), "
                                    "not on tensor cores")->excludes(batched)->excludes(tiled);
  }

  int run() override {
    for (int64_t h : opt.heads)
      if (h < 1 || opt.d_model % h != 0)
        throw InputError(fmt::format("--heads: {} does not divide --d-model {}", h, opt.d_model));
    opt.reference = !no_reference;
    opt.device = resolve_device(device_request(), "--device");
    bench_attention(opt);
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> make_bench_attention_command(CLI::App& bench) {
  return std::make_unique<BenchAttentionCommand>(bench);
}

}  // namespace thx
