#include "common/log.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <deque>
#include <fstream>
#include <mutex>
#include <utility>

namespace thx {
namespace {
constexpr const char* kFilePattern = "[%Y-%m-%d %H:%M:%S] [%n] %v";
constexpr size_t kEarlyLines = 1000;

// The lines logged before a run's log file opens (the memory bound, the data's counts), kept
// to be written at its head: the file then holds everything the console showed.
class EarlyLines : public spdlog::sinks::base_sink<std::mutex> {
 public:
  EarlyLines() { set_pattern(kFilePattern); }
  // The kept lines, and how many earlier ones were let go; the store is emptied.
  std::deque<std::string> take(size_t* dropped) {
    std::lock_guard<std::mutex> lock(mutex_);
    *dropped = dropped_, dropped_ = 0;
    return std::exchange(lines_, {});
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t buf;
    formatter_->format(msg, buf);
    if (lines_.size() == kEarlyLines) lines_.pop_front(), ++dropped_;
    lines_.push_back(fmt::to_string(buf));
  }
  void flush_() override {}

 private:
  std::deque<std::string> lines_;
  size_t dropped_ = 0;
};

std::mutex g_mutex;
spdlog::level::level_enum g_level = spdlog::level::info;
std::shared_ptr<spdlog::sinks::basic_file_sink_mt> g_file;
// (A function's static: a logger made during another file's static initialization finds it built.)
const std::shared_ptr<EarlyLines>& early_lines() {
  static const auto early = std::make_shared<EarlyLines>();
  return early;
}
int g_rank = 0;
std::string pattern() {
  return g_rank > 0 ? fmt::format("[%H:%M:%S] [rank {}] [%n] %^%v%$", g_rank) : "[%H:%M:%S] [%n] %^%v%$";
}
spdlog::level::level_enum level() { return g_rank > 0 ? std::max(g_level, spdlog::level::warn) : g_level; }
// 4496000 -> "4,496,000" (rounded to a whole number).
std::string whole_with_commas(double x) {
  std::string digits = fmt::format("{:.0f}", x);
  for (int64_t at = int64_t(digits.size()) - 3; at > 0 && std::isdigit(static_cast<unsigned char>(digits[at - 1]));
       at -= 3)
    digits.insert(size_t(at), ",");
  return digits;
}

}  // namespace

std::shared_ptr<spdlog::logger> log(const std::string& component) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto existing = spdlog::get(component)) return existing;
  auto logger = spdlog::stderr_color_mt(component);
  logger->set_pattern(pattern());
  logger->sinks().push_back(g_file ? std::static_pointer_cast<spdlog::sinks::sink>(g_file) : early_lines());
  logger->set_level(level());
  logger->flush_on(spdlog::level::trace);  // each line on disk as it is logged: a killed run keeps its log
  return logger;
}

void set_log_level(const std::string& level) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_level = spdlog::level::from_str(level);
  spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& l) { l->set_level(thx::level()); });
}

void set_log_rank(int rank) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_rank = rank;
  spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& l) {
    l->set_level(thx::level());
    l->set_pattern(pattern());
  });
}

std::string error_prefix() { return g_rank > 0 ? fmt::format("rank {}: ", g_rank) : ""; }

}  // namespace thx

namespace thx {

void add_log_file(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mutex);
  size_t dropped = 0;
  const std::deque<std::string> early = early_lines()->take(&dropped);
  {
    std::ofstream head(path, std::ios::app);
    if (dropped > 0) head << fmt::format("({} earlier lines of this process not kept)\n", dropped);
    for (const auto& line : early) head << line;
  }
  g_file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, false);
  g_file->set_pattern(kFilePattern);
  spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& l) {
    auto& s = l->sinks();
    s.erase(std::remove(s.begin(), s.end(), early_lines()), s.end());
    s.push_back(g_file);
  });
}

void remove_log_file() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_file) return;
  spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& l) {
    auto& s = l->sinks();
    s.erase(std::remove(s.begin(), s.end(), g_file), s.end());
    s.push_back(early_lines());
  });
  g_file.reset();
}

std::string format_duration(double seconds) {
  const int64_t t = seconds > 0 ? int64_t(seconds + 0.5) : 0;
  if (t < 60) return fmt::format("{}s", t);
  if (t < 3600) return fmt::format("{}m{:02d}s", t / 60, int(t % 60));
  if (t < 2 * 86400) return fmt::format("{}h{:02d}m", t / 3600, int(t % 3600 / 60));
  if (t < 2 * 31557600) return fmt::format("{}d{:02d}h", t / 86400, int(t % 86400 / 3600));
  const double years = double(t) / 31557600;  // Julian years of 365.25 days
  return (years < 999.5 ? fmt::format("{:.3g}", years) : whole_with_commas(years)) + " years";
}

std::string format_count(int64_t n) { return (n < 0 ? "-" : "") + whole_with_commas(std::fabs(double(n))); }

std::string format_gb(double bytes) {
  const double gb = bytes / 1e9;
  if (gb >= 9999.5) return whole_with_commas(gb) + " GB";
  if (gb >= 0.01 || bytes <= 0) return fmt::format("{:.4g} GB", gb);
  if (bytes >= 1e3) return fmt::format("{:.3g} MB", bytes / 1e6);
  return fmt::format("{:.0f} bytes", bytes);
}

}  // namespace thx
