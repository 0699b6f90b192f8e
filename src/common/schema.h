// schema.h: typed config structs from YAML, strictly, with one field list per struct.
//
// A config struct lists its fields once, in a visit() template found by ADL:
//
//   template <class V> void visit(V& v, AttentionConfig& c) {
//     v("variant", c.variant, "multi_head | talking_heads | ...");
//     v("h", c.h, "softmax heads");
//   }
//
// That one list then reads YAML (cfg::Reader: unknown key, wrong type -> ConfigError naming
// the dotted key and what is allowed) and writes the resolved YAML with each field's help as
// a comment (cfg::Writer, for --dump-config, run directories and checkpoints).
//
// Field types: int64_t, double, bool, std::string, std::vector<T>, std::optional<T> (null or
// absent = unset) and nested config structs. Semantic checks (h_k > 0, ...) are not here:
// each module validates its own struct after reading.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"

namespace thx::cfg {

inline std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

// How a node looks in a message: its scalar text, or its kind.
std::string show(const YAML::Node& node);

void read_value(const YAML::Node& node, const std::string& path, int64_t& out);
void read_value(const YAML::Node& node, const std::string& path, double& out);
void read_value(const YAML::Node& node, const std::string& path, bool& out);
void read_value(const YAML::Node& node, const std::string& path, std::string& out);
template <class T>
void read_value(const YAML::Node& node, const std::string& path, std::optional<T>& out);
template <class T>
void read_value(const YAML::Node& node, const std::string& path, std::vector<T>& out);
template <class T>  // a nested config struct
void read_value(const YAML::Node& node, const std::string& path, T& out);

class Reader {
 public:
  Reader(const YAML::Node& node, std::string path) : node_(node), path_(std::move(path)) {
    if (node_.IsDefined() && !node_.IsNull() && !node_.IsMap())
      throw ConfigError(path_.empty() ? "(top level)" : path_,
                        fmt::format("expected a mapping of keys, got {}", show(node_)));
  }

  template <class T>
  void operator()(const char* key, T& value, const char* /*help*/ = "") {
    allowed_.push_back(key);
    if (!node_.IsDefined() || !node_.IsMap()) return;
    const YAML::Node child = node_[key];
    if (!child.IsDefined()) return;
    read_value(child, join(path_, key), value);
  }

  // Every key present must have been asked for.
  void finish() const {
    if (!node_.IsDefined() || !node_.IsMap()) return;
    for (const auto& kv : node_) {
      const std::string key = kv.first.as<std::string>();
      bool known = false;
      for (const auto& a : allowed_) known = known || a == key;
      if (!known) {
        std::string list;
        for (const auto& a : allowed_) list += (list.empty() ? "" : ", ") + a;
        throw ConfigError(join(path_, key),
                          fmt::format("unknown key; allowed {}: {}",
                                      path_.empty() ? "top-level keys" : "keys under " + path_,
                                      list));
      }
    }
  }

 private:
  const YAML::Node node_;
  std::string path_;
  std::vector<std::string> allowed_;
};

template <class T>
void read_value(const YAML::Node& node, const std::string& path, std::optional<T>& out) {
  if (node.IsNull()) {
    out.reset();
    return;
  }
  T v{};
  read_value(node, path, v);
  out = v;
}

template <class T>
void read_value(const YAML::Node& node, const std::string& path, std::vector<T>& out) {
  out.clear();
  if (node.IsNull()) return;
  if (!node.IsSequence())
    throw ConfigError(path, fmt::format("expected a list such as [a, b], got {}", show(node)));
  for (size_t i = 0; i < node.size(); ++i) {
    T v{};
    read_value(node[i], fmt::format("{}[{}]", path, i), v);
    out.push_back(v);
  }
}

// A nested config struct.
template <class T>
void read_value(const YAML::Node& node, const std::string& path, T& out) {
  Reader r(node, path);
  visit(r, out);
  r.finish();
}

// Read a whole config struct from the root of a tree.
template <class T>
T read(const YAML::Node& root) {
  T out{};
  read_value(root, "", out);
  return out;
}

// ---- writing ---------------------------------------------------------------------------

class Writer {
 public:
  explicit Writer(YAML::Emitter& out) : out_(out) {}

  template <class T>
  void operator()(const char* key, const T& value, const char* help = "") {
    out_ << YAML::Key << key << YAML::Value;
    emit(value);
    if (help && *help) out_ << YAML::Comment(help);
  }

 private:
  void emit(int64_t v) { out_ << v; }
  void emit(bool v) { out_ << v; }
  void emit(const std::string& v) { out_ << v; }
  void emit(double v) {
    // Shortest text that reads back as the same double.
    std::string s = fmt::format("{}", v);
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    out_ << s;
  }
  template <class T>
  void emit(const std::optional<T>& v) {
    if (v) emit(*v);
    else out_ << YAML::Null;
  }
  template <class T>
  void emit(const std::vector<T>& v) {
    out_ << YAML::Flow << YAML::BeginSeq;
    for (const auto& x : v) emit(x);
    out_ << YAML::EndSeq;
  }
  template <class T>
  void emit(const T& nested) {
    out_ << YAML::BeginMap;
    visit(*this, const_cast<T&>(nested));
    out_ << YAML::EndMap;
  }

  YAML::Emitter& out_;
};

// The resolved YAML of a config struct, with help comments.
template <class T>
std::string to_yaml(const T& config) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  Writer w(out);
  visit(w, const_cast<T&>(config));
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace thx::cfg
