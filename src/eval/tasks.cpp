#include "eval/tasks.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <variant>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace thx {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using K = TaskKind;

std::vector<TaskSpec> make_specs() {
  const std::vector<std::string> nli3 = {"entailment", "neutral", "contradiction"};
  const std::vector<std::string> nli2 = {"entailment", "not_entailment"};
  const std::vector<std::string> bin = {"0", "1"};
  const std::vector<std::string> tf = {"False", "True"};
  return {
      // GLUE
      {"cola", "glue", K::classification, bin, {"sentence"}, {"mcc"}},
      {"sst2", "glue", K::classification, bin, {"sentence"}, {"accuracy"}},
      {"mrpc", "glue", K::classification, bin, {"sentence1", "sentence2"}, {"f1", "accuracy"}},
      {"stsb", "glue", K::regression, {}, {"sentence1", "sentence2"}, {"pearson", "spearman"}},
      {"qqp", "glue", K::classification, bin, {"question1", "question2"}, {"f1", "accuracy"}},
      {"mnli", "glue", K::classification, nli3, {"premise", "hypothesis"}, {"accuracy"}},
      {"mnli_mm", "glue", K::classification, nli3, {"premise", "hypothesis"}, {"accuracy"}},
      {"qnli", "glue", K::classification, nli2, {"question", "sentence"}, {"accuracy"}},
      {"rte", "glue", K::classification, nli2, {"sentence1", "sentence2"}, {"accuracy"}},
      {"wnli", "glue", K::classification, bin, {"sentence1", "sentence2"}, {"accuracy"}},
      {"ax", "glue", K::classification, nli3, {"premise", "hypothesis"}, {"mcc"}},
      // SuperGLUE
      {"boolq", "superglue", K::classification, tf, {"question", "passage"}, {"accuracy"}},
      {"cb", "superglue", K::classification, {"entailment", "contradiction", "neutral"},
       {"premise", "hypothesis"}, {"f1_macro", "accuracy"}},
      {"copa", "superglue", K::multiple_choice, {"choice1", "choice2"}, {"premise", "choice1", "choice2"},
       {"accuracy"}},
      {"multirc", "superglue", K::classification, tf, {"question", "answer", "paragraph"},
       {"f1a", "exact_match"}},
      {"record", "superglue", K::span, {}, {"passage", "query"}, {"exact_match", "f1"}},
      {"rte_sg", "superglue", K::classification, nli2, {"premise", "hypothesis"}, {"accuracy"}},
      {"wic", "superglue", K::classification, tf, {"sentence1", "sentence2"}, {"accuracy"}},
      {"wsc", "superglue", K::classification, tf, {"text"}, {"accuracy"}},
      {"axb", "superglue", K::classification, nli2, {"sentence1", "sentence2"}, {"mcc"}},
      {"axg", "superglue", K::classification, nli2, {"premise", "hypothesis"}, {"accuracy"}},
      // SQuAD and RACE
      {"squad11", "squad", K::span, {}, {"question", "context"}, {"exact_match", "f1"}},
      {"squad20", "squad", K::span, {}, {"question", "context"}, {"exact_match", "f1"}},
      {"race", "race", K::multiple_choice, {"A", "B", "C", "D"}, {"article", "question"}, {"accuracy"}},
  };
}

// The GLUE folder name and, per split, the file name.
struct GlueFiles {
  std::string folder;
};
const std::map<std::string, std::string>& glue_folders() {
  static const std::map<std::string, std::string> m = {
      {"cola", "CoLA"}, {"sst2", "SST-2"}, {"mrpc", "MRPC"}, {"stsb", "STS-B"}, {"qqp", "QQP"},
      {"mnli", "MNLI"}, {"mnli_mm", "MNLI"}, {"qnli", "QNLI"}, {"rte", "RTE"}, {"wnli", "WNLI"},
      {"ax", "AX"}};
  return m;
}
const std::map<std::string, std::string>& superglue_folders() {
  static const std::map<std::string, std::string> m = {
      {"boolq", "BoolQ"}, {"cb", "CB"}, {"copa", "COPA"}, {"multirc", "MultiRC"}, {"record", "ReCoRD"},
      {"rte_sg", "RTE"}, {"wic", "WiC"}, {"wsc", "WSC"}, {"axb", "AX-b"}, {"axg", "AX-g"}};
  return m;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t tab = line.find('\t', start);
    out.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) break;
    start = tab + 1;
  }
  return out;
}

