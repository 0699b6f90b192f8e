// log.h: spdlog loggers with a [component] prefix, as Marian does: "[12:01:02] [attention] ...".
// All loggers write to stderr, so stdout stays clean for tables and dumped configs.
#pragma once
#include <spdlog/spdlog.h>

#include <chrono>
#include <string>

namespace thx {

// The logger for one component ("cli", "attention", "bench", ...), created on first use.
std::shared_ptr<spdlog::logger> log(const std::string& component);

// Set the level of every thx logger: "debug", "info", "warn", "error" or "off".
void set_log_level(const std::string& level);

// A rank of a data-parallel run other than 0 (distributed/dist.h): its loggers show only
// warnings and errors, each line prefixed with "rank N". error_prefix() is then "rank N: ",
// for the one-line errors of main(); "" otherwise.
void set_log_rank(int rank);
std::string error_prefix();

// Also write every thx logger's output to `path` (appending), until remove_log_file(), each
// line flushed as it is logged. The file starts with the lines logged before it was added (up
// to 1,000 of them, kept in memory since the process started or the last remove_log_file()): a
// run's log holds what the console showed before its folder could be written, too, from the
// command's first line (train.deterministic's among them).
void add_log_file(const std::string& path);
void remove_log_file();

// A duration for progress lines and ETAs: "42s", "3m07s", "2h05m", from two days "3d04h", from
// two years "228 years" (rounded to whole seconds first, so that 59.6 s reads "1m00s", not
// "0m60s").
std::string format_duration(double seconds);
// A size in GB (10^9 bytes) for memory lines: "0.8176 GB", "230.2 GB", from 10,000 GB whole
// with commas ("4,496,000 GB"); under 10 MB in MB or bytes. Never in e-notation, which the
// memory bound's refusal printed at absurd sizes ("4.496e+06 GB").
std::string format_gb(double bytes);
// A count with commas: "1,000,000" (progress lines).
std::string format_count(int64_t n);

// Seconds from t to now, on the monotonic clock.
inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace thx
