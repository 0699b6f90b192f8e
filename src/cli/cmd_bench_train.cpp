// thx bench train: whole training steps timed (experiments/bench_train.h).
#include <fmt/ranges.h>

#include <algorithm>

#include "attention/fused.h"
#include "cli/command.h"
#include "common/fs.h"
#include "common/runtime.h"
#include "experiments/bench_train.h"
#include "training/spec.h"

namespace thx {
namespace {

struct BenchTrainCommand : Command {
  ConfigOptions config;
  BenchTrainOptions topt;
  CLI::Option* peer_heads = nullptr;
  std::string peer_heap_ = "glibc";

  explicit BenchTrainCommand(CLI::App& parent) {
    app = parent.add_subcommand(
        "train", "Whole training steps (T5, BERT or ALBERT, by model.type) on random tokens: step "
                 "time, tokens/s, model FLOPs as a fraction of the matmul peak; multi-head and "
                 "talking-heads of the configured h");
    config.add_to(app);
    app->add_option("--steps", topt.steps, "timed steps (median)")->capture_default_str()
        ->check(thx::positive_number());
    app->add_option("--precision", topt.precision,
                    "fp32 | bf16 | both (each timed, with its own matmul peak); default: train.precision")
        ->type_name("PRECISION");
    CLI::Option* peer = app->add_option("--peer", topt.peer,
                                        "also run this peer_t5.py (PyTorch eager; --bf16 beside thx's bf16 rows) on "
                                        "the same configuration and threads; with --base also at base size, "
                                        "h = 12 and 48, in bf16")->type_name("FILE");
    CLI::Option* base = app->add_flag("--base", topt.base_sweep,
                    "also time the base size: T5 at batch 8 (--base-batch), 512/114, h = 12, 24, 48; BERT-base or "
                    "ALBERT-base at batch 4, length 512, h = 12, 48");
    CLI::Option* profile = app->add_flag("--profile", topt.profile,
                  "also profile one step of each row: time by phase and the top ops (on a GPU, each kernel's "
                  "time on it, by Kineto, under the op that launched it); the fastest of three steps under the "
                  "profiler on the CPU, the second of two on a GPU");
    app->add_option("--trace", topt.trace_dir, "with --profile on a GPU: also write each profiled step's timeline "
                                               "here, one Chrome trace a row (Kineto's; Perfetto reads it)")
        ->type_name("DIR")->needs(profile);
    app->add_option("--aten", topt.aten,
                    "these parts by their ATen composition, not thx's kernels (the CPU's loops, a GPU's kernels), to "
                    "measure what the kernels save: adafactor (its update), loss (cross-entropy with z-loss), rms_norm "
                    "(T5's)")->delimiter(',')->type_name("PARTS");
    app->add_option("--peer-heap", peer_heap_,
                    "the peer's heap: glibc (its defaults, as a PyTorch user runs: large blocks are mapped, given "
                    "back when freed and faulted in again each step) or kept (as thx keeps its own, through "
                    "GLIBC_TUNABLES: what the allocator costs the peer; it holds what it frees, which at T5-base "
                    "with 48 heads came to over 24 GB)")
        ->check(CLI::IsMember({"glibc", "kept"}))->capture_default_str()->needs(peer);
    app->add_option("--out", topt.markdown_out, "also write the Markdown report here");
    app->add_option("--base-batch", topt.base_batch, "batch of the T5 base rows (0: 8 on the CPU, 32 on a GPU)")
        ->check(thx::non_negative_number())->capture_default_str();
    app->add_option("--base-heads", topt.base_heads,
                    "h of the base rows (default: 12,24,48 for T5, 12,48 for BERT and ALBERT)")
        ->delimiter(',')
        ->check(thx::positive_number());
    peer_heads = app->add_option("--peer-heads", topt.peer_heads, "the T5 base rows that the peer runs beside "
                                                                    "(those of the default among the base rows)")
                     ->delimiter(',')->check(thx::positive_number())->capture_default_str();
    app->add_flag("--base-only", topt.base_only, "with --base: only the base rows, not the configured model's")
        ->needs(base);
    app->add_flag("--deterministic-cost", topt.deterministic_cost,
                  "also time each row again under train.deterministic (ATen's deterministic algorithms, cuBLAS's "
                  "fixed workspace, thx's kernels without atomics), in the same run, and say whether a step repeats "
                  "to the bit with and without it: what bit-for-bit steps cost, and what they buy");
    app->add_flag("--tiled", topt.tiled, "on a GPU, talking-heads through the tiled path (the default "
                                         "unless thx --th-path names another)");
  }

  int run() override {
    if (topt.tiled && th_path_chosen() && !tiled_path(th_path()))
      throw InputError(fmt::format("--th-path {} excludes --tiled", th_path()));
    // The base rows are 768 wide: each h must divide it; the peer runs only beside a base row.
    for (int64_t h : topt.base_heads)
      if (768 % h != 0) throw InputError(fmt::format("--base-heads: {} does not divide the base d_model 768", h));
    const std::vector<int64_t> rows = topt.base_heads.empty() ? std::vector<int64_t>{12, 24, 48} : topt.base_heads;
    for (int64_t h : topt.peer_heads)  // (the default's rows that are not base rows are left out, not refused)
      if (peer_heads->count() > 0 && std::find(rows.begin(), rows.end(), h) == rows.end())
        throw InputError(fmt::format("--peer-heads: {} is not among the base rows' h ({})", h, fmt::join(rows, ",")));
    const AtenParts aten = parse_aten_parts(topt.aten, "--aten");
    topt.peer_kept_heap = peer_heap_ == "kept";
    ConfigTree tree = config.tree();
    topt.config = load_model_config(tree);
    if (config.dump) return dump_config(topt.config.yaml);
    if (topt.deterministic_cost && topt.config.train.deterministic)
      throw InputError("--deterministic-cost times each row with and without train.deterministic; the config's "
                       "train.deterministic is true (every row would be deterministic)");
    if (aten.adafactor && topt.config.optimizer.name != "adafactor")
      throw InputError(fmt::format("--aten adafactor: the config's optimizer.name is {}; the part concerns adafactor",
                                   topt.config.optimizer.name));
    if (aten.rms_norm && topt.config.model.encoder_only())
      throw InputError(fmt::format("--aten rms_norm: model.type {} has layer norms (ATen's); rms_norm is T5's",
                                   topt.config.model.type));
    topt.device = resolve_device(device_request(), "--device");
    if (topt.tiled) refuse_gpu_only_option("--tiled", topt.device.is_cuda());
    if (!topt.trace_dir.empty()) {
      if (!topt.device.is_cuda())
        throw InputError("--trace writes Kineto's timeline of a GPU's step (thx --device cuda); on the CPU, "
                         "--profile's tables are LibTorch's CPU profiler's");
      create_output_dir(topt.trace_dir, "--trace");
    }
    bench_train(topt);
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> make_bench_train_command(CLI::App& bench) {
  return std::make_unique<BenchTrainCommand>(bench);
}

}  // namespace thx