// A malformed row: throw, or count it when the user opted in.
struct BadRow {
  const ReadOptions& o;
  TaskData& d;
  void operator()(int64_t line, const std::string& what) const {
    if (!o.skip_bad)
      throw InputError(fmt::format("{}:{}: {} (finetune.skip_bad_rows: true skips and counts such rows)", d.path,
                                   line, what));
    ++d.skipped;
  }
};

int label_index(const TaskSpec& s, const std::string& v) {
  for (size_t i = 0; i < s.labels.size(); ++i)
    if (s.labels[i] == v) return int(i);
  return -1;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

const std::vector<TaskSpec>& task_specs() {
  static const std::vector<TaskSpec> specs = make_specs();
  return specs;
}

std::string task_names() {
  std::vector<std::string> n;
  for (const auto& s : task_specs()) n.push_back(s.name);
  return join(n);
}

const TaskSpec& task_spec(const std::string& name) {
  for (const auto& s : task_specs())
    if (s.name == name) return s;
  throw InputError(fmt::format("unknown task '{}'; allowed: {}", name, task_names()));
}

std::string task_path(const std::string& root, const std::string& task, const std::string& split) {
  const TaskSpec& s = task_spec(task);
  THX_CHECK(split == "train" || split == "dev" || split == "test",
            "task {}: unknown split '{}'; allowed: train, dev, test", task, split);
  const fs::path r(root);
  if (s.benchmark == "glue") {
    const std::string folder = glue_folders().at(task);
    if (task == "ax") return (r / "glue" / folder / "test.tsv").string();
    std::string file = split;
    if (task == "mnli" && split != "train") file += "_matched";
    if (task == "mnli_mm" && split != "train") file += "_mismatched";
    return (r / "glue" / folder / (file + ".tsv")).string();
  }
  if (s.benchmark == "superglue") {
    const std::string folder = superglue_folders().at(task);
    if (task == "axb" || task == "axg") return (r / "superglue" / folder / (folder + ".jsonl")).string();
    return (r / "superglue" / folder / ((split == "dev" ? "val" : split) + ".jsonl")).string();
  }
  if (s.benchmark == "squad") {
    const std::string v = task == "squad11" ? "1.1" : "2.0";
    THX_CHECK(split != "test", "task {}: SQuAD has no public test split; allowed: train, dev", task);
    const fs::path dir = r / "squad" / ("v" + v);
    const fs::path official = dir / (split + "-v" + v + ".json");
    // The offline copy of v1.1 train is a reconstruction (see ../shared/data/README.md).
    const fs::path rebuilt = dir / (split + "-v" + v + ".RECONSTRUCTED.json");
    return (!fs::exists(official) && fs::exists(rebuilt) ? rebuilt : official).string();
  }
  return (r / "race" / split).string();
}

TaskData load_task(const std::string& root, const std::string& task, const std::string& split,
                   const ReadOptions& o) {
  const std::string path = task_path(root, task, split);
  if (!fs::exists(path))
    throw InputError(fmt::format("{}: not found (task {}, split {}; data root {})", path, task, split, root));
  const TaskSpec& s = task_spec(task);
  TaskData d = s.benchmark == "glue"        ? read_glue(task, path, o)
               : s.benchmark == "superglue" ? read_superglue(task, path, o)
               : s.benchmark == "squad"     ? read_squad(path, o)
                                            : read_race(path, o);
  d.task = task, d.split = split;
  if (split != "test" && !d.unlabeled.empty()) throw InputError(d.unlabeled + "; a " + split + " split needs its labels");
  if (s.benchmark == "squad") {
    const bool v2 = squad_version(path) == "2.0";
    THX_CHECK(v2 == (task == "squad20"), "{}: a SQuAD v{} file, but task {} wants v{}", path,
              v2 ? "2.0" : "1.1", task, task == "squad20" ? "2.0" : "1.1");
  }
  return d;
}

// ---- GLUE ------------------------------------------------------------------------------------

namespace {

// The readers' row loop: each line after those read, '\r' dropped, empty ones skipped; line_no counts all.
template <class F>
void for_each_row(std::istream& in, int64_t& line_no, F&& row) {
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) row(line);
  }
}

