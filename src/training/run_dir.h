// run_dir.h: a run's directory as every kind of training prepares it, once: an exclusive lock,
// no overwriting of checkpoints without --resume, the resolved config stored in it and checked
// on --resume, the log file, and provenance.json (each session's version, commit, command line,
// host, CPU/GPU, start and end: common/provenance.h). It writes nothing before all of that has
// passed.
//
// On --resume the stored config and the new one are both resolved by the current code (so a
// key added since only takes its default) and compared key by key. A difference is refused
// with one line naming every key that differs, unless the key is allowed
// (--allow-config-change KEY..., a dotted key or a block: "train" allows train.*); an allowed
// change is logged and appended to <dir>/config_changes.jsonl ({time, from_checkpoint,
// changes: {key: {from, to}}}), and the new config replaces the stored one.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace thx {

// The stored config that makes a folder a run's, and says whose: pretraining's, fine-tuning's.
inline constexpr const char* kPretrainConfigFile = "config.yaml";
inline constexpr const char* kFinetuneConfigFile = "finetune.yaml";

struct RunDirOptions {
  std::string dir;
  std::string flag = "--run-dir";           // the flag that named dir, for messages
  std::string config_file = kPretrainConfigFile;  // the stored resolved config, inside dir
  std::string yaml;                         // this invocation's resolved config
  bool resume = false;
  std::vector<std::string> allow_changes;
  // Resolves stored YAML text as the current code would (defaults, migrated keys); `origin`
  // names it in messages.
  std::function<std::string(const std::string& yaml, const std::string& origin)> normalize;
  // Where checkpoints are kept (any of them non-empty without --resume is refused), and the
  // result files that likewise are never overwritten without --resume.
  std::vector<std::string> checkpoint_dirs, results;
  std::string log_file;  // inside dir; "" for none
};

class RunDirectory {
 public:
  // Validates (throws InputError, nothing written); lock and writes come with open().
  explicit RunDirectory(RunDirOptions o);
  ~RunDirectory();
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  // Creates the directory, takes the lock, removes checkpoint temporaries of killed processes
  // (*.h5.tmp-*: with the lock held, no live process is writing them), writes the config
  // (recording an allowed change) and starts the log file.
  void open();
  const std::string& dir() const { return o_.dir; }

 private:
  void remove_stale_temporaries() const;
  size_t session_ = size_t(-1);  // this process's entry in <dir>/provenance.json
  RunDirOptions o_;
  std::map<std::string, std::pair<std::string, std::string>> changes_;  // key -> (from, to)
  std::string from_checkpoint_;
  int lock_fd_ = -1;
  bool log_open_ = false;
};

// Keys whose values differ between two YAML texts ("a.b.c" -> (left, right); "" = absent).
std::map<std::string, std::pair<std::string, std::string>> config_differences(const std::string& a,
                                                                               const std::string& b);

}  // namespace thx
