// replay_main.cpp: the fuzz targets without libFuzzer, in one program for the test suite:
//   thx_fuzz_replay TARGET PATH...
// runs TARGET's LLVMFuzzerTestOneInput (compiled as thx_fuzz_TARGET) once on every file named,
// or in a directory named, in sorted order. ctest runs each target over its committed corpus
// (tests/fuzz/corpus/TARGET: the seeds and every input that once found a bug); a finding
// aborts, as under libFuzzer.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_targets.h"  // THX_FUZZ_TARGETS: X(checkpoint) X(config) ..., written by CMake

#define X(name) extern "C" int thx_fuzz_##name(const uint8_t* data, size_t size);
THX_FUZZ_TARGETS
#undef X

int main(int argc, char** argv) {
  struct Target {
    const char* name;
    int (*run)(const uint8_t*, size_t);
  };
  const Target targets[] = {
#define X(name) {#name, thx_fuzz_##name},
      THX_FUZZ_TARGETS
#undef X
  };
  const Target* target = nullptr;
  for (const auto& t : targets)
    if (argc > 1 && std::strcmp(argv[1], t.name) == 0) target = &t;
  if (!target || argc < 3) {
    std::fprintf(stderr, "usage: %s TARGET PATH...; targets:", argv[0]);
    for (const auto& t : targets) std::fprintf(stderr, " %s", t.name);
    std::fprintf(stderr, "\n");
    return 2;
  }
  std::vector<std::filesystem::path> files;
  for (int i = 2; i < argc; ++i) {
    if (std::filesystem::is_directory(argv[i])) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(argv[i]))
        if (e.is_regular_file()) files.push_back(e.path());
    } else {
      files.emplace_back(argv[i]);
    }
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    target->run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("%s: %zu inputs, no finding\n", target->name, files.size());
  return files.empty() ? 1 : 0;
}