// A GLUE file's columns by header name; CoLA's train/dev have no header (source, label, *, sentence).
struct GlueColumns {
  std::vector<int> text;
  int label = -1, id = -1;
  size_t count = 0;
  bool header = true;  // the first line was a header (else it is a row)
};

GlueColumns glue_columns(const std::string& task, const std::string& path, const std::string& first, TaskData& d) {
  static const std::map<std::string, std::pair<std::vector<std::string>, std::string>> names = {
      {"cola", {{"sentence"}, "label"}},
      {"sst2", {{"sentence"}, "label"}},
      {"mrpc", {{"#1 String", "#2 String"}, "Quality"}},
      {"stsb", {{"sentence1", "sentence2"}, "score"}},
      {"qqp", {{"question1", "question2"}, "is_duplicate"}},
      {"mnli", {{"sentence1", "sentence2"}, "gold_label"}},
      {"mnli_mm", {{"sentence1", "sentence2"}, "gold_label"}},
      {"qnli", {{"question", "sentence"}, "label"}},
      {"rte", {{"sentence1", "sentence2"}, "label"}},
      {"wnli", {{"sentence1", "sentence2"}, "label"}},
      {"ax", {{"sentence1", "sentence2"}, "label"}}};
  const auto& want = names.at(task);
  GlueColumns c;
  const auto cols = split_tabs(first);
  if (task == "cola" && !(cols.size() == 2 && cols[0] == "index")) {
    c.header = false;  // train/dev: source, label, original label, sentence
    c.text = {3}, c.label = 1, c.count = 4;
    return c;
  }
  c.count = cols.size();
  for (const auto& n : want.first) {
    auto it = std::find(cols.begin(), cols.end(), n);
    if (it == cols.end())
      throw InputError(fmt::format("{}:1: header has no '{}' column (task {}; header: {})", path, n, task, join(cols)));
    c.text.push_back(int(it - cols.begin()));
  }
  auto lab = std::find(cols.begin(), cols.end(), want.second);
  c.label = lab == cols.end() ? -1 : int(lab - cols.begin());  // test files have none
  if (c.label < 0)
    d.unlabeled = fmt::format("{}:1: the header has no '{}' column (task {}; header: {})", path, want.second, task,
                              join(cols));
  for (const char* id : {"index", "idx", "id"}) {
    auto it = std::find(cols.begin(), cols.end(), id);
    if (it != cols.end() && c.id < 0) c.id = int(it - cols.begin());
  }
  if (task == "qqp" && c.label < 0) c.count = cols.size();
  return c;
}

