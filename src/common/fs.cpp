#include "common/fs.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace thx {

namespace {
// What `path` is where it is neither absent nor a regular file nor a folder ("a device", "a
// pipe", ...; a link counts as what it points to); "" otherwise. A file written atomically
// would replace it: /dev/stdout's link or /dev/full's node, run as root.
std::string special_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) return "";
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) return "a device";
  if (S_ISFIFO(st.st_mode)) return "a pipe";
  return S_ISSOCK(st.st_mode) ? "a socket" : "not a regular file";
}
constexpr const char* kWholeFiles = "thx writes its files whole, through a temporary file renamed into place, which "
                                    "would replace it; name a file in a folder";
}  // namespace

void write_file_atomic(const std::string& path, const std::string& text) {
  if (const std::string what = special_file(path); !what.empty())
    throw InputError(fmt::format("{}: is {}; {}", path, what, kWholeFiles));
  const std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());
  const int fd = ::open(tmp.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) throw InputError(fmt::format("{}: cannot create file ({})", tmp, std::strerror(errno)));
  // A failed write (disk full, file-size limit) removes the temporary and replaces nothing.
  auto fail = [&](const char* what) {
    const int err = errno;
    ::close(fd);
    std::remove(tmp.c_str());
    throw RunError(fmt::format("{}: cannot {} ({}); {} was not replaced", tmp, what, std::strerror(err), path));
  };
  for (size_t at = 0; at < text.size();) {
    const ssize_t n = ::write(fd, text.data() + at, text.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write");
    at += size_t(n);
  }
  if (::fsync(fd) != 0 && errno != EINVAL) fail("flush");  // EINVAL: a file system without fsync
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw InputError(fmt::format("{}: cannot rename into place ({})", path, std::strerror(err)));
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot read file", path));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

uint64_t fnv1a(const void* data, size_t size, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

std::string file_stamp(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw InputError(fmt::format("{}: no such file", path));
  return fmt::format("{}:{}", st.st_size, int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec);
}

namespace {
thread_local std::string* t_remove_error;  // remove_tree's first failure, for its callback
int remove_entry(const char* path, const struct stat*, int type, struct FTW*) {
  // FTW_DP: a directory, its contents already gone (FTW_DEPTH); FTW_DNR: one nftw could not read.
  const bool dir = type == FTW_DP || type == FTW_DNR;
  if ((dir ? ::rmdir(path) : ::unlink(path)) == 0 || errno == ENOENT) return 0;
  if (t_remove_error && t_remove_error->empty()) *t_remove_error = fmt::format("{}: {}", path, std::strerror(errno));
  return 0;  // go on: remove what can be removed
}
}  // namespace

bool remove_tree(const std::string& path, std::string* error) {
  struct stat st;
  std::string first;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return true;
    first = fmt::format("{}: {}", path, std::strerror(errno));
    if (error) *error = first;
    return false;
  }
  t_remove_error = &first;
  const int rc = ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  t_remove_error = nullptr;
  if (rc != 0 && first.empty()) first = fmt::format("{}: {}", path, std::strerror(errno));
  if (error) *error = first;
  return first.empty();
}

std::string read_file_if_any(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void check_output_dir(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (!ec && fs::exists(st) && !fs::is_directory(st))
    throw InputError(fmt::format("{}: exists and is not a directory ({} names a directory)", path, flag));
  if (!ec && fs::exists(st)) return;
  // Not there yet: the nearest folder above that exists is where it will be made.
  for (fs::path above = fs::absolute(path, ec).parent_path(); !above.empty(); above = above.parent_path()) {
    const auto a = fs::status(above, ec);
    if (fs::exists(a)) {
      if (!fs::is_directory(a))
        throw InputError(fmt::format("{} {}: cannot create the directory ({} is not a directory)", flag, path,
                                     above.string()));
      if (::access(above.c_str(), W_OK | X_OK) != 0)
        throw InputError(fmt::format("{} {}: cannot create the directory (cannot write in {}: {})", flag, path,
                                     above.string(), std::strerror(errno)));
      return;
    }
    if (above == above.parent_path()) return;
  }
}

void create_output_dir(const std::string& path, const std::string& flag) {
  check_output_dir(path, flag);
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw InputError(fmt::format("{} {}: cannot create the directory ({})", flag, path, ec.message()));
}

void check_output_file(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw InputError(fmt::format("{} {}: is a directory; {} names a file", flag, path, flag));
  if (const std::string what = special_file(path); !what.empty())
    throw InputError(fmt::format("{} {}: is {}; {}", flag, path, what, kWholeFiles));
  const fs::path dir = fs::absolute(path, ec).parent_path();
  if (!fs::is_directory(dir, ec))
    throw InputError(fmt::format("{} {}: directory {} {}", flag, path, dir.string(),
                                 fs::exists(dir, ec) ? "is not a directory" : "does not exist"));
  if (::access(dir.c_str(), W_OK) != 0)
    throw InputError(fmt::format("{} {}: cannot write in directory {} ({})", flag, path, dir.string(),
                                 std::strerror(errno)));
}

int try_lock_directory(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / ".lock").string();
  const int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (fd < 0) throw InputError(fmt::format("{}: cannot create its lock file ({})", path, std::strerror(errno)));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return -1;
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) == 0) {
    [[maybe_unused]] const ssize_t written = ::pwrite(fd, pid.data(), pid.size(), 0);  // only for messages
  }
  return fd;
}

std::string lock_holder(const std::string& dir) {
  std::string pid = read_file_if_any((std::filesystem::path(dir) / ".lock").string());
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid.empty() ? std::string() : " (pid " + pid + ")";
}

}  // namespace thx
