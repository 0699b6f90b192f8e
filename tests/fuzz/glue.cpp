// Fuzz target: a GLUE TSV file of any task (the first byte picks it), as fine-tuning reads it:
// stopping at the first bad row, and skipping bad rows (finetune.skip_bad_rows).
#include "fuzz.h"

#include "eval/tasks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  thx::fuzz::quiet();
  if (size == 0) return 0;
  static const char* tasks[] = {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "mnli_mm", "qnli", "rte", "wnli", "ax"};
  const std::string task = tasks[data[0] % 11];
  const std::string path = thx::fuzz::put("glue/train.tsv", data + 1, size - 1);
  for (const bool skip : {false, true})
    thx::fuzz::clear_errors_only([&] {
      thx::ReadOptions o;
      o.skip_bad = skip;
      thx::read_glue(task, path, o);
    });
  return 0;
}
