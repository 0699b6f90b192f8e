#include "experiments/sweep_results.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "common/error.h"
#include "common/fs.h"

namespace thx {
namespace fs = std::filesystem;
using json = nlohmann::json;

// Fine-tuning results under <run>/finetune/ (any depth): each finished <task>.json that
// `thx finetune` wrote, as {task: metrics}. Read whenever results.jsonl is written, so that
// fine-tuning done after a run finished reaches the tables (read_results merges it too).
json read_downstream(const std::string& run_dir) {
  json downstream = json::object();
  const fs::path ft = fs::path(run_dir) / "finetune";
  std::error_code ec;  // an unreadable or impossible path: no fine-tuning results, not an exception
  if (!fs::is_directory(ft, ec)) return downstream;
  for (const auto& f : fs::recursive_directory_iterator(ft)) {
    if (!f.is_regular_file() || f.path().extension() != ".json") continue;
    try {
      const json j = json::parse(read_file(f.path().string()));
      // A fine-tuning still running ("finished": false) has no result yet; files from before
      // that key are finished ones.
      if (j.is_object() && j.contains("task") && j["task"].is_string() && j.contains("metrics") &&
          j["metrics"].is_object() && j.contains("history") && j.value("finished", true) != false)
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
    if (const std::string name = r["name"]; name.empty() || name.size() > 255 || name == "." || name == ".." ||
                                            name.find('/') != std::string::npos || name.find('\0') != std::string::npos)
      throw InputError(fmt::format("{}:{}: 'name' must be a run directory's name (1 to 255 bytes, no '/')", path,
                                   line_no));
    // Fine-tuning done since the sweep wrote this line.
    const json d = read_downstream((fs::path(dir) / r["name"].get<std::string>()).string());
    if (!d.empty()) r["downstream"] = d;
    for (const char* k : {"ln_ppl", "best_ln_ppl", "step_time_s", "tokens_per_s", "mlm", "sop", "nsp"})
      if (r.contains(k) && !r[k].is_number())
        throw InputError(fmt::format("{}:{}: '{}' must be a number", path, line_no, k));
    for (const char* k : {"d_model", "seed", "steps"})  // read as int64: 1e51 would not convert
      if (r.contains(k) && !r[k].is_number_integer())
        throw InputError(fmt::format("{}:{}: '{}' must be an integer", path, line_no, k));
    for (const char* k : {"budget", "variant", "model"})
      if (r.contains(k) && !r[k].is_string())
        throw InputError(fmt::format("{}:{}: '{}' must be a string", path, line_no, k));
    for (const char* k : {"params_per_att_layer", "multiplies_per_att_layer"}) {  // a number, or one per layer type
      bool ok = !r.contains(k) || r[k].is_number() || r[k].is_object();
      if (ok && r.contains(k) && r[k].is_object())
        for (const auto& [layer, v] : r[k].items()) ok = ok && v.is_number();
      if (!ok)
        throw InputError(fmt::format("{}:{}: '{}' must be a number or {{layer type: number}}", path, line_no, k));
    }
    if (r.contains("precision") && !(r["precision"] == "fp32" || r["precision"] == "bf16"))
      throw InputError(fmt::format("{}:{}: 'precision' must be \"fp32\" or \"bf16\" (train.precision)", path, line_no));
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
          if (ok && a.contains("dynamic")) {
            ok = a["dynamic"].is_array();
            for (const auto& x : ok ? a["dynamic"] : json::array()) ok = ok && x.is_string();
          }
        }
      if (!ok)
        throw InputError(fmt::format("{}:{}: 'attention' must map each layer type to "
                                     "{{variant, h_k, h, h_v, d_k, d_v, dynamic}}", path, line_no));
    }
  }
  return out;
}

// What a run's metrics.jsonl says: finished when an evaluation at the last step is there.
json summarize_metrics(const std::string& run_dir, int64_t steps, bool* finished) {
  std::ifstream in((fs::path(run_dir) / "metrics.jsonl").string());
  std::vector<double> step_times, tokens_per_s;
  std::optional<double> final_ppl, best_ppl;
  std::map<std::string, double> accuracies;  // BERT/ALBERT: at the last evaluation
  std::map<std::string, double> mixing;      // talking-heads: P_l/P_w movement (training/pretrain.cpp)
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
      mixing.clear();
      for (const char* k : {"P_l_drift", "P_w_drift", "P_l_update", "P_w_update"})
        if (j.contains(k)) mixing[k] = j[k].get<double>();
    }
    if (j.contains("step_time_s")) step_times.push_back(j["step_time_s"]);
    if (j.contains("tokens_per_s")) tokens_per_s.push_back(j["tokens_per_s"]);
  }
  *finished = final_ppl && last_eval == steps;
  json r;
  if (final_ppl) r["ln_ppl"] = *final_ppl, r["best_ln_ppl"] = *best_ppl;
  for (const auto& [k, v] : accuracies) r[k] = v;  // percent, as Tables 5 and 6 print them
  for (const auto& [k, v] : mixing) r[k] = v;      // ratios
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  if (!step_times.empty()) r["step_time_s"] = median(step_times), r["tokens_per_s"] = median(tokens_per_s);
  return r;
}

// train.precision in <run>/config.yaml; fp32 where the key is absent (configs from before it).
std::string run_precision(const std::string& run_dir) {
  const std::string path = (fs::path(run_dir) / "config.yaml").string();
  YAML::Node p;
  try {
    p = YAML::LoadFile(path)["train"]["precision"];
  } catch (const YAML::Exception& e) {
    throw InputError(fmt::format("{}: cannot read train.precision ({})", path, e.what()));
  }
  if (!p) return "fp32";
  if (!p.IsScalar() || (p.Scalar() != "fp32" && p.Scalar() != "bf16"))
    throw InputError(fmt::format("{}: train.precision must be fp32 or bf16", path));
  return p.Scalar();
}

void write_results_jsonl(const std::string& out, const std::vector<std::string>& run_dirs) {
  std::string text;
  for (const auto& dir : run_dirs) {
    const fs::path rj = fs::path(dir) / "result.json";
    if (!fs::exists(rj)) continue;
    json r = json::parse(read_file(rj.string()));
    // result.json has carried train.precision since the tables began to refuse mixed precisions;
    // a run finished by an older binary gets it from the config.yaml it ran with, so that its
    // bf16 results are never pooled as fp32 ones.
    if (!r.contains("precision")) r["precision"] = run_precision(dir);
    const json d = read_downstream(dir);
    if (!d.empty()) r["downstream"] = d;
    text += r.dump() + "\n";
  }
  write_file_atomic((fs::path(out) / "results.jsonl").string(), text);
}

}  // namespace thx
