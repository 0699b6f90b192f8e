// thx bench attention: one attention layer timed (experiments/bench_attention.h).
#include <cstdio>
#include <utility>
#include <vector>

#include "attention/fused.h"
#include "cli/command.h"
#include "common/runtime.h"
#include "experiments/bench_attention.h"

namespace thx {
namespace {

// --th-tiles: "RxC" (both kernels) or "RxC,RxC" (forward, backward).
ThLaunch parse_th_tiles(const std::string& text) {
  ThLaunch l;
  const std::string bad = fmt::format("--th-tiles {}: allowed: RxC or RxC,RxC (the forward's and the backward's "
                                      "query rows and keys per block, each 1 to 256; e.g. 16x16,16x8)", text);
  auto tile = [&](const std::string& t) {
    ThTiles out;
    char x = 0, extra = 0;
    if (std::sscanf(t.c_str(), "%d%c%d%c", &out.R, &x, &out.C, &extra) != 3 || x != 'x' || out.R < 1 || out.C < 1 ||
        out.R > 256 || out.C > 256)
      throw InputError(bad);
    return out;
  };
  const size_t comma = text.find(',');
  l.forward = tile(text.substr(0, comma));
  l.backward = comma == std::string::npos ? l.forward : tile(text.substr(comma + 1));
  return l;
}

// --th-atomics: how the backward adds dK, dV and dbias (th_args.h's KeySums).
cuda_th::KeySums parse_th_atomics(const std::string& text) {
  if (text == "in-order") return cuda_th::KeySums::kInOrder;
  if (text == "staggered") return cuda_th::KeySums::kStaggered;
  if (text == "vector") return cuda_th::KeySums::kVector;
  throw InputError(fmt::format("--th-atomics {}: allowed: in-order, staggered, vector", text));
}

struct BenchAttentionCommand : Command {
  BenchAttentionOptions opt;
  bool no_reference = false;
  std::string th_tiles, th_atomics = "vector";
  int th_threads = 0;
  std::vector<std::pair<CLI::Option*, const char*>> fused_only;  // the fused kernels' own options
  std::vector<std::pair<CLI::Option*, const char*>> gpu_only;    // those and the other paths'
  CLI::Option* fma_ = nullptr;  // thx's kernels', fused or the row kernels
  CLI::Option* heads_ = nullptr;  // given, or its default list

  explicit BenchAttentionCommand(CLI::App& parent) {
    app = parent.add_subcommand(
        "attention", "Forward+backward of one attention layer: multi_head vs talking_heads at "
                     "each h, vs the paper's einsum reference, vs the fp32 matmul peak");
    app->add_option("--d-model", opt.d_model)->capture_default_str()->check(thx::positive_number());
    app->add_option("--n", opt.n, "query positions (and key positions, without --m)")
        ->capture_default_str()->check(thx::positive_number());
    app->add_option("--m", opt.m, "key and value positions, an encoder-decoder attention's memory of another length "
                                  "(default: --n, self-attention)")
        ->check(thx::positive_number());
    app->add_option("--batch", opt.batch)->capture_default_str()->check(thx::positive_number());
    heads_ = app->add_option("--heads", opt.heads, "head counts h (d_k = d_v = d_model / h)")
        ->delimiter(',')
        ->check(thx::positive_number())
        ->capture_default_str();
    app->add_option("--reps", opt.reps, "timed runs per layer (median)")
        ->capture_default_str()->check(thx::positive_number());
    app->add_flag("--no-reference", no_reference, "skip the einsum reference");
    app->add_flag("--bias", opt.bias, "T5's relative position bias: a learned [1,h,n,m] fp32 bias on each "
                                      "variant's logits, its gradient computed too");
    app->add_option("--precision", opt.precision, "fp32 | bf16 | both (each with its own matmul peak; the einsum "
                                                  "reference runs in fp32)")->capture_default_str();
    app->add_option("--out", opt.markdown_out, "also write the Markdown report here");
    CLI::Option* batched = app->add_flag("--batched", opt.batched, "on a GPU, talking-heads through the batched ATen "
                                                                 "composition (every [b,h,n,m] tensor kept)");
    CLI::Option* tiled = app->add_flag("--tiled", opt.tiled, "on a GPU, talking-heads through the tiled path "
                                                             "(the default unless thx --th-path names another)")
                             ->excludes(batched);
    CLI::Option* fma = app->add_flag("--fma", opt.fma, "on a GPU, thx's kernels' bf16 products as fp32 FMAs, not "
                                                       "on tensor cores (the fused kernels' version 1; the tiled "
                                                       "path's row kernels)")
                           ->excludes(batched);
    CLI::Option* tiles = app->add_option("--th-tiles", th_tiles, "on a GPU, the fused kernels' tiles instead of "
                                                                 "their own choice: RxC (both) or RxC,RxC (forward, "
                                                                 "backward), query rows x keys per block")
                             ->excludes(batched)->excludes(tiled);
    CLI::Option* threads = app->add_option("--th-threads", th_threads, "on a GPU, the fused kernels' threads per "
                                                                       "block (a multiple of 32 up to 256, the "
                                                                       "default)")
                               ->excludes(batched)->excludes(tiled);
    CLI::Option* atomics =
        app->add_option("--th-atomics", th_atomics, "on a GPU, how the fused backward adds dK, dV and dbias: in-order "
                                                    "(every block the keys in order), staggered (each block from its "
                                                    "own key tile) or vector (staggered, four sums a reduction)")
            ->capture_default_str()->excludes(batched)->excludes(tiled);
    CLI::Option* unpadded = app->add_flag("--th-unpadded", opt.unpadded, "on a GPU, the fused kernels' bf16 planes "
                                                                        "with their heads as they are, not padded to "
                                                                        "a multiple of 16 (the same numbers)")
                                ->excludes(batched)->excludes(tiled);
    fused_only = {{tiles, "--th-tiles"}, {threads, "--th-threads"}, {atomics, "--th-atomics"},
                  {unpadded, "--th-unpadded"}};
    fma_ = fma;
    gpu_only = fused_only;
    gpu_only.insert(gpu_only.end(), {{fma, "--fma"}, {batched, "--batched"}, {tiled, "--tiled"}});
  }

