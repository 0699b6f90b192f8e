#include "common/h5.h"

#include <hdf5.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <csignal>
#include <cstring>
#include <functional>
#include <set>

#include "common/error.h"

namespace thx {
namespace {

// HDF5 prints its error stack to stderr by default; thx reports errors itself. And HDF5's own
// exit handler is not installed (H5dont_atexit, before any other HDF5 call): it closes every id
// still open, and on a file whose close already failed (disk full, file-size limit) HDF5 1.10
// crashes there. thx closes every file itself (H5Writer, H5Reader), so the handler has nothing
// else to do.
struct QuietHdf5 {
  QuietHdf5() {
    H5dont_atexit();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
};
const QuietHdf5 quiet_hdf5;

hid_t h5_type(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32: return H5T_NATIVE_FLOAT;
    case torch::kFloat64: return H5T_NATIVE_DOUBLE;
    case torch::kInt32: return H5T_NATIVE_INT32;
    case torch::kInt64: return H5T_NATIVE_INT64;
    case torch::kUInt8: return H5T_NATIVE_UINT8;
    default: throw std::runtime_error(fmt::format("h5: unsupported dtype {}", c10::toString(t)));
  }
}

// RAII for hid_t handles.
struct Handle {
  hid_t id;
  herr_t (*close)(hid_t);
  ~Handle() {
    if (id >= 0) close(id);
  }
};

constexpr size_t kUserBlock = 512;  // HDF5's smallest user block
constexpr char kMagic[] = "thx-h5 checksum v1\n";

// The system's reason for the newest HDF5 failure ("No space left on device"), from the
// error stack HDF5 keeps even with printing off; "" when it names none.
std::string hdf5_reason() {
  std::string reason;
  auto cb = [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
    auto* out = static_cast<std::string*>(data);
    const std::string d = e->desc ? e->desc : "";
    const auto at = d.find("error message = '");
    if (out->empty() && at != std::string::npos) {
      const auto from = at + 17, to = d.find('\'', from);
      *out = d.substr(from, to == std::string::npos ? std::string::npos : to - from);
    }
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, cb, &reason);
  H5Eclear2(H5E_DEFAULT);
  return reason;
}

// A failed write: the system's reason when HDF5 recorded one.
[[noreturn]] void write_failed(const std::string& file, const std::string& what) {
  const std::string reason = hdf5_reason();
  throw RunError(fmt::format("{}: cannot {}{}; nothing was replaced", file, what,
                             reason.empty() ? "" : " (" + reason + ")"));
}

// CRC-32 (zlib) of bytes [from, size) of an open descriptor, in 1 MiB reads.
bool crc_from(int fd, off_t from, uint64_t size, uint32_t* crc) {
  std::vector<unsigned char> buf(1 << 20);
  uLong c = crc32(0L, Z_NULL, 0);
  for (uint64_t at = uint64_t(from); at < size;) {
    const ssize_t got = ::pread(fd, buf.data(), std::min<uint64_t>(buf.size(), size - at), off_t(at));
    if (got <= 0) return false;
    c = crc32(c, buf.data(), uInt(got));
    at += uint64_t(got);
  }
  *crc = uint32_t(c);
  return true;
}

}  // namespace

H5Checksum verify_h5_checksum(const std::string& path) {
  H5Checksum r;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return r;
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } closer{fd};
  char head[kUserBlock + 1] = {};
  const ssize_t got = ::pread(fd, head, kUserBlock, 0);
  if (got < ssize_t(sizeof kMagic - 1) || std::memcmp(head, kMagic, sizeof kMagic - 1) != 0) return r;
  r.present = true;
  unsigned crc = 0;
  unsigned long long bytes = 0;
  if (std::sscanf(head + sizeof kMagic - 1, "crc32 %8x\nbytes %llu\n", &crc, &bytes) != 2) {
    r.problem = "its checksum header is damaged";
    return r;
  }
  const off_t size = ::lseek(fd, 0, SEEK_END);
  if (size < 0 || uint64_t(size) != bytes) {
    r.problem = uint64_t(size) < bytes ? fmt::format("truncated: {} of its {} bytes", size, bytes)
                                       : fmt::format("{} bytes where {} were written", size, bytes);
    return r;
  }
  uint32_t actual = 0;
  if (!crc_from(fd, off_t(kUserBlock), uint64_t(size), &actual)) {
    r.problem = "cannot read it to check its checksum";
    return r;
  }
  if (actual != crc) {
    r.problem = fmt::format("checksum mismatch (CRC-32 {:08x}, written {:08x}): its bytes changed after it was "
                            "written", actual, crc);
    return r;
  }
  r.ok = true;
  return r;
}

