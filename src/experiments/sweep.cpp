#include "experiments/sweep.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "experiments/results_table.h"

namespace thx {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string at(const std::string& file, const YAML::Node& n) {
  return n.Mark().is_null() ? file : fmt::format("{}:{}", file, n.Mark().line + 1);
}

// Part of a run name for one axis value: the value alone for attention variants, else the
// key's last component and the value ("h12", "dynamic=X_l+M_l" -> "dynamicX_l+M_l").
std::string name_part(const std::string& key, const YAML::Node& v) {
  std::string value;
  if (v.IsSequence()) {
    for (const auto& e : v) value += (value.empty() ? "" : "+") + e.as<std::string>();
    if (value.empty()) value = "none";
  } else {
    value = v.as<std::string>();
  }
  const std::string leaf = key.substr(key.rfind('.') + 1);
  std::string s = leaf == "variant" ? value : leaf + value;
  for (char& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '+' || c == '-'))
      c = '_';
  return s;
}

// A mapping of dotted keys to values, in file order.
std::vector<SweepOverride> read_overrides(const YAML::Node& n, const std::string& file,
                                          const std::string& what) {
  if (!n.IsMap())
    throw InputError(fmt::format("{}: {}: expected a mapping of dotted keys to values, e.g. "
                                 "{{attention.h: 24}}", at(file, n), what));
  std::vector<SweepOverride> out;
  for (const auto& kv : n) out.push_back({kv.first.as<std::string>(), kv.second});
  return out;
}

struct Axis {
  std::string key;
  std::vector<YAML::Node> values;
};


struct Variant {
  std::string name;
  std::vector<SweepOverride> overrides;
  std::string where;
};

struct Budget {
  std::string name;
  int64_t steps = 0;
  std::optional<std::vector<int64_t>> seeds;  // replaces the sweep's seeds for this budget
};

