#include "common/config_tree.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

namespace thx {
namespace {

std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string where(const std::string& file, const YAML::Node& node) {
  if (file.rfind("--set", 0) == 0 || node.Mark().is_null()) return file;
  return fmt::format("{}:{}", file, node.Mark().line + 1);
}

}  // namespace

void check_plain_keys(const YAML::Node& node, const std::string& origin) {
  if (node.IsMap()) {
    for (const auto& kv : node) {
      if (!kv.first.IsScalar())
        throw InputError(fmt::format("{}: keys are plain names, not lists or mappings", where(origin, kv.first)));
      check_plain_keys(kv.second, origin);
    }
  } else if (node.IsSequence()) {
    for (const auto& v : node) check_plain_keys(v, origin);
  }
}

ConfigTree::ConfigTree() : root_(YAML::NodeType::Map) {}

void ConfigTree::merge_file(const std::string& path) {
  // A directory opens as an empty stream on Linux: it would read as an empty config.
  std::error_code ec;  // a name too long for the file system: the stream below fails, one line
  if (std::filesystem::is_directory(path, ec))
    throw InputError(fmt::format("{}: is a directory, not a config file (--config takes a YAML file)", path));
  std::ifstream in(path);
  if (!in) {  // errno of the failed open: "No such file or directory", "Permission denied"
    const int why = errno;
    throw InputError(fmt::format("{}: cannot read config file: {}", path, std::strerror(why)));
  }
  std::stringstream text;
  text << in.rdbuf();
  files_.insert(path);
  merge_text(text.str(), path);
}

void ConfigTree::note_file(const std::string& file) { files_.insert(file); }

void ConfigTree::resolve_paths(const std::vector<std::string>& keys) {
  for (const auto& key : keys) {
    std::vector<std::string> parts;
    std::stringstream ss(key);
    for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
    // yaml-cpp nodes are references: walk with fresh nodes (an assignment would overwrite).
    std::function<YAML::Node(const YAML::Node&, size_t)> parent_of = [&](const YAML::Node& cur, size_t i) {
      if (i + 1 == parts.size()) return cur;
      const YAML::Node next = cur[parts[i]];
      return next.IsDefined() && next.IsMap() ? parent_of(next, i + 1) : YAML::Node();
    };
    YAML::Node parent = parent_of(root_, 0);
    if (!parent.IsDefined() || !parent.IsMap() || !parent[parts.back()].IsDefined() ||
        !parent[parts.back()].IsScalar())
      continue;
    const std::string value = parent[parts.back()].as<std::string>();
    if (value.empty() || std::filesystem::path(value).is_absolute()) continue;
    std::error_code ec;
    std::filesystem::path base = std::filesystem::current_path(ec);
    for (std::string k = key;; k = k.substr(0, k.rfind('.'))) {  // the key, or its nearest parent
      if (auto it = bases_.find(k); it != bases_.end()) {
        if (!it->second.empty()) base = it->second;
        break;
      }
      if (k.find('.') == std::string::npos) break;
    }
    parent[parts.back()] = (base / value).lexically_normal().string();
  }
}

void ConfigTree::merge_text(const std::string& yaml, const std::string& origin) {
  YAML::Node doc;
  try {
    doc = YAML::Load(yaml);
  } catch (const YAML::ParserException& e) {
    throw InputError(fmt::format("{}:{}:{}: invalid YAML: {}", origin, e.mark.line + 1,
                                 e.mark.column + 1, e.msg));
  }
  if (!doc || doc.IsNull()) return;  // an empty file configures nothing
  if (!doc.IsMap())
    throw InputError(fmt::format("{}: the top level must be a mapping of keys (e.g. 'attention:')",
                                 origin));
  check_plain_keys(doc, origin);
  for (const auto& kv : doc) {
    const std::string key = kv.first.as<std::string>();
    merge_into(root_, key, kv.second, key, origin);
  }
}

void ConfigTree::merge_into(YAML::Node& parent, const std::string& key, const YAML::Node& src,
                            const std::string& path, const std::string& file) {
  YAML::Node dst = parent[key];
  if (src.IsMap() && dst.IsDefined() && dst.IsMap()) {
    for (const auto& kv : src) {
      const std::string sub = kv.first.as<std::string>();
      merge_into(dst, sub, kv.second, join(path, sub), file);
    }
    return;
  }
  parent[key] = YAML::Clone(src);
  // A replaced subtree forgets the origins of what it replaced.
  for (auto* m : {&origins_, &bases_})
    for (auto it = m->lower_bound(path + "."); it != m->end() && it->first.rfind(path + ".", 0) == 0;)
      it = m->erase(it);
  record(src, path, file);
}

void ConfigTree::record(const YAML::Node& src, const std::string& path, const std::string& file) {
  origins_[path] = where(file, src);
  std::error_code ec;  // "" for the working directory: a --set, or text that is no file
  bases_[path] = files_.count(file) ? std::filesystem::absolute(file, ec).parent_path().lexically_normal().string() : "";
  if (src.IsMap())
    for (const auto& kv : src) record(kv.second, join(path, kv.first.as<std::string>()), file);
}

void ConfigTree::set(const std::string& assignment) {
  const std::string origin = "--set " + assignment;
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw InputError(fmt::format("{}: expected KEY=VALUE, e.g. --set attention.h=24", origin));
  const std::string key = assignment.substr(0, eq);
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::ParserException& e) {
    throw InputError(fmt::format("{}: value is not valid YAML: {}", origin, e.msg));
  }
  check_plain_keys(value, origin);
  set(key, value, origin);
}

