// Fuzz target: `--set KEY=VALUE` overrides (one per line of the input) on a valid config, as
// every command that takes --config applies them.
#include "fuzz.h"

#include <sstream>

#include "common/config_tree.h"
#include "training/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  thx::fuzz::quiet();
  const std::string text(reinterpret_cast<const char*>(data), size);
  thx::fuzz::clear_errors_only([&] {
    thx::ConfigTree tree;
    tree.merge_text("model: {d_model: 64, d_ff: 128, encoder_layers: 1, decoder_layers: 1}\n"
                    "attention: {variant: talking_heads, h: 4}\n",
                    "base.yaml");
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) tree.set(line);
    thx::load_pretrain_config(tree);
  });
  return 0;
}
