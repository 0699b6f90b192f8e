// error.h: the two kinds of failure thx distinguishes.
//
// InputError is bad input from the user: a config key, a flag, a file. The CLI prints it as
// one line and exits with code 2, before anything is written. Everything else (a
// std::exception from a bug or the environment) exits with code 1.
//
// ConfigError is an InputError about one config key. It carries the dotted key path, so that
// the CLI can name the file and line the value came from (see config_tree.h), whether it is
// thrown while the config is read or by a check after it (the data's vocabulary, the memory).
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>
#include <utility>

namespace thx {

// Messages are one line by construction: a line break or other control character that came in
// with the input (a YAML key "a\nb", a file name) is written as an escape (\n, \r, \x1b).
inline std::string one_line(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if ((u < 0x20 && c != '\t') || u == 0x7f) out += fmt::format("\\x{:02x}", u);
    else out += c;
  }
  return out;
}

struct InputError : std::runtime_error {
  explicit InputError(const std::string& message) : std::runtime_error(one_line(message)) {}
};

struct ConfigError : InputError {
  ConfigError(std::string key_path, const std::string& message)
      : InputError(message), key(one_line(key_path)) {}
  // A line that begins with its key already ("train.batch_size 4096: training needs ..."): told
  // as it is, after the place the key was set.
  static ConfigError leading(std::string key_path, const std::string& line) {
    ConfigError e(std::move(key_path), line);
    e.key_leads = true;
    return e;
  }
  std::string key;  // dotted path, e.g. "attention.h_k"
  bool key_leads = false;
  // The line without a place: "<key>: <message>", or the leading line.
  std::string line() const { return key_leads ? what() : key + ": " + what(); }
};

// A run that cannot continue for a reason that is not the user's input (a diverged loss):
// one line, exit code 1.
struct RunError : std::runtime_error {
  explicit RunError(const std::string& message) : std::runtime_error(one_line(message)) {}
};

// THX_CHECK(cond, "fmt", args...): throw InputError with a formatted message when cond fails.
#define THX_CHECK(cond, ...)                                               \
  do {                                                                     \
    if (!(cond)) throw ::thx::InputError(fmt::format(__VA_ARGS__));        \
  } while (0)

}  // namespace thx
