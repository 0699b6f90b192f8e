// Fuzz target: a SQuAD v1.1/v2.0 JSON file, as fine-tuning reads it (the version, the rows,
// and for training the answers checked against their contexts).
#include "fuzz.h"

#include "eval/finetune_config.h"
#include "eval/tasks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  thx::fuzz::quiet();
  const std::string path = thx::fuzz::put("squad/train.json", data, size);
  for (const bool skip : {false, true})
    thx::fuzz::clear_errors_only([&] {
      thx::squad_version(path);
      thx::ReadOptions o;
      o.skip_bad = skip;
      thx::TaskData d = thx::read_squad(path, o);
      for (const auto& e : d.examples)
        for (size_t i = 0; i < e.answer_starts.size(); ++i)
          if (e.answer_starts[i] >= 0 &&
              (size_t(e.answer_starts[i]) + e.answers[i].size() > e.text[1].size() ||
               e.text[1].compare(size_t(e.answer_starts[i]), e.answers[i].size(), e.answers[i]) != 0)) {
            std::fprintf(stderr, "FINDING: answer %zu of %s is not at its byte offset\n", i, e.id.c_str());
            std::abort();
          }
      thx::skip_misplaced_answers(d);
    });
  return 0;
}