  // The fused kernels' own options choose them. A `thx --th-path` the user named is the choice
  // --tiled, --batched and those options make: a contradiction is refused rather than ignored.
  void choose_path() {
    for (const auto& [option, name] : fused_only) opt.fused = opt.fused || option->count() > 0;
    if (!th_path_chosen()) return;
    const std::string& path = th_path();
    if (path != "fused")
      for (const auto& [option, name] : fused_only)
        if (option->count() > 0)
          throw InputError(fmt::format("{} is an option of the fused kernels, which --th-path {} leaves", name, path));
    const bool aten_only = path == "batched" || path == "tiled-aten" || path == "folded" || path == "gemm-aten";
    if (aten_only && fma_->count() > 0)
      throw InputError(fmt::format("--fma is an option of thx's kernels, which --th-path {} leaves", path));
    if ((path == "gemm" || path == "tiled-gemm") && fma_->count() > 0)
      throw InputError(fmt::format("--fma makes the row kernels' mixings fp32 FMAs; --th-path {} mixes by cuBLAS "
                                   "products", path));
    if (path == "flash" && fma_->count() > 0)
      throw InputError("--fma runs thx's kernels as fp32 FMAs; --th-path flash runs on tensor cores");
    if ((!tiled_path(path) && opt.tiled) || (path != "batched" && opt.batched))
      throw InputError(fmt::format("--th-path {} excludes --{}", path, opt.batched ? "batched" : "tiled"));
  }

  int run() override {
    std::string defaults;  // a default that does not divide a given --d-model says it is the default
    for (int64_t h : BenchAttentionOptions{}.heads) defaults += " " + std::to_string(h);
    for (int64_t h : opt.heads)
      if (opt.d_model % h != 0)
        throw InputError(fmt::format("--heads: {}{} does not divide --d-model {}", h,
                                     heads_->count() > 0 ? "" : " (of the default --heads" + defaults + ")",
                                     opt.d_model));
    opt.reference = !no_reference;
    choose_path();
    if (!th_tiles.empty()) opt.th_launch = parse_th_tiles(th_tiles);
    if (th_threads != 0 && (th_threads < 32 || th_threads > cuda_th::kMaxThreads || th_threads % 32 != 0))
      throw InputError(fmt::format("--th-threads {}: allowed: a multiple of 32 from 32 to {}", th_threads,
                                   cuda_th::kMaxThreads));
    opt.th_launch.threads = th_threads;
    opt.th_launch.key_sums = parse_th_atomics(th_atomics);
    opt.device = resolve_device(device_request(), "--device");
    for (const auto& [option, name] : gpu_only)
      if (option->count() > 0) refuse_gpu_only_option(name, opt.device.is_cuda());
    bench_attention(opt);
    return 0;
  }
};

}  // namespace

void refuse_gpu_only_option(const std::string& name, bool on_gpu) {
  if (!on_gpu)
    throw InputError(fmt::format("{} chooses or tunes a GPU path of talking-heads; on the CPU it runs on thx's CPU "
                                 "cores (thx --device cuda)", name));
}

std::unique_ptr<Command> make_bench_attention_command(CLI::App& bench) {
  return std::make_unique<BenchAttentionCommand>(bench);
}

}  // namespace thx