// One GLUE row as an example, or a reason it is malformed.
std::variant<TaskExample, std::string> glue_example(const std::string& task, const TaskSpec& s, const GlueColumns& c,
                                                    const std::string& row, int64_t line_no, size_t index) {
  const auto cols = split_tabs(row);
  // MNLI rows carry 1 or 5 annotator labels before gold_label, so their width varies:
  // the columns needed must exist; other tasks must have exactly the header's width.
  const bool mnli = task == "mnli" || task == "mnli_mm";
  const size_t needed = size_t(std::max(c.id, *std::max_element(c.text.begin(), c.text.end()))) + 1;
  if (mnli ? cols.size() < needed : cols.size() != c.count)
    return fmt::format("expected {}{} tab-separated fields, found {}", mnli ? "at least " : "",
                       mnli ? needed : c.count, cols.size());
  TaskExample e;
  e.line = line_no;
  e.id = c.id >= 0 ? cols[c.id] : std::to_string(index);
  for (int t : c.text) e.text.push_back(cols[t]);
  if (c.label < 0) return e;
  const std::string v = mnli ? cols.back() : cols[c.label];
  if (s.kind == TaskKind::regression) {
    try {
      size_t used = 0;
      e.score = std::stod(v, &used);
      if (used != v.size()) throw std::invalid_argument(v);
    } catch (const std::exception&) {
      return fmt::format("score '{}' is not a number", v);
    }
  } else {
    e.label = label_index(s, v);
    if (e.label < 0) return fmt::format("label '{}' is not one of: {}", v, join(s.labels));
  }
  return e;
}

}  // namespace

TaskData read_glue(const std::string& task, const std::string& path, const ReadOptions& o) {
  const TaskSpec& s = task_spec(task);
  THX_CHECK(s.benchmark == "glue", "read_glue: {} is not a GLUE task", task);
  TaskData d;
  d.task = task, d.path = path;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open", path));
  BadRow bad{o, d};
  std::string line;
  int64_t line_no = 0;
  if (!std::getline(in, line)) throw InputError(fmt::format("{}: empty file", path));
  ++line_no;
  if (line.rfind("\xEF\xBB\xBF", 0) == 0) line = line.substr(3);  // MRPC's byte-order mark
  if (!line.empty() && line.back() == '\r') line.pop_back();
  const GlueColumns c = glue_columns(task, path, line, d);
  auto handle = [&](const std::string& row) {
    auto e = glue_example(task, s, c, row, line_no, d.examples.size());
    if (auto* why = std::get_if<std::string>(&e)) bad(line_no, *why);
    else d.examples.push_back(std::move(std::get<TaskExample>(e)));
  };
  if (!c.header && !line.empty()) handle(line);
  for_each_row(in, line_no, handle);
  return d;
}

// ---- SuperGLUE -------------------------------------------------------------------------------

namespace {

std::string str_field(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_string()) throw std::invalid_argument(fmt::format("no string '{}'", key));
  return j[key].get<std::string>();
}

// A SuperGLUE label: bool, a class name, or an index.
int sg_label(const TaskSpec& s, const json& j) {
  if (!j.contains("label")) return -1;
  const json& l = j["label"];
  if (l.is_boolean()) return l.get<bool>() ? 1 : 0;
  if (l.is_number_integer()) {
    const int v = l.get<int>();
    if (v < 0 || v >= int(s.labels.size())) throw std::invalid_argument(fmt::format("label {} out of range", v));
    return v;
  }
  if (l.is_string()) {
    const int v = label_index(s, l.get<std::string>());
    if (v < 0)
      throw std::invalid_argument(fmt::format("label '{}' is not one of: {}", l.get<std::string>(), join(s.labels)));
    return v;
  }
  throw std::invalid_argument("label is neither a bool, a string nor an index");
}

std::string idx_string(const json& j) {
  if (!j.contains("idx")) return "";
  return j["idx"].is_string() ? j["idx"].get<std::string>() : j["idx"].dump();
}

}  // namespace

