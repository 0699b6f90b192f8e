#include "experiments/sweep.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "experiments/bench_attention.h"
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

}  // namespace

namespace {
Sweep load_sweep_unchecked(const std::string& path);
}  // namespace

Sweep load_sweep(const std::string& path) {
  try {
    return load_sweep_unchecked(path);
  } catch (const YAML::Exception& e) {  // e.g. a mapping where a name or value belongs
    throw InputError(fmt::format("{}:{}: {}", path, e.mark.line + 1, e.msg));
  }
}

namespace {
Sweep load_sweep_unchecked(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw InputError(fmt::format("{}: cannot read sweep file", path));
  } catch (const YAML::ParserException& e) {
    throw InputError(fmt::format("{}:{}:{}: invalid YAML: {}", path, e.mark.line + 1,
                                 e.mark.column + 1, e.msg));
  }
  if (!root.IsMap()) throw InputError(fmt::format("{}: a sweep file is a mapping of keys", path));
  static const std::vector<std::string> kKeys = {"sweep", "table", "description", "base", "set",
                                                 "variants", "grid", "zip", "budgets", "seeds"};
  for (const auto& kv : root) {
    const std::string k = kv.first.as<std::string>();
    if (std::find(kKeys.begin(), kKeys.end(), k) == kKeys.end())
      throw InputError(fmt::format("{}: unknown key '{}'; allowed: {}", at(path, kv.first), k,
                                   fmt::join(kKeys, ", ")));
  }
  Sweep s;
  s.file = path;
  try {
    if (!root["sweep"] || !root["sweep"].IsScalar())
      throw InputError(fmt::format("{}: 'sweep: NAME' is required", path));
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
  const fs::path dir = fs::path(path).parent_path();
  if (!root["base"]) throw InputError(fmt::format("{}: 'base: CONFIG.yaml' is required", path));
  auto add_base = [&](const YAML::Node& b) {
    if (!b.IsScalar()) throw InputError(fmt::format("{}: base: expected a file name", at(path, b)));
    const fs::path p = fs::path(b.as<std::string>()).is_absolute() ? fs::path(b.as<std::string>())
                                                                   : dir / b.as<std::string>();
    if (!fs::is_regular_file(p))
      throw InputError(fmt::format("{}: base: {} does not exist", at(path, b), p.string()));
    s.bases.push_back(p.lexically_normal().string());
  };
  if (root["base"].IsSequence())
    for (const auto& b : root["base"]) add_base(b);
  else
    add_base(root["base"]);

  std::vector<SweepOverride> common;
  if (root["set"]) common = read_overrides(root["set"], path, "set");

  struct Variant {
    std::string name;
    std::vector<SweepOverride> overrides;
    std::string where;
  };
  std::vector<Variant> variants;
  if (root["variants"]) {
    const YAML::Node v = root["variants"];
    if (!v.IsSequence() || v.size() == 0)
      throw InputError(fmt::format("{}: variants: expected a non-empty list of {{name, set}}", at(path, v)));
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
  } else {
    variants.push_back({"", {}, path});
  }

  auto read_axes = [&](const char* what) {
    std::vector<Axis> axes;
    const YAML::Node g = root[what];
    if (!g) return axes;
    if (!g.IsMap() || g.size() == 0)
      throw InputError(fmt::format("{}: {}: expected a mapping of dotted keys to lists of values",
                                   at(path, g), what));
    for (const auto& kv : g) {
      const std::string key = kv.first.as<std::string>();
      if (!kv.second.IsSequence())
        throw InputError(fmt::format("{}: {}.{}: expected a list of values", at(path, kv.second), what, key));
      if (kv.second.size() == 0)
        throw InputError(fmt::format("{}: {}.{}: empty list; an axis needs at least one value",
                                     at(path, kv.second), what, key));
      Axis a{key, {}};
      for (const auto& v : kv.second) a.values.push_back(v);
      axes.push_back(a);
    }
    return axes;
  };
  const std::vector<Axis> grid = read_axes("grid");
  const std::vector<Axis> zip = read_axes("zip");
  for (const auto& a : zip)
    if (a.values.size() != zip.front().values.size())
      throw InputError(fmt::format("{}: zip: {} has {} values but {} has {}; zipped lists pair up "
                                   "and must be equally long", path, a.key, a.values.size(),
                                   zip.front().key, zip.front().values.size()));

  struct Budget {
    std::string name;
    int64_t steps = 0;
    std::optional<std::vector<int64_t>> seeds;  // replaces the sweep's seeds for this budget
  };
  auto read_seeds = [&](const YAML::Node& sd, const std::string& what) {
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
  };
  std::vector<Budget> budgets;
  if (root["budgets"]) {
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
        if (kv.second["seeds"]) bu.seeds = read_seeds(kv.second["seeds"], "budgets." + bu.name + ".seeds");
        steps.reset(kv.second["steps"]);  // (assigning would overwrite the node it refers to)
      }
      try {
        if (steps) bu.steps = steps.as<int64_t>();
      } catch (const YAML::Exception&) {
      }
      if (bu.steps < 1)
        throw InputError(fmt::format("{}: budgets.{}: expected a positive number of steps",
                                     at(path, kv.second), bu.name));
      budgets.push_back(bu);
    }
  }
  std::vector<int64_t> seeds;
  if (root["seeds"]) seeds = read_seeds(root["seeds"], "seeds");

  // Expand: variants x grid x zip x budgets x seeds.
  std::vector<size_t> grid_index(grid.size(), 0);
  const size_t zip_n = zip.empty() ? 1 : zip.front().values.size();
  std::map<std::string, std::string> named;  // run name -> where it came from
  for (const auto& var : variants) {
    std::fill(grid_index.begin(), grid_index.end(), 0);
    while (true) {
      for (size_t z = 0; z < zip_n; ++z) {
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
        const size_t nb = std::max<size_t>(budgets.size(), 1);
        for (size_t b = 0; b < nb; ++b) {
          const std::vector<int64_t>& sd =
              !budgets.empty() && budgets[b].seeds ? *budgets[b].seeds : seeds;
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
      // Next grid point (last axis fastest).
      size_t g = grid.size();
      while (g > 0 && ++grid_index[g - 1] == grid[g - 1].values.size()) grid_index[--g] = 0;
      if (g == 0) break;
    }
  }
  return s;
}

}  // namespace

