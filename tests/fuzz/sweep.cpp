// Fuzz target: a sweep file, as `thx sweep --dry-run` reads it: the grammar, the expansion into
// runs, and each run's config resolved (the first 16 runs: a grid may expand to millions).
#include "fuzz.h"

#include "experiments/sweep.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  thx::fuzz::quiet();
  static const std::string base =
      thx::fuzz::put("sweep/base.yaml", "model: {d_model: 64, d_ff: 128, encoder_layers: 1, decoder_layers: 1}\n"
                                        "attention: {variant: multi_head, h: 4}\n");
  (void)base;
  const std::string path = thx::fuzz::put("sweep/sweep.yaml", data, size);
  thx::fuzz::clear_errors_only([&] {
    const thx::Sweep s = thx::load_sweep(path);
    for (size_t i = 0; i < s.runs.size() && i < 16; ++i) {
      thx::ConfigTree tree = thx::sweep_run_tree(s, s.runs[i]);
      thx::resolve_pretrain_run(tree);
    }
  });
  return 0;
}