H5Writer::H5Writer(std::string path) : path_(std::move(path)) {
  tmp_ = fmt::format("{}.tmp-{}", path_, ::getpid());
  Handle fcpl{H5Pcreate(H5P_FILE_CREATE), H5Pclose};
  H5Pset_userblock(fcpl.id, kUserBlock);
  file_ = H5Fcreate(tmp_.c_str(), H5F_ACC_TRUNC, fcpl.id, H5P_DEFAULT);
  if (file_ < 0) {
    const int err = errno;
    throw InputError(fmt::format("{}: cannot create file ({})", tmp_, std::strerror(err)));
  }
}

H5Writer::~H5Writer() {
  if (file_ >= 0) H5Fclose(file_);
  if (!committed_) std::remove(tmp_.c_str());
}

void H5Writer::ensure_parent(const std::string& name) {
  const auto slash = name.find_last_of('/');
  if (slash == 0 || slash == std::string::npos) return;
  const std::string group = name.substr(0, slash);
  if (H5Lexists(file_, group.c_str(), H5P_DEFAULT) > 0) return;
  ensure_parent(group);
  Handle g{H5Gcreate2(file_, group.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose};
  if (g.id < 0) write_failed(tmp_, "create group " + group);
}

void H5Writer::write(const std::string& name, const torch::Tensor& t_in, int gzip) {
  torch::Tensor t = t_in.detach().to(torch::kCPU).contiguous();
  if (t.scalar_type() == torch::kBool) t = t.to(torch::kUInt8);
  ensure_parent(name);
  std::vector<hsize_t> dims(t.sizes().begin(), t.sizes().end());
  Handle space{t.dim() == 0 ? H5Screate(H5S_SCALAR)
                            : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
               H5Sclose};
  Handle dcpl{H5Pcreate(H5P_DATASET_CREATE), H5Pclose};
  if (gzip > 0 && t.dim() > 0 && t.numel() > 0) {
    std::vector<hsize_t> chunk = dims;
    // Chunks of at most ~1M elements, cut along the leading dimension.
    hsize_t inner = 1;
    for (size_t i = 1; i < chunk.size(); ++i) inner *= chunk[i];
    chunk[0] = std::max<hsize_t>(1, std::min<hsize_t>(chunk[0], (1u << 20) / std::max<hsize_t>(1, inner)));
    H5Pset_chunk(dcpl.id, static_cast<int>(chunk.size()), chunk.data());
    H5Pset_deflate(dcpl.id, static_cast<unsigned>(gzip));
  }
  const hid_t type = h5_type(t.scalar_type());
  Handle ds{H5Dcreate2(file_, name.c_str(), type, space.id, H5P_DEFAULT, dcpl.id, H5P_DEFAULT),
            H5Dclose};
  if (ds.id < 0) write_failed(tmp_, "create dataset " + name);
  if (t.numel() > 0 && H5Dwrite(ds.id, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()) < 0)
    write_failed(tmp_, "write dataset " + name);
}

void H5Writer::write_scalar(const std::string& name, double value) {
  write(name, torch::tensor(value, torch::kFloat64));
}

void H5Writer::attr(const std::string& object, const std::string& key, const std::string& value) {
  if (object != "/") ensure_parent(object + "/x");
  Handle type{H5Tcopy(H5T_C_S1), H5Tclose};
  H5Tset_size(type.id, std::max<size_t>(1, value.size()));
  Handle space{H5Screate(H5S_SCALAR), H5Sclose};
  Handle a{H5Acreate_by_name(file_, object.c_str(), key.c_str(), type.id, space.id, H5P_DEFAULT,
                             H5P_DEFAULT, H5P_DEFAULT),
           H5Aclose};
  if (a.id < 0 || H5Awrite(a.id, type.id, value.c_str()) < 0)
    write_failed(tmp_, fmt::format("write attribute {}:{}", object, key));
}

void H5Writer::commit() {
  const herr_t closed = H5Fclose(file_);
  file_ = -1;
  if (closed < 0) write_failed(tmp_, "finish the file");
  // The checksum header goes into the user block once HDF5 is done with the file; fsync
  // before the rename, so that the new name never points at unwritten data.
  const int fd = ::open(tmp_.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw RunError(fmt::format("{}: cannot reopen to checksum it ({})", tmp_, std::strerror(errno)));
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } closer{fd};
  const off_t size = ::lseek(fd, 0, SEEK_END);
  uint32_t crc = 0;
  if (size < off_t(kUserBlock) || !crc_from(fd, off_t(kUserBlock), uint64_t(size), &crc))
    throw RunError(fmt::format("{}: cannot read back to checksum it", tmp_));
  std::string head = fmt::format("{}crc32 {:08x}\nbytes {}\n", kMagic, crc, uint64_t(size));
  head.resize(kUserBlock, '\0');
  if (::pwrite(fd, head.data(), head.size(), 0) != ssize_t(head.size()) || ::fsync(fd) != 0)
    throw RunError(fmt::format("{}: cannot write ({}); nothing was replaced", tmp_, std::strerror(errno)));
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
    throw RunError(fmt::format("cannot rename {} to {} ({})", tmp_, path_, std::strerror(errno)));
  committed_ = true;
}

// ---- reading ---------------------------------------------------------------------------

// A file without thx's checksum block (written before it existed) reaches HDF5's parser
// unchecked, and Debian's HDF5 1.10 has crashed on damaged files where no check from outside can
// come first (fuzzing: a division by zero opening a dataset). Such a file is first read whole,
// every dataset and root attribute, in a child process (a fork) that opens it itself; if HDF5
// crashes there, the file is one line and this process never parses it. Errors are left for
// this process to report in its turn. Afterwards the file is what the child listed and read:
// a dataset its listing did not reach is missing (has, read, datasets answer from that list);
// list() and attr() run first in a child the same way. f returns whether it went through; the
// child's exit status says so (0, or kChildThrew).
namespace {
constexpr int kChildThrew = 3;
// The sanitizers' death callback (libFuzzer's writes a crash file): the child's crash is an
// answer for its parent, not a finding. A weak symbol: absent outside sanitizer builds.
extern "C" void __sanitizer_set_death_callback(void (*)(void)) __attribute__((weak));
}  // namespace

bool H5Reader::in_child_first(const std::function<bool()>& f) const {
  if (!guarded_ || in_child_) return true;
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return true;  // no process to spare: parse it here, as before
  if (pid == 0) {
    in_child_ = true;
    for (const int sig : {SIGFPE, SIGSEGV, SIGBUS, SIGILL, SIGABRT, SIGINT, SIGTERM}) std::signal(sig, SIG_DFL);
    if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(nullptr);
    bool ok = false;
    try {
      ok = f();
    } catch (...) {
    }
    ::_exit(ok ? 0 : kChildThrew);  // no exit handlers: they belong to the parent
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status))
    throw InputError(fmt::format("{}: damaged: HDF5 crashed reading it ({}); the file has no thx checksum block "
                                 "(written before thx had one)", path_, strsignal(WTERMSIG(status))));
  if (!WIFEXITED(status) || (WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != kChildThrew))
    throw InputError(fmt::format("{}: damaged: HDF5 failed reading it (exit {}); the file has no thx checksum "
                                 "block (written before thx had one)", path_, WEXITSTATUS(status)));
  return WEXITSTATUS(status) == 0;
}