ConfigTree sweep_run_tree(const Sweep& sweep, const SweepRun& run) {
  ConfigTree t;
  for (const auto& b : sweep.bases) t.merge_file(b);
  for (const auto& o : run.overrides) t.set(o.key, o.value, sweep.file);
  if (run.steps) t.set("train.steps", YAML::Node(*run.steps), fmt::format("{}: budgets.{}", sweep.file, run.budget));
  if (run.seed) t.set("train.seed", YAML::Node(*run.seed), fmt::format("{}: seeds", sweep.file));
  return t;
}

// Fine-tuning results under <run>/finetune/ (any depth): each <task>.json that `thx finetune`
// wrote, as {task: metrics}. Read whenever results.jsonl is written, so that fine-tuning done
// after a run finished reaches the tables (read_results merges it too).
json read_downstream(const std::string& run_dir) {
  json downstream = json::object();
  const fs::path ft = fs::path(run_dir) / "finetune";
  if (!fs::is_directory(ft)) return downstream;
  for (const auto& f : fs::recursive_directory_iterator(ft)) {
    if (!f.is_regular_file() || f.path().extension() != ".json") continue;
    try {
      const json j = json::parse(read_file(f.path().string()));
      if (j.is_object() && j.contains("task") && j["task"].is_string() && j.contains("metrics") &&
          j["metrics"].is_object() && j.contains("history"))
        downstream[j["task"].get<std::string>()] = j["metrics"];
    } catch (const std::exception&) {
      // predictions files and other JSON beside the results
    }
  }
  return downstream;
}

