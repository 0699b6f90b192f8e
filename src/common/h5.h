// h5.h: tensors to and from HDF5 files, written atomically.
//
// H5Writer writes to a temporary file beside the target and renames it into place on
// commit(), so a crash or an error never leaves a half-written file under the real name and
// never touches an existing one until the new file is complete. A write that fails (disk full,
// file size limit) is a RunError naming the file and the system's reason; the temporary file
// is removed. H5Reader turns every failure (missing file, not HDF5, truncated, flipped bytes,
// missing dataset, wrong type) into an InputError that names the file and the dataset.
//
// Checksum: every file H5Writer writes starts with a 512-byte HDF5 user block (the region
// HDF5 reserves for applications and skips; h5py, h5dump and HDF5 itself read the file as
// usual) holding a text header written after the HDF5 data is complete:
//   thx-h5 checksum v1\n  crc32 <8 hex digits>\n  bytes <file size>\n
// the zlib CRC-32 of every byte after the user block, and the file's size. H5Reader checks
// both before HDF5 parses anything, so a truncated file or one with a flipped bit is one line
// naming the file and never reaches HDF5's parser. A file without the header (written by thx
// before checksums, or by another program) cannot be checked so; HDF5 1.10 has crashed on such
// damaged files (fuzzing), so such a file is first read whole in a child process (and, if that
// meets an error, each call that parses it), and is one line unless the child comes back. Only the five dtypes below are read, and a dataset
// must store what it declares.
//
// Datasets are addressed by absolute paths ("/params/P_q"); groups are created as needed.
// Supported dtypes: float32, float64, int32, int64, uint8 (bool is stored as uint8).
#pragma once
#include <torch/torch.h>

#include <functional>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace thx {

class H5Writer {
 public:
  explicit H5Writer(std::string path);
  ~H5Writer();
  H5Writer(const H5Writer&) = delete;
  H5Writer& operator=(const H5Writer&) = delete;

  // Write a tensor (any layout; it is made contiguous on the CPU). gzip > 0 compresses.
  void write(const std::string& name, const torch::Tensor& t, int gzip = 0);
  void write_scalar(const std::string& name, double value);
  // A string attribute on an object ("/" for the file).
  void attr(const std::string& object, const std::string& key, const std::string& value);
  // Flush, fsync and rename the temporary file to the target path.
  void commit();

  const std::string& path() const { return path_; }

 private:
  void ensure_parent(const std::string& name);
  std::string path_, tmp_;
  int64_t file_ = -1;
  bool committed_ = false;
};

// The checksum header of a file written by H5Writer: how it stands.
struct H5Checksum {
  bool present = false;  // the file has thx's header
  bool ok = false;       // its size and CRC-32 match the header
  std::string problem;   // why not ok, for messages: "truncated: ...", "checksum mismatch: ..."
};
H5Checksum verify_h5_checksum(const std::string& path);

class H5Reader {
 public:
  explicit H5Reader(std::string path);
  ~H5Reader();
  H5Reader(const H5Reader&) = delete;
  H5Reader& operator=(const H5Reader&) = delete;

  bool has(const std::string& name) const;
  torch::Tensor read(const std::string& name) const;
  double read_scalar(const std::string& name) const;
  std::string attr(const std::string& object, const std::string& key) const;
  // Names of the members of a group (datasets and groups), sorted.
  std::vector<std::string> list(const std::string& group) const;
  // Every dataset below a group, as absolute paths, sorted.
  std::vector<std::string> datasets(const std::string& group = "/") const;

  const std::string& path() const { return path_; }

 private:
  bool in_child_first(const std::function<bool()>& f) const;  // files without a checksum (above)
  std::string path_;
  int64_t file_ = -1;
  bool guarded_ = false;           // no checksum block: parsed in a child first (above)
  mutable bool in_child_ = false;  // in the child process of in_child_first
  std::set<std::string> vetted_;   // guarded: datasets the child read without crashing
};

}  // namespace thx