H5Reader::H5Reader(std::string path) : path_(std::move(path)) {
  if (::access(path_.c_str(), R_OK) != 0) throw InputError(fmt::format("{}: cannot read file", path_));
  const H5Checksum sum = verify_h5_checksum(path_);
  if (sum.present && !sum.ok) throw InputError(fmt::format("{}: {}", path_, sum.problem));
  if (H5Fis_hdf5(path_.c_str()) <= 0)
    throw InputError(fmt::format("{}: not an HDF5 file (or truncated)", path_));
  guarded_ = !sum.present;
  in_child_first([&] {  // every dataset and root attribute; errors are left for their calls
    file_ = H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file_ < 0) return true;  // fails here the same way, one line
    std::vector<std::string> names;
    H5O_info_t info;
    try {
      names = datasets("/");
    } catch (const std::exception&) {
      return true;
    }
    for (const std::string& d : names) try {
        read(d);
      } catch (const std::exception&) {
      }
    if (H5Oget_info_by_name(file_, "/", &info, H5P_DEFAULT) < 0) return true;
    for (hsize_t i = 0; i < info.num_attrs; ++i) {
      char name[256] = {};
      if (H5Aget_name_by_idx(file_, "/", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT) <= 0)
        return true;
      try {
        attr("/", name);
      } catch (const std::exception&) {
      }
    }
    return true;
  });
  file_ = H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file_ >= 0 && guarded_) {
    // The child listed the datasets the same way and read each without crashing: those are the
    // file's datasets from here on.
    in_child_ = true;  // (no child for the listing itself: it went through in the child)
    try {
      for (const std::string& d : datasets("/")) vetted_.insert(d);
    } catch (const std::exception&) {
    }
    in_child_ = false;
  }
  if (file_ < 0) throw InputError(fmt::format("{}: cannot open HDF5 file (truncated or corrupt?)", path_));
}

