#include "training/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/provenance.h"
#include "common/signals.h"
#include "training/checkpoint.h"

namespace thx {
namespace fs = std::filesystem;

namespace {

void flatten(const YAML::Node& n, const std::string& key, std::map<std::string, std::string>& out) {
  if (n.IsMap()) {
    for (const auto& kv : n) flatten(kv.second, key.empty() ? kv.first.as<std::string>() : key + "." + kv.first.as<std::string>(), out);
    return;
  }
  YAML::Emitter e;
  e << YAML::Flow << n;
  out[key] = e.c_str();
}

// Whether `key` is covered by an allowed name: the key itself or a block above it.
bool allowed(const std::string& key, const std::vector<std::string>& allow) {
  for (const auto& a : allow)
    if (key == a || (key.size() > a.size() && key.compare(0, a.size(), a) == 0 && key[a.size()] == '.')) return true;
  return false;
}

// An exclusive lock on <dir>/.lock, so that two processes never train in one directory (a
// sweep restarted while a run it started is still saving). Waits up to a minute.
// The holder's pid is written into the lock file, for the messages.
int lock_dir(const std::string& dir) {
  for (int i = 0;; ++i) {
    if (const int fd = try_lock_directory(dir); fd >= 0) return fd;
    if (i == 0) thx::log("train")->warn("{}: another process{} is training here; waiting up to a minute", dir,
                                        lock_holder(dir));
    if (i == 600) throw InputError(fmt::format("{}: another process{} is training in this run directory", dir,
                                               lock_holder(dir)));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

std::map<std::string, std::pair<std::string, std::string>> config_differences(const std::string& a,
                                                                               const std::string& b) {
  std::map<std::string, std::string> fa, fb;
  flatten(YAML::Load(a), "", fa);
  flatten(YAML::Load(b), "", fb);
  std::map<std::string, std::pair<std::string, std::string>> out;
  for (const auto& [k, v] : fa) {
    auto it = fb.find(k);
    if (it == fb.end()) out[k] = {v, ""};
    else if (it->second != v) out[k] = {v, it->second};
  }
  for (const auto& [k, v] : fb)
    if (!fa.count(k)) out[k] = {"", v};
  return out;
}

RunDirectory::RunDirectory(RunDirOptions o) : o_(std::move(o)) {
  check_output_dir(o_.dir, o_.flag);
  // Another command's run (pretraining's config.yaml, fine-tuning's finetune.yaml): its checkpoints
  // and results are not this run's to continue or to replace, with --resume or without.
  for (const auto& [file, what] : {std::pair{kPretrainConfigFile, "pretraining"}, {kFinetuneConfigFile, "fine-tuning"}})
    if (file != o_.config_file && fs::exists(fs::path(o_.dir) / file) && !fs::exists(fs::path(o_.dir) / o_.config_file))
      throw InputError(fmt::format("{} {}: a {} run's folder (it holds {}); choose another", o_.flag, o_.dir, what,
                                   file));
  if (!o_.allow_changes.empty()) {
    if (!o_.resume)
      throw InputError("--allow-config-change: only with --resume (it names keys a resumed run may change)");
    std::map<std::string, std::string> keys;
    flatten(YAML::Load(o_.yaml), "", keys);
    for (const auto& a : o_.allow_changes) {
      const bool known = std::any_of(keys.begin(), keys.end(), [&](const auto& kv) { return allowed(kv.first, {a}); });
      if (!known)
        throw InputError(fmt::format("--allow-config-change {}: not a key or block of the config (e.g. train.steps, "
                                     "checkpoint)", a));
    }
  }
  // Until the outputs open, a signal ends the process with a line that says nothing was recorded
  // (common/signals.h): the data, the model and a checkpoint are only read, and a lock waited for.
  set_stop_note(fmt::format(" while it set up, before it recorded anything in {}; the same command runs it again",
                            o_.dir));
  if (fs::is_directory(o_.dir)) lock_fd_ = lock_dir(o_.dir);
  std::string newest;
  for (const auto& d : o_.checkpoint_dirs) {
    const auto all = list_checkpoints(d);
    if (!all.empty()) newest = all.back();
  }
  if (!o_.resume) {
    if (!newest.empty())
      throw InputError(fmt::format("{}: the run directory already has checkpoints; pass --resume to continue "
                                   "it, or choose another directory (nothing was overwritten)", o_.dir));
    for (const auto& r : o_.results)
      if (fs::exists(r))
        throw InputError(fmt::format("{}: already exists; pass --resume to continue that run, or choose "
                                     "another directory (nothing was overwritten)", r));
    return;
  }
  from_checkpoint_ = newest;
  const fs::path stored = fs::path(o_.dir) / o_.config_file;
  if (!fs::exists(stored) || !o_.normalize) return;
  const std::string before = o_.normalize(read_file(stored.string()), stored.string());
  for (const auto& [k, v] : config_differences(before, o_.yaml)) {
    if (allowed(k, o_.allow_changes)) changes_[k] = v;
    else {
      std::vector<std::string> keys;
      for (const auto& [k2, v2] : config_differences(before, o_.yaml))
        if (!allowed(k2, o_.allow_changes))
          keys.push_back(fmt::format("{} ({} -> {})", k2, v2.first.empty() ? "unset" : v2.first,
                                     v2.second.empty() ? "unset" : v2.second));
      throw InputError(fmt::format("{}: --resume with a config that differs in {}; resume with the same "
                                   "config, or pass --allow-config-change KEY... to change it deliberately "
                                   "(nothing was changed)", stored.string(), fmt::join(keys, ", ")));
    }
  }
}

void RunDirectory::remove_stale_temporaries() const {
  // With the directory's lock held, a checkpoint's temporary file (<step>.h5.tmp-<pid>) belongs
  // to a process that died while writing it: a live writer would hold the lock.
  if (lock_fd_ < 0) return;
  int64_t files = 0;
  uintmax_t bytes = 0;
  for (const auto& d : o_.checkpoint_dirs) {
    if (!fs::is_directory(d)) continue;
    for (const auto& e : fs::directory_iterator(d)) {
      const std::string name = e.path().filename().string();
      if (!e.is_regular_file() || name.find(".h5.tmp-") == std::string::npos) continue;
      std::error_code ec;
      const uintmax_t size = e.file_size(ec);
      if (fs::remove(e.path(), ec)) ++files, bytes += ec ? 0 : size;
    }
  }
  if (files > 0)
    thx::log("train")->warn("removed {} unfinished checkpoint file{} ({:.1f} MB) left by a killed process in {}",
                            files, files > 1 ? "s" : "", double(bytes) / 1e6, o_.dir);
}

RunDirectory::~RunDirectory() {
  set_stop_note("");
  if (lock_fd_ >= 0) {
    try {
      record_session_end(o_.dir, session_);
    } catch (const std::exception& e) {
      thx::log("train")->warn("{}: could not record the end time in provenance.json: {}", o_.dir, e.what());
    }
  }
  if (log_open_) remove_log_file();
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void RunDirectory::open() {
  set_stop_note("");
  std::error_code ec;
  fs::create_directories(o_.dir, ec);
  if (ec) throw InputError(fmt::format("{}: cannot create the directory ({})", o_.dir, ec.message()));
  if (lock_fd_ < 0) lock_fd_ = lock_dir(o_.dir);
  remove_stale_temporaries();
  if (!changes_.empty()) {
    nlohmann::json c = nlohmann::json::object();
    for (const auto& [k, v] : changes_) {
      c[k] = {{"from", v.first}, {"to", v.second}};
      thx::log("train")->warn("{}: config change on resume (allowed): {}: {} -> {}", o_.dir, k,
                              v.first.empty() ? "unset" : v.first, v.second.empty() ? "unset" : v.second);
    }
    const nlohmann::json rec{{"time", std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()},
                             {"from_checkpoint", from_checkpoint_}, {"changes", c}};
    const std::string file = (fs::path(o_.dir) / "config_changes.jsonl").string();
    std::ofstream out(file, std::ios::app);
    out << rec.dump() << "\n" << std::flush;
    if (!out)  // (before the config is replaced: the change would go unrecorded)
      throw RunError(fmt::format("{}: cannot record the config change ({})", file, std::strerror(errno)));
  }
  write_file_atomic((fs::path(o_.dir) / o_.config_file).string(), o_.yaml);
  std::string unended;  // how the last session ended, where it did not say
  session_ = record_session_start(o_.dir, &unended);
  if (!o_.log_file.empty()) {
    add_log_file((fs::path(o_.dir) / o_.log_file).string());
    log_open_ = true;
  }
  if (!unended.empty()) thx::log("train")->warn("{}: {}", o_.dir, unended);
}

}  // namespace thx
