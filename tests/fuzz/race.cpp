// Fuzz target: a RACE article file (one JSON object), as fine-tuning reads a RACE split.
#include "fuzz.h"

#include "eval/tasks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  thx::fuzz::quiet();
  thx::fuzz::put("race/high/1.txt", data, size);
  for (const bool skip : {false, true})
    thx::fuzz::clear_errors_only([&] {
      thx::ReadOptions o;
      o.skip_bad = skip;
      thx::read_race(thx::fuzz::scratch() + "/race", o);
    });
  return 0;
}