H5Reader::~H5Reader() {
  if (file_ >= 0) H5Fclose(file_);
}

bool H5Reader::has(const std::string& name) const {
  if (guarded_ && !in_child_) {  // the file is what the child listed and read (above)
    for (const std::string& d : vetted_)
      if (d == name || (d.size() > name.size() && d.compare(0, name.size(), name) == 0 && d[name.size()] == '/'))
        return true;
    return false;
  }
  // H5Lexists must be asked one path component at a time.
  std::string prefix;
  size_t pos = 1;
  while (pos <= name.size()) {
    const size_t next = name.find('/', pos);
    prefix = name.substr(0, next);
    if (H5Lexists(file_, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  return true;
}

torch::Tensor H5Reader::read(const std::string& name) const {
  if (!has(name)) throw InputError(fmt::format("{}: missing dataset {}", path_, name));
  Handle ds{H5Dopen2(file_, name.c_str(), H5P_DEFAULT), H5Dclose};
  if (ds.id < 0) throw InputError(fmt::format("{}: cannot open dataset {}", path_, name));
  Handle space{H5Dget_space(ds.id), H5Sclose};
  const int rank = H5Sget_simple_extent_ndims(space.id);
  std::vector<hsize_t> dims(std::max(rank, 0));
  if (rank > 0) H5Sget_simple_extent_dims(space.id, dims.data(), nullptr);
  Handle ftype{H5Dget_type(ds.id), H5Tclose};
  torch::ScalarType st;
  bool cls_ok = true;
  const H5T_class_t cls = H5Tget_class(ftype.id);
  const size_t size = H5Tget_size(ftype.id);
  if (cls == H5T_FLOAT && size == 8) st = torch::kFloat64;
  else if (cls == H5T_FLOAT && size == 4) st = torch::kFloat32;
  else if (cls == H5T_INTEGER && size == 8) st = torch::kInt64;
  else if (cls == H5T_INTEGER && size == 4) st = torch::kInt32;
  else if (cls == H5T_INTEGER && size == 1) st = torch::kUInt8;
  else st = torch::kByte, cls_ok = false;
  // Only the five types thx writes are read, bit for bit: a damaged type (a float of 4 GB per
  // element, 31 bits of precision) would otherwise send HDF5 into a conversion whose buffer is
  // the declared element size times the count.
  if (!cls_ok || H5Tequal(ftype.id, h5_type(st)) <= 0)
    throw InputError(fmt::format("{}: dataset {} has an unsupported type ({} of {} bytes); thx reads "
                                 "little-endian IEEE float32/float64, int32/int64 and uint8", path_, name,
                                 cls == H5T_FLOAT ? "a float" : cls == H5T_INTEGER ? "an integer" : "not a number",
                                 size));
  // A damaged (or hostile) file may declare any shape: its element count must not overflow and
  // must fit in what the file could hold (gzip packs at most ~1032:1), before anything is
  // allocated.
  std::vector<int64_t> shape(dims.begin(), dims.end());
  uint64_t elements = 1;
  bool overflow = false;
  for (const hsize_t d : dims) overflow |= __builtin_mul_overflow(elements, uint64_t(d), &elements);
  uint64_t bytes = 0;
  overflow |= __builtin_mul_overflow(elements, uint64_t(torch::elementSize(st)), &bytes);
  struct stat file_stat {};
  const uint64_t file_bytes = ::stat(path_.c_str(), &file_stat) == 0 ? uint64_t(file_stat.st_size) : 0;
  if (overflow || bytes > std::max<uint64_t>(file_bytes * 1100, 1 << 20))
    throw InputError(fmt::format("{}: dataset {} declares a shape of {} elements, more than the file can hold "
                                 "(truncated or corrupt?)", path_, name, overflow ? "too many" : std::to_string(elements)));
  // What the dataset stores must be able to hold it too: thx writes every element, so a dataset
  // of mostly unwritten chunks (HDF5 would fill them, slowly and with zeros) is damaged.
  // Unfiltered, every element is stored as it is: contiguous and compact (in the header)
  // datasets hold exactly their bytes, chunked ones at least that (whole edge chunks). On a
  // damaged chunked file that stored less, HDF5 1.10 read past its own buffer (fuzzing, shard).
  Handle dcpl{H5Dget_create_plist(ds.id), H5Pclose};
  const H5D_layout_t layout = H5Pget_layout(dcpl.id);
  const bool filtered = H5Pget_nfilters(dcpl.id) != 0;
  if (const uint64_t stored = H5Dget_storage_size(ds.id);
      bytes > 0 && (filtered ? stored * 1100 < bytes : layout == H5D_CHUNKED ? stored < bytes : stored != bytes))
    throw InputError(fmt::format("{}: dataset {} stores {} bytes for {} declared (truncated or corrupt?)", path_,
                                 name, stored, bytes));
  torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(st));
  if (t.numel() > 0 &&
      H5Dread(ds.id, h5_type(st), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()) < 0)
    throw InputError(fmt::format("{}: cannot read dataset {} (truncated or corrupt?)", path_, name));
  return t;
}

double H5Reader::read_scalar(const std::string& name) const {
  torch::Tensor t = read(name);
  if (t.numel() != 1) throw InputError(fmt::format("{}: dataset {} is not a scalar", path_, name));
  return t.to(torch::kFloat64).item<double>();
}

std::string H5Reader::attr(const std::string& object, const std::string& key) const {
  in_child_first([&] { attr(object, key); return true; });
  Handle a{H5Aopen_by_name(file_, object.c_str(), key.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
  if (a.id < 0) throw InputError(fmt::format("{}: missing attribute {}:{}", path_, object, key));
  Handle type{H5Aget_type(a.id), H5Tclose};
  if (H5Tis_variable_str(type.id) > 0) {
    char* buf = nullptr;
    Handle mem{H5Tcopy(H5T_C_S1), H5Tclose};
    H5Tset_size(mem.id, H5T_VARIABLE);
    if (H5Aread(a.id, mem.id, &buf) < 0 || !buf)
      throw InputError(fmt::format("{}: cannot read attribute {}:{}", path_, object, key));
    std::string out(buf);
    H5free_memory(buf);
    return out;
  }
  std::string out(H5Tget_size(type.id), '\0');
  if (H5Aread(a.id, type.id, out.data()) < 0)
    throw InputError(fmt::format("{}: cannot read attribute {}:{}", path_, object, key));
  while (!out.empty() && out.back() == '\0') out.pop_back();
  return out;
}

std::vector<std::string> H5Reader::list(const std::string& group) const {
  in_child_first([&] { list(group); return true; });
  std::vector<std::string> names;
  auto cb = [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
    return 0;
  };
  if (H5Literate_by_name(file_, group.c_str(), H5_INDEX_NAME, H5_ITER_INC, nullptr, cb, &names,
                         H5P_DEFAULT) < 0)
    throw InputError(fmt::format("{}: missing group {}", path_, group));
  return names;
}

std::vector<std::string> H5Reader::datasets(const std::string& group) const {
  if (guarded_ && !in_child_) {
    const std::string prefix = group == "/" ? "/" : group + "/";
    std::vector<std::string> out;
    for (const std::string& d : vetted_)
      if (d.compare(0, prefix.size(), prefix) == 0) out.push_back(d);
    return out;  // sorted, as the set is
  }
  // A damaged file may link a group into itself or nest groups without end (found by
  // fuzzing: a stack overflow): each group is walked once, and thx's files nest a few levels.
  std::vector<std::string> out;
  std::set<haddr_t> seen;
  std::function<void(const std::string&, int)> walk = [&](const std::string& g, int depth) {
    if (depth > 64)
      throw InputError(fmt::format("{}: groups nested more than 64 deep under {} (corrupt file?)", path_, group));
    for (const auto& n : list(g)) {
      const std::string full = (g == "/" ? "" : g) + "/" + n;
      H5O_info_t info;
      if (H5Oget_info_by_name(file_, full.c_str(), &info, H5P_DEFAULT) < 0) continue;
      if (info.type == H5O_TYPE_GROUP) {
        if (seen.insert(info.addr).second) walk(full, depth + 1);
      } else if (info.type == H5O_TYPE_DATASET) {
        out.push_back(full);
      }
    }
  };
  H5O_info_t top;
  if (H5Oget_info_by_name(file_, group.c_str(), &top, H5P_DEFAULT) >= 0) seen.insert(top.addr);
  walk(group, 0);
  return out;
}

}  // namespace thx
