// tasks.h: the downstream tasks of the paper (GLUE, SuperGLUE, SQuAD v1.1/v2.0, RACE), read
// from their public files unchanged.
//
//   GLUE       <root>/glue/<Task>/{train,dev,test}.tsv (MNLI: dev_matched, dev_mismatched,
//              test_matched, test_mismatched; AX: <root>/glue/AX/test.tsv). Tab-separated, no
//              quoting (as the GLUE download script writes them); CoLA's train and dev have no
//              header row; MRPC starts with a UTF-8 byte-order mark.
//   SuperGLUE  <root>/superglue/<Task>/{train,val,test}.jsonl (AX-b, AX-g: AX-b.jsonl, AX-g.jsonl)
//   SQuAD      <root>/squad/v1.1/{train,dev}-v1.1.json, <root>/squad/v2.0/{train,dev}-v2.0.json;
//              {data: [{title, paragraphs: [{context, qas: [{id, question, answers:
//              [{text, answer_start}], is_impossible?}]}]}]}
//   RACE       <root>/race/<split>/{high,middle}/*.txt, one JSON object per file:
//              {id, article, questions[], options[][4], answers[] ("A".."D")}
//
// A malformed row is an InputError naming the file and line (and what was expected), unless
// ReadOptions::skip_bad: then it is skipped and counted in TaskData::skipped. Offsets in the
// files (SQuAD answer_start, ReCoRD entity start/end) count characters (code points), as the
// official Python scripts index strings; thx converts them to byte offsets when it reads them.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace thx {

enum class TaskKind { classification, regression, span, multiple_choice };

// One example of any task. Which fields are set depends on the task (tasks.cpp lists them).
struct TaskExample {
  std::string id;                    // GLUE idx, SuperGLUE idx, SQuAD question id, RACE file-q
  std::vector<std::string> text;     // the task's text fields, in TaskSpec::fields order
  int label = -1;                    // class or correct option; -1: unlabeled (test splits)
  double score = std::nan("");       // STS-B similarity, 0..5
  std::vector<std::string> answers;  // SQuAD / ReCoRD gold answers (may repeat)
  // SQuAD: byte offsets of the answers in the context (UTF-8), from the file's character
  // (code point) offsets; -1 where the answer does not match the context there (it runs past
  // the context, or other text stands at answer_start): training skips such questions.
  std::vector<int64_t> answer_starts;
  bool impossible = false;           // SQuAD v2.0
  std::vector<std::string> options;  // COPA choices, RACE options, ReCoRD entities
  std::string group;                 // MultiRC: the question a candidate answer belongs to
  std::string word;                  // WiC: the target word; WSC: span1 (noun); COPA: cause/effect
  std::string word2;                 // WSC: span2 (pronoun)
  int64_t line = 0;                  // source line (JSONL/TSV) or question index (SQuAD/RACE)
};

struct TaskSpec {
  std::string name;       // "cola", "sst2", ..., "squad11", "squad20", "race", "boolq", ...
  std::string benchmark;  // "glue", "superglue", "squad", "race"
  TaskKind kind = TaskKind::classification;
  std::vector<std::string> labels;  // class names as the files write them (GLUE/SuperGLUE)
  std::vector<std::string> fields;  // names of TaskExample::text, in order
  std::vector<std::string> metrics;  // the official metric names, in the order T5 reports them
};

// Every task thx knows; unknown names give an InputError listing them.
const std::vector<TaskSpec>& task_specs();
const TaskSpec& task_spec(const std::string& name);
std::string task_names();  // "cola, sst2, ..." for error messages
// The --help footer of thx finetune and thx eval: every task, by benchmark.
const char* task_help();

struct ReadOptions {
  bool skip_bad = false;  // skip and count malformed rows instead of failing
};

struct TaskData {
  std::string task, split, path;
  std::vector<TaskExample> examples;
  int64_t skipped = 0;  // malformed rows skipped (ReadOptions::skip_bad)
  std::string unlabeled;  // GLUE: the label column its header lacks (a test file), else ""
};

// The file (or, for RACE, folder) of a task's split under a data root in the layout above;
// split is "train", "dev" (MNLI: dev_matched; mnli_mm: dev_mismatched) or "test".
std::string task_path(const std::string& root, const std::string& task, const std::string& split);
// Read a task's split from task_path(); InputError when it is missing.
TaskData load_task(const std::string& root, const std::string& task, const std::string& split,
                   const ReadOptions& o = {});

// The readers, one per format (path is a file; RACE: the split's folder).
TaskData read_glue(const std::string& task, const std::string& path, const ReadOptions& o = {});
TaskData read_superglue(const std::string& task, const std::string& path, const ReadOptions& o = {});
TaskData read_squad(const std::string& path, const ReadOptions& o = {});  // v1.1 or v2.0
TaskData read_race(const std::string& dir, const ReadOptions& o = {});

// A whole JSON file; InputError "<path>: cannot open" or "<path>: not JSON (<where>)".
nlohmann::json read_json(const std::string& path);
// The same with each object's keys in the file's order (Python's json.load keeps it).
nlohmann::ordered_json read_ordered_json(const std::string& path);
// The byte offset of code point `index` in UTF-8 text (index == its length: the size); -1 past
// the end. The text is valid UTF-8 (JSON strings are: the parser rejects anything else).
int64_t utf8_offset(const std::string& text, int64_t index);

// SQuAD's version as the file states it ("1.1" or "2.0"; a file with any is_impossible is 2.0).
std::string squad_version(const std::string& path);

}  // namespace thx
