// eval_fixtures.h: small task data for the fine-tuning tests.
#pragma once
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"

namespace thx::test {

// A task that needs the words: label 1 sentences carry "attention", label 0 ones "softmax".
inline void write_tiny_sst2(const TempDir& t) {
  const char* filler[] = {"the", "model", "heads", "talk", "to", "each", "other", "and", "learn"};
  uint64_t x = 12345;
  auto sentence = [&](int label) {
    std::string s;
    const int n = 4 + int(x % 4);
    const int at = int(x % n);
    for (int i = 0; i < n; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      s += (i ? " " : "") + std::string(i == at ? (label ? "attention" : "softmax") : filler[x % 9]);
    }
    return s;
  };
  std::filesystem::create_directories(t.file("data/glue/SST-2"));
  for (auto [split, n] : std::vector<std::pair<std::string, int>>{{"train", 400}, {"dev", 100}}) {
    std::string tsv = "sentence\tlabel\n";
    for (int i = 0; i < n; ++i) tsv += sentence(i % 2) + "\t" + std::to_string(i % 2) + "\n";
    std::ofstream(t.file("data/glue/SST-2/" + split + ".tsv")) << tsv;
  }
}

}  // namespace thx::test
