// config_tree.h: the YAML document a command is configured from.
//
// Priority, lowest first: defaults < --config files (merged in the order given) < --set
// KEY=VALUE overrides. Mappings merge key by key; scalars and sequences replace. The tree
// remembers where every value came from ("a.yaml:7", "--set attention.h=24"), so that an
// error about a key can name the file and line the bad value was written on.
//
// It does not know any key: typed structs read it through schema.h, which rejects unknown
// keys and wrong types. Beyond it, YAML is read directly only by: a sweep file's grammar
// (experiments/sweep.cpp) and its table key (results_table.cpp); the resume check, which
// compares a run's stored config with the new one key by key (training/run_dir.cpp, spec.cpp:
// upgrading configs written before a key moved); and the ledger, which reads train.precision
// from the config.yaml a finished run left (experiments/sweep_results.cpp).
#pragma once
#include <yaml-cpp/yaml.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/schema.h"

namespace thx {

// InputError "<origin>:<line>: keys are plain names, not lists or mappings" for a mapping key
// anywhere in `node` that is not a scalar (YAML allows `? [a, b] : 1`; no thx key is one).
void check_plain_keys(const YAML::Node& node, const std::string& origin);

class ConfigTree {
 public:
  ConfigTree();

  // Merge a YAML file. Throws InputError naming the file (and line) when it cannot be read,
  // is not valid YAML, or its top level is not a mapping.
  void merge_file(const std::string& path);
  // Merge YAML text; `origin` names it in messages ("defaults", a test name, ...).
  void merge_text(const std::string& yaml, const std::string& origin);
  // Apply one "dotted.key=VALUE" override; VALUE is parsed as YAML, so "[X_l,M_l]" is a list.
  void set(const std::string& assignment);
  // Set one dotted key to a YAML value. `origin` names where it was written: a file name
  // (the value's own line, if it has one, is added) or "--set ...".
  void set(const std::string& key, const YAML::Node& value, const std::string& origin);

  // If `child` is a mapping, give it every key of `parent` it does not set itself (deeply),
  // with the parent's origins.
  void inherit(const std::string& child, const std::string& parent);

  // Move the top-level block `key` out of this tree into a tree of its own (empty if absent),
  // with its origins: a block that is not part of the experiment (distributed: launch
  // settings) is read from it, and the rest of the config never sees it.
  ConfigTree take(const std::string& key);

  const YAML::Node& root() const { return root_; }

  // Paths: a relative path written in a config file (merge_file, or a file noted with
  // note_file) is taken relative to that file's directory; one given with --set, or in YAML
  // text (a run's stored config), relative to the working directory. note_file(f): values
  // set() with origin f come from the file f (a sweep's overrides).
  void note_file(const std::string& file);
  // Make the string values at `keys` (dotted; absent or empty ones are left alone) absolute by
  // that rule, normalized lexically.
  void resolve_paths(const std::vector<std::string>& keys);

  // Where the value at `key` (or its nearest parent) came from; "defaults" if never set.
  std::string origin(const std::string& key) const;
  // One line for a ConfigError: "<origin>: <key>: <message>", or for a key nothing set
  // "<key>: <message> (not set by any --config or --set)".
  std::string describe(const ConfigError& e) const;
  // f(), with a ConfigError it throws told by describe(): a check after the config was read
  // (the data's vocabulary, the memory bound) names the file and line too.
  template <class F>
  auto told(F&& f) const -> decltype(f()) {
    try {
      return f();
    } catch (const ConfigError& e) {
      throw InputError(describe(e));
    }
  }

 private:
  void merge_into(YAML::Node& parent, const std::string& key, const YAML::Node& src,
                  const std::string& path, const std::string& file);
  void record(const YAML::Node& src, const std::string& path, const std::string& file);

  YAML::Node root_;
  std::map<std::string, std::string> origins_;
  std::map<std::string, std::string> bases_;  // key -> the directory of the file that wrote it ("": cwd)
  std::set<std::string> files_;               // origins that are files (paths relative to them)
};

// Read and validate a typed config. `validate` throws ConfigError for semantic problems; every
// ConfigError becomes one InputError line naming the file/line the value came from.
template <class T, class Validate>
T load_config(const ConfigTree& tree, Validate&& validate) {
  try {
    T config = cfg::read<T>(tree.root());
    validate(config);
    return config;
  } catch (const ConfigError& e) {
    throw InputError(tree.describe(e));
  }
}

}  // namespace thx