void ConfigTree::set(const std::string& key, const YAML::Node& value, const std::string& origin) {
  std::vector<std::string> parts;
  std::stringstream ss(key);
  for (std::string p; std::getline(ss, p, '.');) {
    if (p.empty()) throw InputError(fmt::format("{}: empty component in key '{}'", origin, key));
    parts.push_back(p);
  }
  if (parts.empty() || key.back() == '.')
    throw InputError(fmt::format("{}: empty component in key '{}'", origin, key));
  // An intermediate key that holds a scalar cannot take a subkey: say so instead of replacing
  // it. (yaml-cpp nodes are references: walk with fresh nodes, never by assigning to one.)
  std::function<void(const YAML::Node&, size_t, const std::string&)> check =
      [&](const YAML::Node& cur, size_t i, const std::string& path) {
        if (i + 1 >= parts.size()) return;
        const YAML::Node next = cur[parts[i]];
        const std::string sub = join(path, parts[i]);
        if (!next.IsDefined() || next.IsNull()) return;
        if (!next.IsMap())
          throw InputError(fmt::format("{}: '{}' holds a value, not a mapping of keys", origin, sub));
        check(next, i + 1, sub);
      };
  check(root_, 0, "");
  // Wrap the value in mappings along the dotted key and merge it like a file.
  std::function<YAML::Node(size_t)> wrap = [&](size_t i) -> YAML::Node {
    if (i + 1 == parts.size()) return value;
    YAML::Node m(YAML::NodeType::Map);
    m[parts[i + 1]] = wrap(i + 1);
    return m;
  };
  merge_into(root_, parts[0], wrap(0), parts[0], origin);
}

void ConfigTree::inherit(const std::string& child, const std::string& parent) {
  YAML::Node c = root_[child];
  const YAML::Node p = static_cast<const YAML::Node&>(root_)[parent];
  if (!c.IsDefined() || !c.IsMap() || !p.IsDefined() || !p.IsMap()) return;
  std::function<void(YAML::Node, const YAML::Node&, const std::string&, const std::string&)> fill =
      [&](YAML::Node dst, const YAML::Node& src, const std::string& dpath, const std::string& spath) {
        for (const auto& kv : src) {
          const std::string key = kv.first.as<std::string>();
          YAML::Node existing = dst[key];
          if (!existing.IsDefined()) {
            dst[key] = YAML::Clone(kv.second);
            for (auto* m : {&origins_, &bases_}) {
              auto it = m->find(join(spath, key));
              if (it != m->end()) (*m)[join(dpath, key)] = it->second;
            }
          } else if (existing.IsMap() && kv.second.IsMap()) {
            fill(existing, kv.second, join(dpath, key), join(spath, key));
          }
        }
      };
  fill(c, p, child, parent);
}

ConfigTree ConfigTree::take(const std::string& key) {
  ConfigTree out;
  const YAML::Node block = static_cast<const YAML::Node&>(root_)[key];
  if (!block.IsDefined()) return out;
  out.root_[key] = YAML::Clone(block);
  for (auto [from, to] : {std::pair{&origins_, &out.origins_}, std::pair{&bases_, &out.bases_}})
    for (auto it = from->lower_bound(key); it != from->end() && it->first.compare(0, key.size(), key) == 0;) {
      if (it->first.size() == key.size() || it->first[key.size()] == '.') {
        (*to)[it->first] = it->second;
        it = from->erase(it);
      } else {
        ++it;
      }
    }
  out.files_ = files_;
  root_.remove(key);
  return out;
}

std::string ConfigTree::origin(const std::string& key) const {
  // A list element ("a.b[2]") was written where its list was. A key never written is a
  // default, whoever wrote its parent.
  const std::string k = key.substr(0, key.find('['));
  auto it = origins_.find(k);
  return it != origins_.end() ? it->second : "defaults";
}

std::string ConfigTree::describe(const ConfigError& e) const {
  // A key that no file or --set wrote has no place to name ("defaults: data.prepared: is
  // required" read as if thx's defaults were at fault); say instead that nothing gave it.
  const std::string where = origin(e.key);
  if (where == "defaults")
    return e.key_leads ? fmt::format("{} ({}: not set by any --config or --set)", e.what(), e.key)
                       : fmt::format("{}: {} (not set by any --config or --set)", e.key, e.what());
  return fmt::format("{}: {}", where, e.line());
}

}  // namespace thx
