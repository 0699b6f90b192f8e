#include "training/checkpoint.h"

#include <filesystem>
#include <cstring>
#include <regex>

#include "common/error.h"
#include "common/h5.h"
#include "common/provenance.h"

// Shapes: parameters and optimizer state as the model and optimizer hold them; scalars [];
// extra state as [bytes] uint8.
namespace thx {
namespace fs = std::filesystem;

std::string checkpoint_path(const std::string& dir, int64_t step) {
  return (fs::path(dir) / fmt::format("step-{:08d}.h5", step)).string();
}

void save_checkpoint(const std::string& path, const Checkpoint& c) {
  H5Writer w(path);
  for (const auto& [k, v] : c.params) w.write("/params/" + k, v);
  for (const auto& [k, v] : c.optimizer) w.write("/optimizer/" + k, v);
  w.write("/state/step", torch::tensor(c.step));
  w.write("/state/optimizer_step", torch::tensor(c.optimizer_step));
  if (c.rng.defined()) w.write("/state/rng", c.rng);
  w.write("/state/world_size", torch::tensor(c.world_size));
  if (c.rng_ranks.defined()) w.write("/state/rng_ranks", c.rng_ranks);
  if (c.rng_cuda.defined()) w.write("/state/rng_cuda", c.rng_cuda);
  w.write("/state/stream/epoch", torch::tensor(c.stream.epoch));
  w.write("/state/stream/doc", torch::tensor(c.stream.doc));
  w.write("/state/stream/offset", torch::tensor(c.stream.offset));
  w.write("/state/stream/example", torch::tensor(c.stream.example));
  for (const auto& [k, v] : c.extra) {
    torch::Tensor bytes = torch::empty({int64_t(v.size())}, torch::kUInt8);  // [bytes]
    if (!v.empty()) std::memcpy(bytes.data_ptr<uint8_t>(), v.data(), v.size());  // (empty: null)
    w.write("/state/extra/" + k, bytes);
  }
  w.attr("/", "config", c.config);
  w.attr("/", "provenance", session_provenance().dump());  // the session that wrote it
  w.commit();
}

Checkpoint load_checkpoint(const std::string& path) {
  H5Reader r(path);
  Checkpoint c;
  auto scalar = [&](const char* name) { return int64_t(r.read_scalar(name)); };
  for (const auto& name : r.datasets("/params")) c.params[name.substr(8)] = r.read(name);
  if (r.has("/optimizer"))
    for (const auto& name : r.datasets("/optimizer")) c.optimizer[name.substr(11)] = r.read(name);
  c.step = scalar("/state/step");
  c.optimizer_step = scalar("/state/optimizer_step");
  if (r.has("/state/rng")) c.rng = r.read("/state/rng");
  if (r.has("/state/world_size")) c.world_size = scalar("/state/world_size");
  if (r.has("/state/rng_ranks")) c.rng_ranks = r.read("/state/rng_ranks");
  if (r.has("/state/rng_cuda")) c.rng_cuda = r.read("/state/rng_cuda");
  c.stream = {scalar("/state/stream/epoch"), scalar("/state/stream/doc"),
              scalar("/state/stream/offset"), scalar("/state/stream/example")};
  c.config = r.attr("/", "config");
  if (r.has("/state/extra"))
    for (const auto& name : r.datasets("/state/extra")) {
      const torch::Tensor t = r.read(name).contiguous();  // [bytes] uint8
      c.extra[name.substr(13)] = std::string(reinterpret_cast<const char*>(t.data_ptr<uint8_t>()), size_t(t.numel()));
    }
  if (c.params.empty()) throw InputError(fmt::format("{}: no parameters (not a thx checkpoint?)", path));
  return c;
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  if (!fs::is_directory(dir)) return {};
  const std::regex name("step-(\\d{8})\\.h5");
  for (const auto& e : fs::directory_iterator(dir)) {
    std::smatch m;
    const std::string f = e.path().filename().string();
    if (e.is_regular_file() && std::regex_match(f, m, name)) found.emplace_back(std::stoll(m[1]), e.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

void prune_checkpoints(const std::string& dir, int64_t keep) {
  const auto all = list_checkpoints(dir);
  for (size_t i = 0; i + keep < all.size(); ++i) fs::remove(all[i]);
}

}  // namespace thx
