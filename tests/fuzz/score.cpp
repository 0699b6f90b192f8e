// Fuzz target: the files `thx score squad` reads. The first byte picks which one the rest is
// (the dev data, the predictions, or the no-answer probabilities); the other two are valid.
#include "fuzz.h"

#include "eval/score_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  thx::fuzz::quiet();
  if (size == 0) return 0;
  const std::string dev = thx::fuzz::put(
      "score/dev.json",
      R"({"version": "v2.0", "data": [{"title": "T", "paragraphs": [{"context": "Denver won in 2016.", "qas": [)"
      R"({"id": "a", "question": "Who?", "answers": [{"text": "Denver", "answer_start": 0}], "is_impossible": false},)"
      R"({"id": "b", "question": "Why?", "answers": [], "is_impossible": true}]}]}]})");
  const std::string pred = thx::fuzz::put("score/pred.json", R"({"a": "Denver", "b": ""})");
  const std::string na = thx::fuzz::put("score/na.json", R"({"a": 0.1, "b": 0.9})");
  const std::string fuzzed = thx::fuzz::put("score/fuzzed.json", data + 1, size - 1);
  const int which = data[0] % 3;
  thx::fuzz::clear_errors_only([&] {
    thx::score_squad_files(which == 0 ? fuzzed : dev, which == 1 ? fuzzed : pred, which == 2 ? fuzzed : na,
                           data[0] & 4);
  });
  return 0;
}
