// fuzz.h: what every fuzz target of thx shares (tests/fuzz/README.md says how to run them).
//
// A target hands libFuzzer's bytes to one reader of outside bytes, the way thx reads them
// (most from a file, so each input is written to a scratch file first). Bad bytes must end in
// an InputError: the one line naming the input that thx prints with exit code 2. Anything else
// is a finding and aborts, so that libFuzzer keeps the input: another exception (what a user
// would see as "thx: internal error"), an InputError of several lines, a crash, a hang, a leak,
// or undefined behaviour (the targets are built with AddressSanitizer and UBSan).
//
// The same sources also build without libFuzzer, with the project's compiler, into one program
// (tests/fuzz/replay_main.cpp) with which the test suite replays every committed seed and every
// input that once found a bug (tests/fuzz/corpus/<target>/) on each build.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/error.h"

namespace thx::fuzz {

// A directory of this process's own under /dev/shm (or $TMPDIR, /tmp), created on first use
// and removed at exit.
const std::string& scratch();
// Write bytes to scratch()/name (subdirectories created); returns the path.
std::string put(const std::string& name, const uint8_t* data, size_t size);
std::string put(const std::string& name, const std::string& text);
// Logging off, once per process: the readers' warnings would drown libFuzzer's output.
void quiet();

// Runs f: an InputError of one line is the expected end of bad input; anything else aborts.
template <class F>
void clear_errors_only(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    if (std::strchr(e.what(), '\n') != nullptr) {
      std::fprintf(stderr, "FINDING: an error of several lines: %s\n", e.what());
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FINDING: not an InputError: %s\n", e.what());
    std::abort();
  }
}

}  // namespace thx::fuzz