std::vector<json> read_results(const std::string& dir) {
  const std::string path = (fs::path(dir) / "results.jsonl").string();
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}: no results file; run `thx sweep` first", path));
  std::vector<json> out;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty()) continue;
    try {
      out.push_back(json::parse(line));
    } catch (const json::exception& e) {
      throw InputError(fmt::format("{}:{}: not a JSON object ({})", path, line_no, e.what()));
    }
    json& r = out.back();
    if (!r.is_object() || !r.contains("name") || !r["name"].is_string())
      throw InputError(fmt::format("{}:{}: expected a JSON object with a 'name'", path, line_no));
    // Fine-tuning done since the sweep wrote this line.
    const json d = read_downstream((fs::path(dir) / r["name"].get<std::string>()).string());
    if (!d.empty()) r["downstream"] = d;
    for (const char* k : {"ln_ppl", "best_ln_ppl", "step_time_s", "tokens_per_s", "d_model", "seed", "steps",
                          "mlm", "sop", "nsp"})
      if (r.contains(k) && !r[k].is_number())
        throw InputError(fmt::format("{}:{}: '{}' must be a number", path, line_no, k));
    for (const char* k : {"budget", "variant", "model"})
      if (r.contains(k) && !r[k].is_string())
        throw InputError(fmt::format("{}:{}: '{}' must be a string", path, line_no, k));
    if (r.contains("downstream")) {
      bool ok = r["downstream"].is_object();
      if (ok)
        for (const auto& [task, m] : r["downstream"].items()) {
          ok = ok && m.is_object();
          if (ok)
            for (const auto& [k, v] : m.items()) ok = ok && v.is_number();
        }
      if (!ok)
        throw InputError(fmt::format("{}:{}: 'downstream' must map each task to {{metric: number}}", path, line_no));
    }
    if (r.contains("attention")) {
      bool ok = r["attention"].is_object();
      if (ok)
        for (const auto& [layer, a] : r["attention"].items()) {
          ok = ok && a.is_object() && a.contains("variant") && a["variant"].is_string();
          for (const char* k : {"h_k", "h", "h_v", "d_k", "d_v"})
            ok = ok && a.contains(k) && a[k].is_number_integer();
        }
      if (!ok)
        throw InputError(fmt::format("{}:{}: 'attention' must map each layer type to "
                                     "{{variant, h_k, h, h_v, d_k, d_v, dynamic}}", path, line_no));
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The runner.

namespace {

volatile std::sig_atomic_t g_sweep_stop = 0;
void on_sweep_signal(int) { g_sweep_stop = 1; }

// What a run's metrics.jsonl says: finished when an evaluation at the last step is there.
json summarize_metrics(const std::string& run_dir, int64_t steps, bool* finished) {
  std::ifstream in((fs::path(run_dir) / "metrics.jsonl").string());
  std::vector<double> step_times, tokens_per_s;
  std::optional<double> final_ppl, best_ppl;
  std::map<std::string, double> accuracies;  // BERT/ALBERT: at the last evaluation
  int64_t last_eval = -1;
  json curve = json::array();
  for (std::string line; std::getline(in, line);) {
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception&) {
      continue;  // a line cut by a kill
    }
    if (j.contains("ln_ppl")) {
      const double v = j["ln_ppl"];
      final_ppl = v, last_eval = j.value("step", int64_t(-1));
      best_ppl = best_ppl ? std::min(*best_ppl, v) : v;
      accuracies.clear();
      for (const char* k : {"mlm", "sop", "nsp"})
        if (j.contains(std::string(k) + "_accuracy")) accuracies[k] = 100.0 * j[std::string(k) + "_accuracy"].get<double>();
    }
    if (j.contains("step_time_s")) step_times.push_back(j["step_time_s"]);
    if (j.contains("tokens_per_s")) tokens_per_s.push_back(j["tokens_per_s"]);
  }
  *finished = final_ppl && last_eval == steps;
  json r;
  if (final_ppl) r["ln_ppl"] = *final_ppl, r["best_ln_ppl"] = *best_ppl;
  for (const auto& [k, v] : accuracies) r[k] = v;  // percent, as Tables 5 and 6 print them
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  if (!step_times.empty()) r["step_time_s"] = median(step_times), r["tokens_per_s"] = median(tokens_per_s);
  return r;
}

std::string last_line(const std::string& path) {
  std::ifstream in(path);
  std::string last;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) last = line;
  return last;
}

}  // namespace