// The file as YAML, a mapping of the keys a sweep file may have.
YAML::Node read_root(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw InputError(fmt::format("{}: cannot read sweep file", path));
  } catch (const YAML::ParserException& e) {
    throw InputError(fmt::format("{}:{}:{}: invalid YAML: {}", path, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  if (!root.IsMap()) throw InputError(fmt::format("{}: a sweep file is a mapping of keys", path));
  static const std::vector<std::string> kKeys = {"sweep", "table", "description", "base", "set",
                                                 "variants", "grid", "zip", "budgets", "seeds"};
  for (const auto& kv : root) {
    const std::string k = kv.first.as<std::string>();
    if (std::find(kKeys.begin(), kKeys.end(), k) == kKeys.end())
      throw InputError(fmt::format("{}: unknown key '{}'; allowed: {}", at(path, kv.first), k, fmt::join(kKeys, ", ")));
  }
  return root;
}

// sweep (the name), table (a layout of thx table) and description.
void read_header(const YAML::Node& root, const std::string& path, Sweep& s) {
  try {
    if (!root["sweep"] || !root["sweep"].IsScalar()) throw InputError(fmt::format("{}: 'sweep: NAME' is required", path));
    s.name = root["sweep"].as<std::string>();
    if (s.name.empty() || s.name.find('/') != std::string::npos)
      throw InputError(fmt::format("{}: sweep: '{}' is not a usable name", at(path, root["sweep"]), s.name));
    if (root["table"]) {
      s.table = root["table"].as<std::string>();
      try {
        parse_layout(s.table);
      } catch (const InputError&) {
        throw InputError(fmt::format("{}: table: '{}' is not a layout; allowed: table1 ... table13",
                                     at(path, root["table"]), s.table));
      }
    }
    if (root["description"]) s.description = root["description"].as<std::string>();
  } catch (const YAML::Exception& e) {
    throw InputError(fmt::format("{}:{}: {}", path, e.mark.line + 1, e.msg));
  }
}

// base: one config file or a list, each relative to the sweep file's directory.
std::vector<std::string> read_bases(const YAML::Node& root, const std::string& path) {
  const fs::path dir = fs::path(path).parent_path();
  if (!root["base"]) throw InputError(fmt::format("{}: 'base: CONFIG.yaml' is required", path));
  std::vector<std::string> bases;
  auto add_base = [&](const YAML::Node& b) {
    if (!b.IsScalar()) throw InputError(fmt::format("{}: base: expected a file name", at(path, b)));
    const fs::path p = fs::path(b.as<std::string>()).is_absolute() ? fs::path(b.as<std::string>())
                                                                   : dir / b.as<std::string>();
    std::error_code ec;  // a name past the file system's limits is an error code, not an exception
    if (!fs::is_regular_file(p, ec))
      throw InputError(fmt::format("{}: base: {} {}", at(path, b), p.string(),
                                   ec && ec != std::errc::no_such_file_or_directory ? "cannot be read (" + ec.message() + ")"
                                                                                    : "does not exist"));
    bases.push_back(p.lexically_normal().string());
  };
  if (root["base"].IsSequence())
    for (const auto& b : root["base"]) add_base(b);
  else
    add_base(root["base"]);
  return bases;
}

// variants: a list of {name, set}; none: one unnamed variant.
std::vector<Variant> read_variants(const YAML::Node& root, const std::string& path) {
  if (!root["variants"]) return {{"", {}, path}};
  const YAML::Node v = root["variants"];
  if (!v.IsSequence() || v.size() == 0)
    throw InputError(fmt::format("{}: variants: expected a non-empty list of {{name, set}}", at(path, v)));
  std::vector<Variant> variants;
  for (const auto& e : v) {
    if (!e.IsMap() || !e["name"] || !e["name"].IsScalar())
      throw InputError(fmt::format("{}: variants: each entry needs 'name' (and 'set')", at(path, e)));
    for (const auto& kv : e) {
      const std::string k = kv.first.as<std::string>();
      if (k != "name" && k != "set")
        throw InputError(fmt::format("{}: variants: unknown key '{}'; allowed: name, set", at(path, kv.first), k));
    }
    Variant var{e["name"].as<std::string>(), {}, at(path, e)};
    if (e["set"]) var.overrides = read_overrides(e["set"], path, "variants.set");
    variants.push_back(var);
  }
  return variants;
}

// grid or zip: a mapping of dotted keys to non-empty lists of values, each key once.
std::vector<Axis> read_axes(const YAML::Node& root, const std::string& path, const char* what) {
  std::vector<Axis> axes;
  const YAML::Node g = root[what];
  if (!g) return axes;
  if (!g.IsMap() || g.size() == 0)
    throw InputError(fmt::format("{}: {}: expected a mapping of dotted keys to lists of values", at(path, g), what));
  for (const auto& kv : g) {
    const std::string key = kv.first.as<std::string>();
    if (!kv.second.IsSequence())
      throw InputError(fmt::format("{}: {}.{}: expected a list of values", at(path, kv.second), what, key));
    if (kv.second.size() == 0)
      throw InputError(fmt::format("{}: {}.{}: empty list; an axis needs at least one value",
                                   at(path, kv.second), what, key));
    for (const Axis& seen : axes)  // YAML keeps a repeated key; each would be one more axis
      if (seen.key == key)
        throw InputError(fmt::format("{}: {}.{}: the key appears twice; give each axis once", at(path, kv.first),
                                     what, key));
    Axis a{key, {}};
    for (const auto& v : kv.second) a.values.push_back(v);
    axes.push_back(a);
  }
  return axes;
}

std::vector<int64_t> read_seeds(const YAML::Node& sd, const std::string& path, const std::string& what) {
  if (!sd.IsSequence() || sd.size() == 0)
    throw InputError(fmt::format("{}: {}: expected a non-empty list of integers", at(path, sd), what));
  std::vector<int64_t> out;
  for (const auto& e : sd) {
    try {
      out.push_back(e.as<int64_t>());
    } catch (const YAML::Exception&) {
      throw InputError(fmt::format("{}: {}: '{}' is not an integer", at(path, e), what,
                                   e.IsScalar() ? e.as<std::string>() : "a collection"));
    }
  }
  return out;
}

// budgets: name -> steps, or name -> {steps, seeds}.
std::vector<Budget> read_budgets(const YAML::Node& root, const std::string& path) {
  std::vector<Budget> budgets;
  if (!root["budgets"]) return budgets;
  const YAML::Node b = root["budgets"];
  if (!b.IsMap() || b.size() == 0)
    throw InputError(fmt::format("{}: budgets: expected a mapping of names to step counts, e.g. "
                                 "{{short: 65536, full: 524288}}", at(path, b)));
  for (const auto& kv : b) {
    Budget bu{kv.first.as<std::string>(), 0, std::nullopt};
    YAML::Node steps = kv.second;
    if (kv.second.IsMap()) {  // {steps: N, seeds: [...]}
      for (const auto& e : kv.second) {
        const std::string k = e.first.as<std::string>();
        if (k != "steps" && k != "seeds")
          throw InputError(fmt::format("{}: budgets.{}: unknown key '{}'; allowed: steps, seeds",
                                       at(path, e.first), bu.name, k));
      }
      if (kv.second["seeds"]) bu.seeds = read_seeds(kv.second["seeds"], path, "budgets." + bu.name + ".seeds");
      steps.reset(kv.second["steps"]);  // (assigning would overwrite the node it refers to)
    }
    try {
      if (steps) bu.steps = steps.as<int64_t>();
    } catch (const YAML::Exception&) {
    }
    if (bu.steps < 1)
      throw InputError(fmt::format("{}: budgets.{}: expected a positive number of steps", at(path, kv.second), bu.name));
    budgets.push_back(bu);
  }
  return budgets;
}

// What a sweep file's axes multiply out to: variants x grid x zip x budgets x seeds.
struct Grammar {
  std::vector<SweepOverride> common;  // set:
  std::vector<Variant> variants;
  std::vector<Axis> grid, zip;
  std::vector<Budget> budgets;
  std::vector<int64_t> seeds;

  // At most kMaxRuns (a sweep of more runs than that is a typo, and listing it would take
  // minutes).
  void check_count(const std::string& path) const {
    constexpr uint64_t kMaxRuns = 100000;
    uint64_t n = std::max<uint64_t>(variants.size(), 1) * (zip.empty() ? 1 : zip.front().values.size());
    for (const Axis& a : grid) n = std::min<uint64_t>(n * a.values.size(), kMaxRuns + 1);
    uint64_t per_budget = 0;
    for (const Budget& b : budgets) per_budget += std::max<size_t>((b.seeds ? *b.seeds : seeds).size(), 1);
    if (budgets.empty()) per_budget = std::max<size_t>(seeds.size(), 1);
    n = std::min<uint64_t>(n * per_budget, kMaxRuns + 1);
    if (n > kMaxRuns)
      throw InputError(fmt::format("{}: expands to more than {} runs (variants x grid x zip x budgets x seeds)", path,
                                   kMaxRuns));
  }

  // The runs of one variant at one grid point and zip index: every budget and seed.
  void add_runs(const Variant& var, const std::vector<size_t>& grid_index, size_t z, const std::string& path,
                std::map<std::string, std::string>& named, Sweep& s) const {
    std::vector<SweepOverride> ov = common;
    ov.insert(ov.end(), var.overrides.begin(), var.overrides.end());
    std::vector<std::string> parts;
    if (!var.name.empty()) parts.push_back(var.name);
    for (size_t g = 0; g < grid.size(); ++g) {
      ov.push_back({grid[g].key, grid[g].values[grid_index[g]]});
      parts.push_back(name_part(grid[g].key, grid[g].values[grid_index[g]]));
    }
    for (const auto& a : zip) {
      ov.push_back({a.key, a.values[z]});
      parts.push_back(name_part(a.key, a.values[z]));
    }
    for (size_t b = 0; b < std::max<size_t>(budgets.size(), 1); ++b) {
      const std::vector<int64_t>& sd = !budgets.empty() && budgets[b].seeds ? *budgets[b].seeds : seeds;
      for (size_t k = 0; k < std::max<size_t>(sd.size(), 1); ++k) {
        SweepRun r;
        r.variant = var.name;
        r.overrides = ov;
        std::vector<std::string> p = parts;
        if (!budgets.empty()) r.budget = budgets[b].name, r.steps = budgets[b].steps, p.push_back(r.budget);
        if (!sd.empty()) r.seed = sd[k], p.push_back(fmt::format("s{}", sd[k]));
        r.name = p.empty() ? "run" : fmt::format("{}", fmt::join(p, "-"));
        auto [it, fresh] = named.emplace(r.name, var.where);
        if (!fresh)
          throw InputError(fmt::format("{}: two runs are both named '{}' ({} and {}); give the "
                                       "variants distinct names or vary distinct values",
                                       path, r.name, it->second, var.where));
        s.runs.push_back(std::move(r));
      }
    }
  }

  // Every run: per variant, the grid points in order (last axis fastest), each with every zip index.
  void expand(const std::string& path, Sweep& s) const {
    std::vector<size_t> grid_index(grid.size(), 0);
    const size_t zip_n = zip.empty() ? 1 : zip.front().values.size();
    std::map<std::string, std::string> named;  // run name -> where it came from
    for (const auto& var : variants) {
      std::fill(grid_index.begin(), grid_index.end(), 0);
      while (true) {
        for (size_t z = 0; z < zip_n; ++z) add_runs(var, grid_index, z, path, named, s);
        size_t g = grid.size();
        while (g > 0 && ++grid_index[g - 1] == grid[g - 1].values.size()) grid_index[--g] = 0;
        if (g == 0) break;
      }
    }
  }
};

Sweep load_sweep_unchecked(const std::string& path) {
  const YAML::Node root = read_root(path);
  Sweep s;
  s.file = path;
  read_header(root, path, s);
  s.bases = read_bases(root, path);
  Grammar g;
  if (root["set"]) g.common = read_overrides(root["set"], path, "set");
  g.variants = read_variants(root, path);
  g.grid = read_axes(root, path, "grid");
  g.zip = read_axes(root, path, "zip");
  for (const auto& a : g.zip)
    if (a.values.size() != g.zip.front().values.size())
      throw InputError(fmt::format("{}: zip: {} has {} values but {} has {}; zipped lists pair up "
                                   "and must be equally long", path, a.key, a.values.size(),
                                   g.zip.front().key, g.zip.front().values.size()));
  g.budgets = read_budgets(root, path);
  if (root["seeds"]) g.seeds = read_seeds(root["seeds"], path, "seeds");
  g.check_count(path);
  g.expand(path, s);
  return s;
}

}  // namespace

Sweep load_sweep(const std::string& path) {
  try {
    return load_sweep_unchecked(path);
  } catch (const YAML::Exception& e) {  // e.g. a mapping where a name or value belongs
    throw InputError(fmt::format("{}:{}: {}", path, e.mark.line + 1, e.msg));
  }
}

ConfigTree sweep_run_tree(const Sweep& sweep, const SweepRun& run) {
  ConfigTree t;
  for (const auto& b : sweep.bases) t.merge_file(b);
  t.note_file(sweep.file);  // a path the sweep sets is relative to the sweep file
  for (const auto& o : run.overrides) t.set(o.key, o.value, sweep.file);
  if (run.steps) t.set("train.steps", YAML::Node(*run.steps), fmt::format("{}: budgets.{}", sweep.file, run.budget));
  if (run.seed) t.set("train.seed", YAML::Node(*run.seed), fmt::format("{}: seeds", sweep.file));
  return t;
}

}  // namespace thx
