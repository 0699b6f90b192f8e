#include "training/tensorboard.h"

#include <unistd.h>

#include <boost/crc.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>

#include "common/error.h"
#include "training/tensorboard.pb.h"

namespace thx {
namespace fs = std::filesystem;

uint32_t masked_crc32c(const void* data, size_t n) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;  // CRC-32C
  crc.process_bytes(data, n);
  const uint32_t c = crc.checksum();
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

namespace {

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void put_le(std::string& s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s.push_back(char((v >> (8 * i)) & 0xff));
}

void add_values(tb::Summary& summary, const std::string& prefix, const nlohmann::json& j) {
  for (const auto& [k, v] : j.items()) {
    if (v.is_object()) add_values(summary, prefix + k + "/", v);
    else if (v.is_number()) {
      tb::SummaryValue* value = summary.add_value();
      value->set_tag(prefix + k);
      value->set_simple_value(v.get<float>());
    }
  }
}

}  // namespace

EventWriter::EventWriter(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().find("tfevents") != std::string::npos) first_ = false;
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  const std::string name =
      (fs::path(dir) / fmt::format("events.out.tfevents.{}.{}.{}", int64_t(wall_time()), host, getpid())).string();
  // Never over an earlier file (a run resumed within the second by the same pid: one process's
  // runs, or a pid used again): a suffix keeps the name order the order of writing.
  for (int i = 0; !ec && !file_ && i < 1000; ++i) {
    path_ = i == 0 ? name : fmt::format("{}.{:03}", name, i);
    file_ = std::fopen(path_.c_str(), "wbx");
    if (!file_ && errno != EEXIST) break;
  }
  if (!file_)
    throw InputError(fmt::format("{}: cannot write TensorBoard events there ({})", dir,
                                 ec ? ec.message() : std::string(std::strerror(errno))));
  tb::Event e;
  e.set_wall_time(wall_time());
  e.set_file_version("brain.Event:2");
  write_record(e.SerializeAsString());
  if (first_) write_start();
}

EventWriter::~EventWriter() {
  if (file_) std::fclose(file_);
}

void EventWriter::scalars(int64_t step, const std::string& prefix, const nlohmann::json& values, double at) {
  tb::Event e;
  e.set_wall_time(at > 0 ? at : wall_time());
  e.set_step(step);
  add_values(*e.mutable_summary(), prefix, values);
  if (e.summary().value_size() > 0) write_record(e.SerializeAsString());
}

void EventWriter::write_start() {
  tb::Event e;
  e.set_wall_time(wall_time());
  e.set_step(0);
  e.mutable_session_log()->set_status(tb::SessionLog::START);
  write_record(e.SerializeAsString());
}

void EventWriter::restart(const std::vector<Record>& records) {
  write_start();
  restarted_ = true;
  for (const Record& r : records) scalars(r.step, r.prefix, r.values, r.wall_time);
}

void EventWriter::write_record(const std::string& data) {
  std::string r;
  put_le(r, data.size(), 8);
  put_le(r, masked_crc32c(r.data(), 8), 4);
  r += data;
  put_le(r, masked_crc32c(data.data(), data.size()), 4);
  if (std::fwrite(r.data(), 1, r.size(), file_) != r.size() || std::fflush(file_) != 0)
    throw RunError(fmt::format("{}: cannot write TensorBoard events ({})", path_, std::strerror(errno)));
}

}  // namespace thx