namespace {

// MultiRC: one example per candidate answer, grouped by question for exact match.
void multirc_examples(const TaskSpec& s, const json& j, const std::string& id, int64_t line_no, TaskData& d) {
  if (!j.contains("passage") || !j["passage"].is_object()) throw std::invalid_argument("no object 'passage'");
  const json& p = j["passage"];
  const std::string text = str_field(p, "text");
  if (!p.contains("questions") || !p["questions"].is_array()) throw std::invalid_argument("no 'questions' array");
  for (const json& q : p["questions"]) {
    const std::string question = str_field(q, "question");
    const std::string group = id + "/" + idx_string(q);
    if (!q.contains("answers") || !q["answers"].is_array()) throw std::invalid_argument("no 'answers' array");
    for (const json& a : q["answers"]) {
      TaskExample c;
      c.line = line_no, c.group = group, c.id = group + "/" + idx_string(a);
      c.text = {question, str_field(a, "text"), text};
      c.label = sg_label(s, a);
      d.examples.push_back(std::move(c));
    }
  }
}

// ReCoRD: one example per query, the passage's entities as its options.
void record_examples(const json& j, int64_t line_no, TaskData& d) {
  if (!j.contains("passage") || !j["passage"].is_object()) throw std::invalid_argument("no object 'passage'");
  const json& p = j["passage"];
  const std::string text = str_field(p, "text");
  std::vector<std::string> entities;
  for (const json& en : p.value("entities", json::array())) {
    // Character offsets, the end inclusive (passage[start:end + 1] in T5's preprocessing).
    const int64_t a = en.at("start").get<int64_t>(), b = en.at("end").get<int64_t>();
    const int64_t from = a < 0 ? -1 : utf8_offset(text, a), to = b < a ? -1 : utf8_offset(text, b + 1);
    if (from < 0 || to < 0 || to > int64_t(text.size())) throw std::invalid_argument("entity span outside the passage");
    const std::string name = text.substr(size_t(from), size_t(to - from));
    if (std::find(entities.begin(), entities.end(), name) == entities.end()) entities.push_back(name);
  }
  if (!j.contains("qas") || !j["qas"].is_array()) throw std::invalid_argument("no 'qas' array");
  for (const json& q : j["qas"]) {
    TaskExample c;
    c.line = line_no, c.id = idx_string(q);
    c.text = {text, str_field(q, "query")};
    c.options = entities;
    for (const json& a : q.value("answers", json::array())) c.answers.push_back(str_field(a, "text"));
    d.examples.push_back(std::move(c));
  }
}

// The example of one row of a task with one example per row.
TaskExample superglue_example(const std::string& task, const TaskSpec& s, const json& j, int64_t line_no) {
  TaskExample e;
  e.line = line_no;
  e.id = idx_string(j);
  if (task == "boolq") {
    e.text = {str_field(j, "question"), str_field(j, "passage")};
  } else if (task == "cb" || task == "rte_sg" || task == "axg") {
    e.text = {str_field(j, "premise"), str_field(j, "hypothesis")};
  } else if (task == "axb") {
    e.text = {str_field(j, "sentence1"), str_field(j, "sentence2")};
  } else if (task == "copa") {
    e.text = {str_field(j, "premise"), str_field(j, "choice1"), str_field(j, "choice2")};
    e.options = {e.text[1], e.text[2]};
    e.word = str_field(j, "question");
    if (e.word != "cause" && e.word != "effect")
      throw std::invalid_argument(fmt::format("question '{}' is neither cause nor effect", e.word));
  } else if (task == "wic") {
    e.text = {str_field(j, "sentence1"), str_field(j, "sentence2")};
    e.word = str_field(j, "word");
  } else if (task == "wsc") {
    e.text = {str_field(j, "text")};
    if (!j.contains("target") || !j["target"].is_object()) throw std::invalid_argument("no object 'target'");
    e.word = str_field(j["target"], "span1_text");
    e.word2 = str_field(j["target"], "span2_text");
  }
  e.label = sg_label(s, j);
  return e;
}

}  // namespace

