// Fuzz target: a SuperGLUE JSONL file of any task (the first byte picks it), as fine-tuning
// reads it, stopping at a bad row and skipping bad rows.
#include "fuzz.h"

#include "eval/tasks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  thx::fuzz::quiet();
  if (size == 0) return 0;
  static const char* tasks[] = {"boolq", "cb", "copa", "multirc", "record", "rte_sg", "wic", "wsc", "axb", "axg"};
  const std::string task = tasks[data[0] % 10];
  const std::string path = thx::fuzz::put("superglue/train.jsonl", data + 1, size - 1);
  for (const bool skip : {false, true})
    thx::fuzz::clear_errors_only([&] {
      thx::ReadOptions o;
      o.skip_bad = skip;
      thx::read_superglue(task, path, o);
    });
  return 0;
}