int run_sweep(const Sweep& sweep, const SweepOptions& o,
              const std::function<ResolvedRun(ConfigTree&)>& resolve) {
  auto log = thx::log("sweep");
  const std::string out = o.out_dir.empty() ? (fs::path("runs") / sweep.name).string() : o.out_dir;
  if (o.jobs < 1) throw InputError(fmt::format("--jobs {}: must be at least 1", o.jobs));

  // Resolve every run first: a bad key in any of them stops the sweep before anything runs.
  struct Planned {
    const SweepRun* run;
    ResolvedRun resolved;
    std::string dir, hash;
    bool finished = false;
  };
  std::vector<Planned> plan;
  for (const auto& r : sweep.runs) {
    ConfigTree t = sweep_run_tree(sweep, r);
    ResolvedRun resolved;
    try {
      resolved = resolve(t);
    } catch (const InputError& e) {
      // The message names the key and where its value came from; say which run, too.
      const std::string what = e.what();
      throw InputError(what.rfind(sweep.file, 0) == 0
                           ? fmt::format("run '{}': {}", r.name, what)
                           : fmt::format("{}: run '{}': {}", sweep.file, r.name, what));
    }
    Planned p{&r, std::move(resolved), (fs::path(out) / r.name).string(), ""};
    p.hash = fmt::format("{:016x}", fnv1a(p.resolved.yaml));
    plan.push_back(std::move(p));
  }
  // A run directory that holds another config is never reused.
  for (auto& p : plan) {
    const std::string cfg = (fs::path(p.dir) / "run.yaml").string();
    if (fs::exists(cfg) && read_file(cfg) != p.resolved.yaml)
      throw InputError(fmt::format("{}: run '{}' was started with another config ({}); the sweep "
                                   "file changed since. Restore it, or use another --out", sweep.file,
                                   p.run->name, cfg));
    p.finished = fs::exists(fs::path(p.dir) / "result.json");
  }
  const int64_t cores = o.threads > 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  const int64_t jobs = std::min<int64_t>(o.jobs, std::max<int64_t>(1, int64_t(plan.size())));
  const int64_t threads = std::max<int64_t>(1, cores / jobs);

  double flops_left = 0, flops_all = 0;
  for (const auto& p : plan) {
    flops_all += p.resolved.flops;
    if (!p.finished) flops_left += p.resolved.flops;
  }
  if (o.dry_run) {
    std::printf("sweep %s (%s): %zu runs into %s\n", sweep.name.c_str(), sweep.file.c_str(),
                plan.size(), out.c_str());
    // Which printed rows of the sweep's table each run fills (thx table's matching rule).
    std::vector<PaperRow> paper;
    if (!sweep.table.empty()) paper = load_paper_rows(default_tables_csv());
    auto fills = [&](const Planned& p) {
      if (sweep.table.empty()) return std::string("-");
      json r = {{"name", p.run->name}};
      for (const auto& [k, v] : p.resolved.info) r[k] = json::parse(v);
      std::vector<std::string> rows;
      for (const auto& m : match_rows(parse_layout(sweep.table), paper, {r}))
        if (!m.runs.empty()) rows.push_back(fmt::format("{}", m.paper.row));
      return rows.empty() ? std::string("none") : fmt::format("{}", fmt::join(rows, ", "));
    };
    std::printf("| run | steps | attention | fills %s row | model PFLOP | state |\n"
                "|---|---:|---|---|---:|---|\n", sweep.table.empty() ? "-" : sweep.table.c_str());
    for (const auto& p : plan) {
      const bool started = fs::exists(fs::path(p.dir) / "checkpoints");
      std::printf("| %s | %lld | %s | %s | %.3f | %s |\n", p.run->name.c_str(),
                  (long long)p.resolved.steps, p.resolved.attention.c_str(), fills(p).c_str(),
                  p.resolved.flops / 1e15,
                  p.finished ? "finished" : started ? "started (resumes)" : "to run");
    }
    const double peak = matmul_peak_gflops(1024, 3) * 1e9;
    std::printf("\nTo run: %.3f of %.3f PFLOP of model FLOPs, about %s on %lld threads at 50%% "
                "of this machine's fp32 matmul peak (%.0f GFLOP/s, measured now; mini T5 steps "
                "reach 45-65%% at one thread per job, docs/benchmarks.md).\n",
                flops_left / 1e15, flops_all / 1e15, format_duration(flops_left / (0.5 * peak)).c_str(),
                (long long)torch::get_num_threads(), peak / 1e9);
    return 0;
  }

  fs::create_directories(out);
  // One sweep process per directory.
  const std::string lock_path = (fs::path(out) / ".lock").string();
  const int lock_fd = ::open(lock_path.c_str(), O_CREAT | O_RDWR, 0644);
  if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0)
    throw InputError(fmt::format("{}: another thx sweep is running on this directory", out));
  write_file_atomic((fs::path(out) / "sweep.yaml").string(), read_file(sweep.file));

  auto write_results = [&] {
    std::string text;
    for (const auto& p : plan) {
      const fs::path rj = fs::path(p.dir) / "result.json";
      if (!fs::exists(rj)) continue;
      json r = json::parse(read_file(rj.string()));
      const json d = read_downstream(p.dir);
      if (!d.empty()) r["downstream"] = d;
      text += r.dump() + "\n";
    }
    write_file_atomic((fs::path(out) / "results.jsonl").string(), text);
  };

  struct Child {
    size_t index;
    pid_t pid;
    std::chrono::steady_clock::time_point start;
  };
  std::vector<Child> running;
  std::vector<std::string> failures;
  size_t next = 0, done = 0, todo = 0;
  for (const auto& p : plan) todo += !p.finished;
  log->info("{}: {} runs, {} finished, {} to run; {} at a time, {} threads each; into {}",
            sweep.name, plan.size(), plan.size() - todo, todo, jobs, threads, out);

  g_sweep_stop = 0;
  // Without SA_RESTART, so that a signal interrupts waitpid() and the runs hear of it at once.
  struct sigaction sa {}, old_int {}, old_term {};
  sa.sa_handler = on_sweep_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  const auto t0 = std::chrono::steady_clock::now();
  double flops_done = 0;
  bool forwarded = false;

  auto launch = [&](size_t i) {
    Planned& p = plan[i];
    fs::create_directories(p.dir);
    const std::string cfg = (fs::path(p.dir) / "run.yaml").string();
    if (!fs::exists(cfg)) write_file_atomic(cfg, p.resolved.yaml);
    const std::string log_path = (fs::path(p.dir) / "stdout.log").string();
    const std::vector<std::string> args = {o.thx_binary, "--threads", std::to_string(threads),
                                           "pretrain", "--config", cfg, "--run-dir", p.dir, "--resume"};
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) throw RunError(fmt::format("sweep: cannot start a process: {}", std::strerror(errno)));
    if (pid == 0) {
      // If the sweep dies (even by SIGKILL), its runs get SIGTERM: they checkpoint and stop,
      // so a restarted sweep never finds two processes in one run directory.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(1);
      std::signal(SIGINT, SIG_DFL), std::signal(SIGTERM, SIG_DFL);
      const int fd = ::open(log_path.c_str(), O_CREAT | O_WRONLY | O_APPEND, 0644);
      if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
      std::vector<char*> argv;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    running.push_back({i, pid, std::chrono::steady_clock::now()});
    log->info("[{}/{}] started {} ({})", done + running.size(), todo, p.run->name, p.resolved.attention);
  };

  while (true) {
    if (g_sweep_stop && !forwarded) {
      log->warn("stopping: the runs save a checkpoint and exit; run the same command to resume");
      for (const auto& c : running) kill(c.pid, SIGTERM);
      forwarded = true;
    }
    while (!g_sweep_stop && int64_t(running.size()) < jobs && next < plan.size()) {
      if (!plan[next].finished) launch(next);
      ++next;
    }
    if (running.empty()) break;
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    auto it = std::find_if(running.begin(), running.end(), [&](const Child& c) { return c.pid == pid; });
    if (it == running.end()) continue;
    Planned& p = plan[it->index];
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - it->start).count();
    running.erase(it);
    // Wall time accumulates over the sessions a run took.
    const std::string wall_path = (fs::path(p.dir) / "wall_s.txt").string();
    double wall_total = wall;
    if (fs::exists(wall_path)) wall_total += std::atof(read_file(wall_path).c_str());
    write_file_atomic(wall_path, fmt::format("{:.1f}\n", wall_total));
    bool finished = false;
    json r = summarize_metrics(p.dir, p.resolved.steps, &finished);
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (ok && finished) {
      r["name"] = p.run->name;
      r["sweep"] = sweep.name;
      if (!p.run->variant.empty()) r["variant"] = p.run->variant;
      if (!p.run->budget.empty()) r["budget"] = p.run->budget;
      if (p.run->seed) r["seed"] = *p.run->seed;
      r["steps"] = p.resolved.steps;
      r["wall_s"] = std::round(wall_total * 10) / 10;
      r["config_hash"] = p.hash;
      for (const auto& [k, v] : p.resolved.info) r[k] = json::parse(v);
      write_file_atomic((fs::path(p.dir) / "result.json").string(), r.dump() + "\n");
      p.finished = true;
      ++done;
      flops_done += p.resolved.flops;
      write_results();
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double eta = flops_done > 0 ? elapsed / flops_done * (flops_left - flops_done) : 0;
      log->info("[{}/{}] finished {}: ln(PPL) {:.4f}, {} | ETA {}", done, todo, p.run->name,
                r.value("ln_ppl", 0.0), format_duration(wall), format_duration(eta));
    } else if (ok || g_sweep_stop) {
      log->warn("{}: stopped at a checkpoint; the next `thx sweep` resumes it", p.run->name);
    } else {
      const std::string why = last_line((fs::path(p.dir) / "stdout.log").string());
      failures.push_back(fmt::format("{}: {}", p.run->name, why));
      log->error("{} failed ({}): {}", p.run->name,
                 WIFEXITED(status) ? fmt::format("exit code {}", WEXITSTATUS(status))
                                   : fmt::format("signal {}", WTERMSIG(status)), why);
    }
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  write_results();
  size_t finished = 0;
  for (const auto& p : plan) finished += p.finished;
  log->info("{}: {} of {} runs finished; results in {}", sweep.name, finished, plan.size(),
            (fs::path(out) / "results.jsonl").string());
  for (const auto& f : failures) log->error("failed: {}", f);
  ::close(lock_fd);
  return int(failures.size());
}

}  // namespace thx