TaskData read_superglue(const std::string& task, const std::string& path, const ReadOptions& o) {
  const TaskSpec& s = task_spec(task);
  THX_CHECK(s.benchmark == "superglue", "read_superglue: {} is not a SuperGLUE task", task);
  TaskData d;
  d.task = task, d.path = path;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open", path));
  BadRow bad{o, d};
  int64_t line_no = 0;
  for_each_row(in, line_no, [&](const std::string& line) {
    try {
      const json j = json::parse(line);
      if (!j.is_object()) throw std::invalid_argument("not a JSON object");
      if (task == "multirc") multirc_examples(s, j, idx_string(j), line_no, d);
      else if (task == "record") record_examples(j, line_no, d);
      else d.examples.push_back(superglue_example(task, s, j, line_no));
    } catch (const std::exception& ex) {  // json::exception and the checks above
      bad(line_no, fmt::format("bad {} row: {}", task, ex.what()));
    }
  });
  return d;
}

// ---- SQuAD -----------------------------------------------------------------------------------

namespace {
template <class Json>
Json parse_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open", path));
  try {
    return Json::parse(in);
  } catch (const typename Json::exception& e) {
    throw InputError(fmt::format("{}: not JSON ({})", path, e.what()));
  }
}
}  // namespace

json read_json(const std::string& path) { return parse_json_file<json>(path); }
nlohmann::ordered_json read_ordered_json(const std::string& path) {
  return parse_json_file<nlohmann::ordered_json>(path);
}

int64_t utf8_offset(const std::string& text, int64_t index) {
  if (index < 0) return -1;
  int64_t seen = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte belongs to the code point before it
    if (seen++ == index) return int64_t(i);
  }
  return seen == index ? int64_t(text.size()) : -1;
}

std::string squad_version(const std::string& path) {
  const json j = read_json(path);
  if (j.contains("version") && j["version"].is_string() && j["version"] == "v2.0") return "2.0";
  if (j.contains("data") && j["data"].is_array())
    for (const json& a : j["data"]) {
      if (!a.is_object() || !a.contains("paragraphs") || !a["paragraphs"].is_array()) continue;
      for (const json& p : a["paragraphs"]) {
        if (!p.is_object() || !p.contains("qas") || !p["qas"].is_array()) continue;
        for (const json& q : p["qas"])
          if (q.is_object() && q.contains("is_impossible")) return "2.0";
      }
    }
  return "1.1";
}

TaskData read_squad(const std::string& path, const ReadOptions& o) {
  TaskData d;
  d.path = path;
  const json j = read_json(path);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array())
    throw InputError(fmt::format("{}: expected {{\"data\": [articles]}} (the SQuAD layout)", path));
  d.task = squad_version(path) == "2.0" ? "squad20" : "squad11";
  BadRow bad{o, d};
  int64_t n = 0;
  for (size_t ai = 0; ai < j["data"].size(); ++ai) {
    const json& a = j["data"][ai];
    if (!a.is_object() || !a.contains("paragraphs") || !a["paragraphs"].is_array()) {
      bad(n + 1, fmt::format("data[{}]: no 'paragraphs' array", ai));
      continue;
    }
    for (size_t pi = 0; pi < a["paragraphs"].size(); ++pi) {
      const json& p = a["paragraphs"][pi];
      if (!p.is_object() || !p.contains("context") || !p["context"].is_string() || !p.contains("qas") ||
          !p["qas"].is_array()) {
        bad(n + 1, fmt::format("data[{}].paragraphs[{}]: needs a string 'context' and a 'qas' array", ai, pi));
        continue;
      }
      const std::string context = p["context"];
      for (size_t qi = 0; qi < p["qas"].size(); ++qi) {
        const json& q = p["qas"][qi];
        ++n;
        try {
          TaskExample e;
          e.line = n;
          e.id = str_field(q, "id");
          e.text = {str_field(q, "question"), context};
          e.impossible = q.value("is_impossible", false);
          if (!q.contains("answers") || !q["answers"].is_array()) throw std::invalid_argument("no 'answers' array");
          for (const json& ans : q["answers"]) {
            const std::string text = str_field(ans, "text");
            if (!ans.contains("answer_start") || !ans["answer_start"].is_number_integer() ||
                ans["answer_start"].get<int64_t>() < 0)
              throw std::invalid_argument("an answer without a non-negative integer 'answer_start'");
            // A character offset in the file; here a byte offset, or -1 when the answer is not there.
            const int64_t start = utf8_offset(context, ans["answer_start"].get<int64_t>());
            const bool there = start >= 0 && !text.empty() && context.compare(size_t(start), text.size(), text) == 0;
            e.answers.push_back(text);
            e.answer_starts.push_back(there ? start : -1);
          }
          if (e.answers.empty() && !e.impossible)
            throw std::invalid_argument("no answers and not is_impossible");
          d.examples.push_back(std::move(e));
        } catch (const std::exception& ex) {
          bad(n, fmt::format("data[{}].paragraphs[{}].qas[{}]: {}", ai, pi, qi, ex.what()));
        }
      }
    }
  }
  return d;
}

