// thx bench: benchmarks (not tests). `thx bench attention` times one attention layer.
#include "cli/command.h"
#include "training/spec.h"
#include "experiments/bench_attention.h"
#include "experiments/bench_train.h"

namespace thx {
namespace {

struct BenchCommand : Command {
  CLI::App* attention = nullptr;
  CLI::App* train = nullptr;
  BenchAttentionOptions opt;
  bool no_reference = false;
  ConfigOptions config;
  BenchTrainOptions topt;

  explicit BenchCommand(CLI::App& parent) {
    app = parent.add_subcommand("bench", "Benchmarks; results go to docs/benchmarks.md");
    app->require_subcommand(1);
    attention = app->add_subcommand(
        "attention", "Forward+backward of one attention layer: multi_head vs talking_heads at "
                     "each h, vs the paper's einsum reference, vs the fp32 matmul peak");
    attention->add_option("--d-model", opt.d_model)->capture_default_str()->check(CLI::PositiveNumber);
    attention->add_option("--n", opt.n, "n = m")->capture_default_str()->check(CLI::PositiveNumber);
    attention->add_option("--batch", opt.batch)->capture_default_str()->check(CLI::PositiveNumber);
    attention->add_option("--heads", opt.heads, "head counts h (d_k = d_v = d_model / h)")
        ->delimiter(',')
        ->capture_default_str();
    attention->add_option("--reps", opt.reps, "timed runs per layer (median)")
        ->capture_default_str()->check(CLI::PositiveNumber);
    attention->add_flag("--no-reference", no_reference, "skip the einsum reference");
    attention->add_option("--out", opt.markdown_out, "also write the Markdown report here");

    train = app->add_subcommand(
        "train", "Whole training steps (T5, BERT or ALBERT, by model.type) on random tokens: step "
                 "time, tokens/s, model FLOPs as a fraction of the matmul peak; multi-head and "
                 "talking-heads of the configured h");
    config.add_to(train);
    train->add_option("--steps", topt.steps, "timed steps (median)")->capture_default_str()
        ->check(CLI::PositiveNumber);
    train->add_option("--peer", topt.peer, "also run this peer_t5.py (PyTorch eager) on the same "
                                           "configuration and threads")->type_name("FILE");
    train->add_flag("--base", topt.base_sweep,
                    "also time the base size: T5 at batch 8, 512/114, h = 12, 24, 48; BERT-base or "
                    "ALBERT-base at batch 4, length 512, h = 12, 48");
    train->add_option("--out", topt.markdown_out, "also write the Markdown report here");
  }

  int run() override {
    if (attention->parsed()) {
      for (int64_t h : opt.heads)
        if (h < 1 || opt.d_model % h != 0)
          throw InputError(fmt::format("--heads: {} does not divide --d-model {}", h, opt.d_model));
      opt.reference = !no_reference;
      bench_attention(opt);
    }
    if (train->parsed()) {
      ConfigTree tree = config.tree();
      inherit_attention(tree);
      const RunConfig rc = load_config<RunConfig>(tree, [](const RunConfig& c) {
        validate(c.model);
        validate(c.train);
        validate(c.optimizer);
        const int64_t d = c.model.d_model;
        for (const auto& a : {c.attention_encoder_self, c.attention_decoder_self, c.attention_encoder_decoder})
          resolve(a.value_or(c.attention), d, d, d);
      });
      if (config.dump) {
        std::fputs(cfg::to_yaml(rc).c_str(), stdout);
        return 0;
      }
      PretrainConfig& p = topt.config;
      p.model = rc.model, p.data = rc.data, p.train = rc.train, p.optimizer = rc.optimizer;
      p.attention = {rc.attention_encoder_self.value_or(rc.attention),
                     rc.attention_decoder_self.value_or(rc.attention),
                     rc.attention_encoder_decoder.value_or(rc.attention)};
      bench_train(topt);
    }
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> make_bench_command(CLI::App& parent) {
  return std::make_unique<BenchCommand>(parent);
}

}  // namespace thx
