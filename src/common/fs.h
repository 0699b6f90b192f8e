// fs.h: small file-system helpers: atomic text writes, reads, output paths checked before the work, and
// file fingerprints.
#pragma once
#include <cstdint>
#include <string>

namespace thx {

// Write `text` to `path` through a temporary file, fsync and rename: readers see the old
// file or the new one, never a partial write. Throws InputError if the directory is not
// writable, or if `path` is a device, pipe or socket (or a link to one: /dev/stdout), which the
// rename would replace.
void write_file_atomic(const std::string& path, const std::string& text);

// The whole file as a string; InputError naming the file if it cannot be read.
std::string read_file(const std::string& path);
// The whole file as a string, or "" where it cannot be read: for the kernel's files under /proc
// and /sys, which a machine or container may lack (a cgroup's limits, /proc/vmstat).
std::string read_file_if_any(const std::string& path);

// FNV-1a 64-bit hash, for stable, order-independent decisions (held-out split) and for
// fingerprints. Not cryptographic.
uint64_t fnv1a(const void* data, size_t size, uint64_t seed = 0xcbf29ce484222325ULL);
inline uint64_t fnv1a(const std::string& s, uint64_t seed = 0xcbf29ce484222325ULL) {
  return fnv1a(s.data(), s.size(), seed);
}

// InputError "<path>: exists and is not a directory (<flag> names a directory)" when `path`
// exists as anything but a directory, and "<flag> <path>: cannot create the directory (...)"
// when it does not exist and the nearest existing path above it is a file or a folder this
// process may not write in: checked before the work whose output the directory will hold.
void check_output_dir(const std::string& path, const std::string& flag);
// check_output_dir, then the directory and its parents made: InputError "<flag> <path>: cannot
// create the directory (<why>)" where they cannot be (a file in the way, no permission).
void create_output_dir(const std::string& path, const std::string& flag);
// Checked before long work whose result goes to the file `path` (a report, predictions):
// InputError "<flag> <path>: ..." where its directory does not exist or cannot be written in,
// or where `path` is a directory, a device, a pipe or a socket.
void check_output_file(const std::string& path, const std::string& flag);

// Removes `path` and, if it is a directory, everything under it, without following symbolic
// links (a link is removed, not what it points to); a missing path is no error. Returns false
// and sets `error` (naming the entry) if something could not be removed. Use this, not
// std::filesystem::remove_all: a PyTorch 2 wheel's libtorch exports its own, statically linked
// copy of std::filesystem, and the dynamic linker may bind a program's remove_all to it, which
// on the GPU machines called through a null pointer (pytorch/pytorch#133437; docs/benchmarks.md).
// This walks the tree with POSIX nftw and unlink/rmdir, outside the C++ library.
bool remove_tree(const std::string& path, std::string* error = nullptr);

// An exclusive flock(2) on <dir>/.lock (created; closed on exec), taken without waiting, so
// that two processes never write one directory at once: its file descriptor, which holds the
// lock until closed, or -1 where another process holds it. The holder's pid goes into the file,
// for lock_holder(dir): " (pid N)", or "" where unknown. InputError where it cannot be created.
int try_lock_directory(const std::string& dir);
std::string lock_holder(const std::string& dir);

// "size:mtime_ns" of a file, for detecting changed inputs; InputError if it does not exist.
std::string file_stamp(const std::string& path);

}  // namespace thx
