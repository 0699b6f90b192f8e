// Fuzz target: a YAML config through the schema, as `thx pretrain --config` and `thx finetune
// --config` read it (and as a checkpoint's stored config is read back).
#include "fuzz.h"

#include "common/config_tree.h"
#include "eval/finetune_config.h"
#include "training/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  thx::fuzz::quiet();
  const std::string text(reinterpret_cast<const char*>(data), size);
  thx::fuzz::clear_errors_only([&] {
    thx::ConfigTree tree;
    tree.merge_text(text, "fuzz.yaml");
    const thx::PretrainConfig c = thx::load_pretrain_config(tree);
    thx::pretrain_config_from_text(c.yaml, "stored");  // what resume and fine-tuning read back
  });
  thx::fuzz::clear_errors_only([&] {
    thx::ConfigTree tree;
    tree.merge_text(text, "fuzz.yaml");
    thx::load_finetune_config(tree);
  });
  return 0;
}
