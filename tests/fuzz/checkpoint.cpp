// Fuzz target: a checkpoint file (HDF5), as --resume, `thx finetune` and `thx eval` read it.
#include "fuzz.h"

#include "training/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  thx::fuzz::quiet();
  const std::string path = thx::fuzz::put("checkpoint/step-00000001.h5", data, size);
  thx::fuzz::clear_errors_only([&] { thx::load_checkpoint(path); });
  return 0;
}
