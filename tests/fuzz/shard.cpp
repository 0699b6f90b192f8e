// Fuzz target: a prepared shard (HDF5 written by `thx prepare`), as pretraining reads it,
// under a valid manifest.
#include "fuzz.h"

#include "data/prepare.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  thx::fuzz::quiet();
  static const std::string manifest = thx::fuzz::put(
      "shard/manifest.json",
      R"({"tokenizer": {"vocab_size": 164, "convention": "t5"}, "splits": {"train": {"shards": ["train-00000.h5"]}}})");
  (void)manifest;
  thx::fuzz::put("shard/train-00000.h5", data, size);
  thx::fuzz::clear_errors_only([&] { thx::load_split(thx::fuzz::scratch() + "/shard", "train"); });
  return 0;
}
