#include "eval/predictions.h"

#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "common/fs.h"
#include "training/checkpoint.h"

namespace thx {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string glue_folder_name(const std::string& task) {
  static const std::map<std::string, std::string> m = {
      {"cola", "CoLA"}, {"sst2", "SST-2"}, {"mrpc", "MRPC"}, {"stsb", "STS-B"}, {"qqp", "QQP"},
      {"mnli", "MNLI-m"}, {"mnli_mm", "MNLI-mm"}, {"qnli", "QNLI"}, {"rte", "RTE"}, {"wnli", "WNLI"},
      {"ax", "AX"}, {"boolq", "BoolQ"}, {"cb", "CB"}, {"copa", "COPA"}, {"multirc", "MultiRC"},
      {"record", "ReCoRD"}, {"rte_sg", "RTE"}, {"wic", "WiC"}, {"wsc", "WSC"}, {"axb", "AX-b"}, {"axg", "AX-g"}};
  auto it = m.find(task);
  return it != m.end() ? it->second : task;
}


}  // namespace

// Predictions in the official formats: SQuAD {id: answer}; GLUE "index\tprediction" TSV;
// SuperGLUE {"idx", "label"} JSON lines.
void write_predictions(const std::string& dir, const TaskSpec& spec, const std::vector<TaskExample>& dev,
                       const TaskEval& ev) {
  if (spec.benchmark == "squad") {
    json j = json::object();
    for (const auto& [id, a] : ev.answers) j[id] = a;
    write_file_atomic((fs::path(dir) / (spec.name + "_predictions.json")).string(), j.dump(1) + "\n");
    if (!ev.na_probs.empty()) {
      json n = json::object();
      for (const auto& [id, p] : ev.na_probs) n[id] = p;
      write_file_atomic((fs::path(dir) / (spec.name + "_na_probs.json")).string(), n.dump(1) + "\n");
    }
    return;
  }
  if (spec.benchmark == "race") {
    json j = json::object();
    for (size_t i = 0; i < dev.size() && i < ev.predictions.size(); ++i) j[dev[i].id] = ev.predictions[i];
    write_file_atomic((fs::path(dir) / "race_predictions.json").string(), j.dump(1) + "\n");
    return;
  }
  const std::string name = glue_folder_name(spec.name);
  if (spec.benchmark == "glue") {
    std::string s = "index\tprediction\n";
    for (size_t i = 0; i < dev.size() && i < ev.predictions.size(); ++i)
      s += dev[i].id + "\t" + ev.predictions[i] + "\n";
    write_file_atomic((fs::path(dir) / (name + ".tsv")).string(), s);
    return;
  }
  std::string s;
  if (spec.name == "multirc") {
    // SuperGLUE's nesting: one line per passage, {idx, passage: {questions: [{idx, answers:
    // [{idx, label}]}]}}; our ids are "passage/question/answer".
    std::vector<std::pair<std::string, json>> passages;  // in file order
    for (size_t i = 0; i < dev.size() && i < ev.predictions.size(); ++i) {
      const std::string& id = dev[i].id;
      const size_t a = id.find('/'), b = id.rfind('/');
      auto num = [](const std::string& x) -> json {
        try {
          return json::parse(x);
        } catch (const json::exception&) {
          return x;
        }
      };
      const std::string pid = id.substr(0, a), qid = id.substr(a + 1, b - a - 1), aid = id.substr(b + 1);
      if (passages.empty() || passages.back().first != pid)
        passages.push_back({pid, {{"idx", num(pid)}, {"passage", {{"questions", json::array()}}}}});
      json& qs = passages.back().second["passage"]["questions"];
      if (qs.empty() || qs.back()["idx"] != num(qid)) qs.push_back({{"idx", num(qid)}, {"answers", json::array()}});
      qs.back()["answers"].push_back({{"idx", num(aid)}, {"label", ev.predictions[i] == "True" ? 1 : 0}});
    }
    for (const auto& [pid, j] : passages) s += j.dump() + "\n";
    write_file_atomic((fs::path(dir) / (name + ".jsonl")).string(), s);
    return;
  }
  for (size_t i = 0; i < dev.size() && i < ev.predictions.size(); ++i) {
    json j;
    try {
      j["idx"] = json::parse(dev[i].id);
    } catch (const json::exception&) {
      j["idx"] = dev[i].id;
    }
    const std::string& p = ev.predictions[i];
    if (spec.name == "copa") j["label"] = p == "choice2" ? 1 : 0;
    else if (spec.labels == std::vector<std::string>{"False", "True"}) j["label"] = p == "True" ? "true" : "false";
    else j["label"] = p;
    s += j.dump() + "\n";
  }
  write_file_atomic((fs::path(dir) / (name + ".jsonl")).string(), s);
}

void write_record(const std::string& dir, const TaskRecord& r, const nlohmann::json& weights) {
  nlohmann::json j = to_json(r);
  if (!weights.is_null()) j["weights"] = weights;
  write_file_atomic((fs::path(dir) / (r.task + ".json")).string(), j.dump(1) + "\n");
}

std::string best_weights_file(const std::string& task) { return task + "-best.h5"; }

nlohmann::json weights_block(const TaskRecord& r, const std::string& last_file, int64_t last_step) {
  return {{"best", {{"file", best_weights_file(r.task)}, {"step", r.best_step}}},
          {"last", {{"file", last_file}, {"step", last_step}}}};
}

void write_params(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& params,
                  const std::string& config, int64_t step) {
  Checkpoint ck;
  for (const auto& [k, p] : params) ck.params[k] = p.detach().clone();
  ck.step = step, ck.config = config;
  ck.rng = torch::zeros({1}, torch::kUInt8);
  save_checkpoint(path, ck);
}


}  // namespace thx
