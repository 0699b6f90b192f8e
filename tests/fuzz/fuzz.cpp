#include "fuzz.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/log.h"
#include "common/fs.h"

namespace thx::fuzz {
namespace fs = std::filesystem;

const std::string& scratch() {
  // Never destroyed: the exit handler that removes the directory runs after static destructors.
  static const std::string* dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    const std::string base = fs::is_directory("/dev/shm") ? "/dev/shm" : tmp ? tmp : "/tmp";
    auto* d = new std::string(base + "/thx-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(*d);
    std::atexit([] {
      remove_tree(scratch());
    });
    return d;
  }();
  return *dir;
}

std::string put(const std::string& name, const uint8_t* data, size_t size) {
  const fs::path p = fs::path(scratch()) / name;
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), std::streamsize(size));
  return p.string();
}

std::string put(const std::string& name, const std::string& text) {
  return put(name, reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

void quiet() {
  static const bool once = [] {
    set_log_level("off");
    return true;
  }();
  (void)once;
}

}  // namespace thx::fuzz