// ---- RACE ------------------------------------------------------------------------------------

TaskData read_race(const std::string& dir, const ReadOptions& o) {
  TaskData d;
  d.task = "race", d.path = dir;
  std::vector<fs::path> files;
  for (const char* level : {"high", "middle"}) {
    const fs::path sub = fs::path(dir) / level;
    if (!fs::is_directory(sub)) continue;
    for (const auto& f : fs::directory_iterator(sub))
      if (f.is_regular_file() && f.path().extension() == ".txt") files.push_back(f.path());
  }
  if (files.empty()) throw InputError(fmt::format("{}: no high/*.txt or middle/*.txt files (the RACE layout)", dir));
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    json j;
    try {
      j = json::parse(in);
    } catch (const json::exception& e) {
      TaskData tmp;
      tmp.path = f.string();
      BadRow{o, tmp}(1, fmt::format("not JSON ({})", e.what()));
      d.skipped += tmp.skipped;
      continue;
    }
    try {
      const std::string article = str_field(j, "article");
      const json &qs = j.at("questions"), &opts = j.at("options"), &ans = j.at("answers");
      if (!qs.is_array() || !opts.is_array() || !ans.is_array() || qs.size() != opts.size() ||
          qs.size() != ans.size())
        throw std::invalid_argument("questions, options and answers must be arrays of one length");
      const std::string id = j.value("id", f.filename().string());
      std::vector<TaskExample> file_examples;  // all of a file's questions, or none
      for (size_t i = 0; i < qs.size(); ++i) {
        TaskExample e;
        e.line = int64_t(i) + 1;
        e.id = id + "-" + std::to_string(i);
        e.text = {article, qs[i].get<std::string>()};
        for (const json& x : opts[i]) e.options.push_back(x.get<std::string>());
        if (e.options.size() != 4) throw std::invalid_argument(fmt::format("question {} has {} options, not 4", i, e.options.size()));
        const std::string a = ans[i].get<std::string>();
        if (a.size() != 1 || a[0] < 'A' || a[0] > 'D')
          throw std::invalid_argument(fmt::format("answer '{}' is not one of A, B, C, D", a));
        e.label = a[0] - 'A';
        file_examples.push_back(std::move(e));
      }
      for (auto& e : file_examples) d.examples.push_back(std::move(e));
    } catch (const std::exception& ex) {
      TaskData tmp;
      tmp.path = f.string();
      BadRow{o, tmp}(1, ex.what());
      d.skipped += tmp.skipped;
    }
  }
  return d;
}

const char* task_help() {
  return "Tasks: cola sst2 mrpc stsb qqp mnli mnli_mm qnli rte wnli ax (GLUE); boolq cb copa multirc "
         "record rte_sg wic wsc axb axg (SuperGLUE); squad11 squad20; race.";
}

}  // namespace thx
