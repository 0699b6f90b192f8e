#include "common/h5.h"

#include <hdf5.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <functional>

#include "common/error.h"

namespace thx {
namespace {

// HDF5 prints its error stack to stderr by default; thx reports errors itself.
struct QuietHdf5 {
  QuietHdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }
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

}  // namespace

H5Writer::H5Writer(std::string path) : path_(std::move(path)) {
  tmp_ = fmt::format("{}.tmp-{}", path_, ::getpid());
  file_ = H5Fcreate(tmp_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file_ < 0) throw InputError(fmt::format("{}: cannot create file", tmp_));
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
  if (g.id < 0) throw std::runtime_error(fmt::format("{}: cannot create group {}", tmp_, group));
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
  if (ds.id < 0) throw std::runtime_error(fmt::format("{}: cannot create dataset {}", tmp_, name));
  if (t.numel() > 0 && H5Dwrite(ds.id, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()) < 0)
    throw std::runtime_error(fmt::format("{}: cannot write dataset {}", tmp_, name));
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
    throw std::runtime_error(fmt::format("{}: cannot write attribute {}:{}", tmp_, object, key));
}

void H5Writer::commit() {
  if (H5Fclose(file_) < 0) throw std::runtime_error(fmt::format("{}: cannot close", tmp_));
  file_ = -1;
  // fsync before the rename, so that the new name never points at unwritten data.
  const int fd = ::open(tmp_.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
    throw std::runtime_error(fmt::format("cannot rename {} to {}", tmp_, path_));
  committed_ = true;
}

// ---- reading ---------------------------------------------------------------------------

H5Reader::H5Reader(std::string path) : path_(std::move(path)) {
  if (::access(path_.c_str(), R_OK) != 0) throw InputError(fmt::format("{}: cannot read file", path_));
  if (H5Fis_hdf5(path_.c_str()) <= 0)
    throw InputError(fmt::format("{}: not an HDF5 file (or truncated)", path_));
  file_ = H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file_ < 0) throw InputError(fmt::format("{}: cannot open HDF5 file (truncated or corrupt?)", path_));
}

H5Reader::~H5Reader() {
  if (file_ >= 0) H5Fclose(file_);
}

bool H5Reader::has(const std::string& name) const {
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
  const H5T_class_t cls = H5Tget_class(ftype.id);
  const size_t size = H5Tget_size(ftype.id);
  if (cls == H5T_FLOAT) st = size == 8 ? torch::kFloat64 : torch::kFloat32;
  else if (cls == H5T_INTEGER && size == 8) st = torch::kInt64;
  else if (cls == H5T_INTEGER && size == 4) st = torch::kInt32;
  else if (cls == H5T_INTEGER && size == 1) st = torch::kUInt8;
  else throw InputError(fmt::format("{}: dataset {} has an unsupported type", path_, name));
  std::vector<int64_t> shape(dims.begin(), dims.end());
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
  std::vector<std::string> out;
  std::function<void(const std::string&)> walk = [&](const std::string& g) {
    for (const auto& n : list(g)) {
      const std::string full = (g == "/" ? "" : g) + "/" + n;
      H5O_info_t info;
      if (H5Oget_info_by_name(file_, full.c_str(), &info, H5P_DEFAULT) < 0) continue;
      if (info.type == H5O_TYPE_GROUP) walk(full);
      else if (info.type == H5O_TYPE_DATASET) out.push_back(full);
    }
  };
  walk(group);
  return out;
}

}  // namespace thx
