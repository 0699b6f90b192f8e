#include "common/provenance.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <type_traits>

#include <fmt/format.h>

#include "common/fs.h"
#include "common/host_memory.h"
#include "common/precision.h"
#include "common/runtime.h"

namespace thx {

namespace {

std::string g_command;
std::string g_started;

// A word as a POSIX shell would need it quoted to give it back unchanged.
std::string shell_word(const std::string& w) {
  if (!w.empty() && w.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                        "_-./=:,+@%") == std::string::npos)
    return w;
  std::string q = "'";
  for (char c : w) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

std::string version_line() {
  return fmt::format("thx {} (commit {}{})", build_version(), build_commit(),
                     build_dirty() ? ", built with uncommitted changes" : "");
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void set_command_line(int argc, char** argv) {
  g_command.clear();
  for (int i = 0; i < argc; ++i) g_command += (i ? " " : "") + shell_word(argv[i]);
  g_started = utc_now();
}

nlohmann::json session_provenance() {
  nlohmann::json j;
  j["version"] = build_version();
  j["commit"] = build_commit();
  j["dirty"] = build_dirty();
  j["command"] = g_command;
  std::error_code ec;
  j["cwd"] = std::filesystem::current_path(ec).string();
  char host[256] = {0};
  j["host"] = gethostname(host, sizeof host - 1) == 0 ? host : "";
  j["cpu"] = cpu_bf16().describe();
  if (const std::string blas = blas_description(); !blas.empty()) j["blas"] = blas;
  if (torch::cuda::is_available()) {
    nlohmann::json gpus = nlohmann::json::array();
    for (int64_t i = 0; i < int64_t(torch::cuda::device_count()); ++i)
      gpus.push_back(device_description(torch::Device(torch::kCUDA, int(i))));
    j["gpus"] = gpus;
  }
  if (const char* rank = std::getenv("RANK")) j["rank"] = rank;
  // The switches in the environment that change which code computes a number (sums in another
  // order): thx's kernels or ATen's composition (runtime.h), the CPU's row kernels (kernels.h),
  // OpenBLAS's kernels (runtime.h).
  for (const char* name : {"THX_ATEN", "THX_KERNELS", "THX_BF16_CORE", "OPENBLAS_CORETYPE"})
    if (const char* v = std::getenv(name); v && *v) j["environment"][name] = v;
  j["pid"] = int64_t(::getpid());
  j["started"] = g_started.empty() ? utc_now() : g_started;
  if (std::ifstream in("/proc/sys/kernel/random/boot_id"); in) {
    std::string id;
    if (in >> id) j["boot_id"] = id;
  }
  if (const int64_t kills = oom_kills(); kills >= 0) j["oom_kills"] = kills;
  return j;
}

namespace {
// A session's field as it was written, or `fallback` where it is absent or of another type (a
// provenance.json edited by hand must not stop a run).
template <class T>
T field(const nlohmann::json& s, const char* key, T fallback) {
  if (!s.contains(key)) return fallback;
  const nlohmann::json& v = s[key];
  if constexpr (std::is_same_v<T, std::string>) return v.is_string() ? v.get<std::string>() : fallback;
  else return v.is_number_integer() ? v.get<T>() : fallback;
}
}  // namespace

std::string unended_session(const nlohmann::json& sessions, const nlohmann::json& now) {
  // (One process is rank 0: a data-parallel run may resume as one process and the reverse.)
  const auto rank = [](const nlohmann::json& s) { return field<std::string>(s, "rank", "0"); };
  const nlohmann::json* last = nullptr;
  if (sessions.is_array())
    for (const auto& s : sessions)
      if (s.is_object() && rank(s) == rank(now)) last = &s;
  if (!last || last->contains("ended")) return "";
  const nlohmann::json& s = *last;
  const int64_t pid = field<int64_t>(s, "pid", -1);
  const std::string who = fmt::format("the last session here (pid {}, started {}) did not record its end",
                                      pid >= 0 ? std::to_string(pid) : "?", field<std::string>(s, "started", "?"));
  const std::string boot = field<std::string>(s, "boot_id", ""), boot_now = field<std::string>(now, "boot_id", "");
  if (boot.empty() || boot_now.empty()) return who + " (killed, crashed, or the machine stopped)";
  if (boot != boot_now) return who + ": the machine has restarted since it started";
  const int64_t before = field<int64_t>(s, "oom_kills", -1), after = field<int64_t>(now, "oom_kills", -1);
  const int64_t kills = before >= 0 && after >= 0 ? after - before : 0;
  if (kills > 0)
    return fmt::format("{}: Linux's out-of-memory killer has ended {} process{} since it started (/proc/vmstat "
                       "oom_kill), {}; {}", who, kills, kills == 1 ? "" : "es",
                       pid > 0 && oom_killed(pid) ? fmt::format("it among them (the kernel's log names pid {})", pid)
                                                  : "most likely it",
                       oom_killer_advice("this run", "train.grad_accum, or fewer jobs on the machine"));
  return who + ": it was killed (SIGKILL, as `kill -9` or a job scheduler's limit sends it) or crashed (thx's "
               "report of a crash, \"thx: fatal signal\", is on that session's stderr)";
}

namespace {

nlohmann::json read_sessions(const std::string& path) {
  nlohmann::json p = nlohmann::json::object();
  if (std::filesystem::exists(path)) {
    p = nlohmann::json::parse(read_file(path), nullptr, false);
    if (!p.is_object() || !p.contains("sessions") || !p["sessions"].is_array()) {
      std::error_code ec;
      std::filesystem::rename(path, path + ".unreadable", ec);
      p = nlohmann::json::object();
    }
  }
  if (!p.contains("sessions")) p["sessions"] = nlohmann::json::array();
  return p;
}

}  // namespace

size_t record_session_start(const std::string& dir, std::string* unended) {
  const std::string path = (std::filesystem::path(dir) / "provenance.json").string();
  nlohmann::json p = read_sessions(path);
  const nlohmann::json now = session_provenance();
  if (unended) *unended = unended_session(p["sessions"], now);
  p["sessions"].push_back(now);
  write_file_atomic(path, p.dump(2) + "\n");
  return p["sessions"].size() - 1;
}

void record_session_end(const std::string& dir, size_t index) {
  const std::string path = (std::filesystem::path(dir) / "provenance.json").string();
  nlohmann::json p = read_sessions(path);
  if (index >= p["sessions"].size()) return;
  p["sessions"][index]["ended"] = utc_now();
  write_file_atomic(path, p.dump(2) + "\n");
}

}  // namespace thx
