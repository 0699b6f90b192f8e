// Fuzz target: a prepared directory's manifest.json, as pretraining reads it (load_split),
// beside valid shards.
#include "fuzz.h"

#include <torch/torch.h>

#include "common/h5.h"
#include "data/prepare.h"

namespace {
void write_shard(const std::string& name) {
  thx::H5Writer w(thx::fuzz::scratch() + "/prep/" + name);
  w.write("/tokens", torch::arange(1, 41, torch::kInt32), 1);
  w.write("/doc_offsets", torch::tensor({int64_t(0), int64_t(17), int64_t(40)}), 1);
  w.attr("/", "split", "train");
  w.commit();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  thx::fuzz::quiet();
  static const bool shards = [] {
    thx::fuzz::put("prep/x", "");
    write_shard("train-00000.h5");
    write_shard("heldout-00000.h5");
    return true;
  }();
  (void)shards;
  thx::fuzz::put("prep/manifest.json", data, size);
  for (const char* split : {"train", "heldout"})
    thx::fuzz::clear_errors_only([&] { thx::load_split(thx::fuzz::scratch() + "/prep", split); });
  return 0;
}
