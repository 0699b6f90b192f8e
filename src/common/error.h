// error.h: the two kinds of failure thx distinguishes.
//
// InputError is bad input from the user: a config key, a flag, a file. The CLI prints it as
// one line and exits with code 2, before anything is written. Everything else (a
// std::exception from a bug or the environment) exits with code 1.
//
// ConfigError is an InputError about one config key. It carries the dotted key path, so that
// the CLI can name the file and line the value came from (see config_tree.h).
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace thx {

struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ConfigError : InputError {
  ConfigError(std::string key_path, const std::string& message)
      : InputError(message), key(std::move(key_path)) {}
  std::string key;  // dotted path, e.g. "attention.h_k"
};

// A run that cannot continue for a reason that is not the user's input (a diverged loss):
// one line, exit code 1.
struct RunError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// THX_CHECK(cond, "fmt", args...): throw InputError with a formatted message when cond fails.
#define THX_CHECK(cond, ...)                                               \
  do {                                                                     \
    if (!(cond)) throw ::thx::InputError(fmt::format(__VA_ARGS__));        \
  } while (0)

}  // namespace thx
