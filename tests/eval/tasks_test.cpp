// Task readers: fixtures in each published format (written here), bad rows, and the counts of
// the real files in ../shared/data against their published split sizes (skipped when absent).
#include <gtest/gtest.h>

#include <filesystem>

#include "common/error.h"
#include "eval/finetune_config.h"
#include "eval/tasks.h"
#include "test_util.h"

namespace thx {
namespace {
namespace THX_FILE_ID {
namespace fs = std::filesystem;
using test::TempDir;
using test::error_of;

std::string put(const TempDir& t, const std::string& rel, const std::string& text) {
  fs::create_directories(fs::path(t.file(rel)).parent_path());
  return t.write(rel, text);
}

TEST(GlueReader, EveryLayoutOfTheDownloadScript) {
  TempDir t;
  // CoLA train/dev: no header; source, label, original label, sentence.
  put(t, "glue/CoLA/dev.tsv", "gj04\t1\t\tThe sailors rode the breeze.\ngj04\t0\t*\tThe more we study verbs.\n");
  // MRPC: a UTF-8 byte-order mark before the header.
  put(t, "glue/MRPC/dev.tsv", "\xEF\xBB\xBFQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tA b.\tA c.\n");
  put(t, "glue/STS-B/dev.tsv",
      "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
      "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA man.\tA person.\t4.250\n");
  put(t, "glue/QQP/dev.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n7\t1\t2\tWhy?\tHow?\t0\n");
  // MNLI: 1 or 5 annotator labels before gold_label, so rows differ in width.
  const std::string mnli_header =
      "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
      "sentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n";
  put(t, "glue/MNLI/dev_matched.tsv",
      mnli_header + "0\t1\t1n\tgov\t(a)\t(b)\t(A)\t(B)\tPrem one.\tHyp one.\tneutral\tneutral\tentailment\tneutral\tneutral\tneutral\n"
                    "1\t2\t2e\tgov\t(a)\t(b)\t(A)\t(B)\tPrem two.\tHyp two.\tentailment\tentailment\n");
  put(t, "glue/MNLI/dev_mismatched.tsv", mnli_header + "5\t1\t1c\tletters\t(a)\t(b)\t(A)\t(B)\tP.\tH.\tcontradiction\tcontradiction\n");
  put(t, "glue/QNLI/dev.tsv", "index\tquestion\tsentence\tlabel\n0\tWho?\tHim.\tnot_entailment\n");
  put(t, "glue/SST-2/test.tsv", "index\tsentence\n0\tfine .\n1\tbad .\n");
  put(t, "glue/AX/test.tsv", "index\tsentence1\tsentence2\n0\tA.\tB.\n");

  TaskData d = load_task(t.path.string(), "cola", "dev");
  ASSERT_EQ(d.examples.size(), 2u);  // the first row is data, not a header
  EXPECT_EQ(d.examples[0].text[0], "The sailors rode the breeze.");
  EXPECT_EQ(d.examples[1].label, 0);
  d = load_task(t.path.string(), "mrpc", "dev");
  ASSERT_EQ(d.examples.size(), 1u);
  EXPECT_EQ(d.examples[0].text, (std::vector<std::string>{"A b.", "A c."}));
  EXPECT_EQ(d.examples[0].label, 1);
  d = load_task(t.path.string(), "stsb", "dev");
  EXPECT_DOUBLE_EQ(d.examples.at(0).score, 4.25);
  EXPECT_EQ(d.examples[0].text[1], "A person.");
  d = load_task(t.path.string(), "qqp", "dev");
  EXPECT_EQ(d.examples.at(0).id, "7");
  d = load_task(t.path.string(), "mnli", "dev");
  ASSERT_EQ(d.examples.size(), 2u);
  EXPECT_EQ(d.examples[0].label, 1);  // neutral
  EXPECT_EQ(d.examples[1].label, 0);  // entailment, from a 1-annotator row
  EXPECT_EQ(d.examples[1].text, (std::vector<std::string>{"Prem two.", "Hyp two."}));
  d = load_task(t.path.string(), "mnli_mm", "dev");
  EXPECT_EQ(d.examples.at(0).label, 2);
  EXPECT_EQ(load_task(t.path.string(), "qnli", "dev").examples.at(0).label, 1);
  d = load_task(t.path.string(), "sst2", "test");  // unlabeled
  ASSERT_EQ(d.examples.size(), 2u);
  EXPECT_EQ(d.examples[1].id, "1");
  EXPECT_EQ(d.examples[1].label, -1);
  EXPECT_EQ(load_task(t.path.string(), "ax", "test").examples.size(), 1u);
}

TEST(GlueReader, BadRowsNameFileAndLineOrAreCounted) {
  TempDir t;
  const std::string f = put(t, "glue/RTE/dev.tsv",
                            "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tentailment\n1\tA only\tnot_entailment\n"
                            "2\tC.\tD.\tmaybe\n3\tE.\tF.\tnot_entailment\n");
  const std::string e = error_of([&] { load_task(t.path.string(), "rte", "dev"); });
  EXPECT_NE(e.find(f + ":3: expected 4 tab-separated fields, found 3"), std::string::npos) << e;
  ReadOptions skip;
  skip.skip_bad = true;
  const TaskData d = load_task(t.path.string(), "rte", "dev", skip);
  EXPECT_EQ(d.examples.size(), 2u);
  EXPECT_EQ(d.skipped, 2);  // the short row and the unknown label
  put(t, "glue/RTE/train.tsv", "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tmaybe\n");
  EXPECT_NE(error_of([&] { load_task(t.path.string(), "rte", "train"); })
                .find(":2: label 'maybe' is not one of: entailment, not_entailment"),
            std::string::npos);
  put(t, "glue/STS-B/dev.tsv",
      "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
      "0\tg\tf\ty\to\ts\ts\tA.\tB.\tfour\n");
  EXPECT_NE(error_of([&] { load_task(t.path.string(), "stsb", "dev"); }).find(":2: score 'four' is not a number"),
            std::string::npos);
  EXPECT_NE(error_of([&] { load_task(t.path.string(), "wnli", "dev"); }).find("not found"), std::string::npos);
  EXPECT_NE(error_of([&] { task_spec("sst-2"); }).find("unknown task 'sst-2'; allowed: cola, sst2"), std::string::npos);
}

// MNLI rows vary in width, so a row is checked against the columns it needs: the text columns
// and the id column too, wherever the header puts it (found by fuzzing: an id column past the
// row's end was read).
TEST(GlueReader, AnMnliRowShorterThanItsIdColumnIsABadRow) {
  TempDir t;
  const std::string f = put(t, "glue/MNLI/dev_matched.tsv",
                            "sentence1\tsentence2\tpairID\tindex\tgold_label\nA.\tB.\tp\t0\tneutral\nC.\tD.\tneutral\n");
  const std::string e = error_of([&] { load_task(t.path.string(), "mnli", "dev"); });
  EXPECT_EQ(e.rfind(f + ":3: expected at least 4 tab-separated fields, found 3", 0), 0u) << e;
  ReadOptions skip;
  skip.skip_bad = true;
  const TaskData d = load_task(t.path.string(), "mnli", "dev", skip);
  ASSERT_EQ(d.examples.size(), 1u);
  EXPECT_EQ(d.examples[0].id, "0");
  EXPECT_EQ(d.skipped, 1);
}

TEST(SuperGlueReader, EveryTaskFormat) {
  TempDir t;
  const std::string r = t.path.string();
  put(t, "superglue/BoolQ/val.jsonl", R"({"question": "is it", "passage": "It is.", "idx": 0, "label": true})" "\n");
  put(t, "superglue/CB/val.jsonl", R"({"premise": "P", "hypothesis": "H", "label": "neutral", "idx": 3})" "\n");
  put(t, "superglue/COPA/val.jsonl",
      R"({"premise": "P", "choice1": "a", "choice2": "b", "question": "effect", "label": 1, "idx": 0})" "\n");
  put(t, "superglue/MultiRC/val.jsonl",
      R"({"idx": 0, "passage": {"text": "T", "questions": [{"question": "Q1", "idx": 0, "answers": [{"text": "x", "idx": 0, "label": 1}, {"text": "y", "idx": 1, "label": 0}]}, {"question": "Q2", "idx": 1, "answers": [{"text": "z", "idx": 2, "label": 1}]}]}})" "\n");
  put(t, "superglue/ReCoRD/val.jsonl",
      R"({"idx": 0, "passage": {"text": "Obama met Merkel.", "entities": [{"start": 0, "end": 4}, {"start": 10, "end": 15}]}, "qas": [{"query": "@placeholder met Merkel", "answers": [{"start": 0, "end": 4, "text": "Obama"}], "idx": 7}]})" "\n"
      // Entity offsets count characters, the end inclusive: "Zürich" is bytes 0..6, "Müller" 11..17.
      R"({"idx": 1, "passage": {"text": "Zürich met Müller.", "entities": [{"start": 0, "end": 5}, {"start": 11, "end": 16}]}, "qas": [{"query": "@placeholder met Müller", "answers": [{"start": 0, "end": 5, "text": "Zürich"}], "idx": 8}]})" "\n");
  put(t, "superglue/WiC/val.jsonl",
      R"({"word": "bank", "sentence1": "A bank.", "sentence2": "The bank.", "idx": 0, "label": false})" "\n");
  put(t, "superglue/WSC/val.jsonl",
      R"({"text": "Mark lied. He ...", "target": {"span1_text": "Mark", "span2_text": "He", "span1_index": 0, "span2_index": 2}, "idx": 0, "label": true})" "\n");
  put(t, "superglue/RTE/val.jsonl", R"({"premise": "P", "hypothesis": "H", "label": "not_entailment", "idx": 0})" "\n");
  put(t, "superglue/AX-b/AX-b.jsonl", R"({"sentence1": "A", "sentence2": "B", "label": "entailment", "idx": 0})" "\n");
  put(t, "superglue/AX-g/AX-g.jsonl", R"({"premise": "A", "hypothesis": "B", "label": "entailment", "idx": 0})" "\n");

  EXPECT_EQ(load_task(r, "boolq", "dev").examples.at(0).label, 1);
  EXPECT_EQ(load_task(r, "cb", "dev").examples.at(0).label, 2);
  const auto copa = load_task(r, "copa", "dev").examples.at(0);
  EXPECT_EQ(copa.label, 1);
  EXPECT_EQ(copa.word, "effect");
  EXPECT_EQ(copa.options, (std::vector<std::string>{"a", "b"}));
  const auto m = load_task(r, "multirc", "dev").examples;
  ASSERT_EQ(m.size(), 3u);  // one per candidate answer
  EXPECT_EQ(m[0].group, m[1].group);
  EXPECT_NE(m[0].group, m[2].group);
  EXPECT_EQ(m[1].label, 0);
  const auto rec = load_task(r, "record", "dev").examples.at(0);
  EXPECT_EQ(rec.options, (std::vector<std::string>{"Obama", "Merkel"}));
  EXPECT_EQ(load_task(r, "record", "dev").examples.at(1).options, (std::vector<std::string>{"Zürich", "Müller"}));
  EXPECT_EQ(rec.answers, (std::vector<std::string>{"Obama"}));
  EXPECT_EQ(rec.id, "7");
  EXPECT_EQ(load_task(r, "wic", "dev").examples.at(0).word, "bank");
  EXPECT_EQ(load_task(r, "wsc", "dev").examples.at(0).word2, "He");
  EXPECT_EQ(load_task(r, "rte_sg", "dev").examples.at(0).label, 1);
  EXPECT_EQ(load_task(r, "axb", "test").examples.size(), 1u);
  EXPECT_EQ(load_task(r, "axg", "test").examples.size(), 1u);

  const std::string bad = put(t, "superglue/CB/train.jsonl",
                              R"({"premise": "P", "hypothesis": "H", "label": "neutral"})" "\n{not json\n"
                              R"({"premise": "P", "label": "neutral"})" "\n");
  EXPECT_NE(error_of([&] { load_task(r, "cb", "train"); }).find(bad + ":2: bad cb row"), std::string::npos);
  ReadOptions skip;
  skip.skip_bad = true;
  const TaskData d = load_task(r, "cb", "train", skip);
  EXPECT_EQ(d.examples.size(), 1u);
  EXPECT_EQ(d.skipped, 2);
}

TEST(SquadReader, V11AndV20WithUnanswerable) {
  TempDir t;
  put(t, "squad/v1.1/dev-v1.1.json",
      R"({"version": "1.1", "data": [{"title": "T", "paragraphs": [{"context": "Denver won in 2016.", "qas": [{"id": "a", "question": "Who won?", "answers": [{"text": "Denver", "answer_start": 0}, {"text": "Denver", "answer_start": 0}]}]}]}]})");
  put(t, "squad/v2.0/dev-v2.0.json",
      R"({"version": "v2.0", "data": [{"title": "T", "paragraphs": [{"context": "Denver won.", "qas": [{"id": "a", "question": "Who?", "answers": [{"text": "Denver", "answer_start": 0}], "is_impossible": false}, {"id": "b", "question": "Why?", "answers": [], "plausible_answers": [{"text": "won", "answer_start": 7}], "is_impossible": true}]}]}]})");
  const auto v1 = load_task(t.path.string(), "squad11", "dev");
  ASSERT_EQ(v1.examples.size(), 1u);
  EXPECT_EQ(v1.examples[0].answers.size(), 2u);
  EXPECT_EQ(v1.examples[0].text[1], "Denver won in 2016.");
  const auto v2 = load_task(t.path.string(), "squad20", "dev");
  ASSERT_EQ(v2.examples.size(), 2u);
  EXPECT_TRUE(v2.examples[1].impossible);
  EXPECT_TRUE(v2.examples[1].answers.empty());
  EXPECT_EQ(squad_version(t.file("squad/v2.0/dev-v2.0.json")), "2.0");
  // A v1.1 file asked for as v2.0 is refused with the reason.
  fs::copy(t.file("squad/v1.1/dev-v1.1.json"), t.file("squad/v2.0/train-v2.0.json"));
  EXPECT_NE(error_of([&] { load_task(t.path.string(), "squad20", "train"); }).find("a SQuAD v1.1 file"),
            std::string::npos);
  const std::string bad = put(t, "bad.json", R"({"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "x", "question": "q", "answers": [{"text": "abc", "answer_start": "0"}]}]}]}]})");
  EXPECT_NE(error_of([&] { read_squad(bad); }).find("an answer without a non-negative integer 'answer_start'"),
            std::string::npos);
  const std::string truncated = put(t, "cut.json", R"({"data": [{"paragraphs": [)");
  EXPECT_NE(error_of([&] { read_squad(truncated); }).find(truncated + ": not JSON"), std::string::npos);
}

// answer_start counts characters (code points: the official scripts index Python strings); thx
// keeps byte offsets. Before the reader converted them, every answer after a non-ASCII character
// (16% of SQuAD v1.1's training answers: 13,652 of 87,599) pointed at the wrong text.
TEST(SquadReader, AnswerStartIsACharacterOffset) {
  TempDir t;
  // "Café – Zürich": é, – and ü are 2, 3 and 2 bytes; "Zürich" starts at character 7, byte 10.
  const std::string path = put(t, "s.json",
      R"({"data": [{"paragraphs": [{"context": "Café – Zürich wins.", "qas": [)"
      R"({"id": "a", "question": "Who?", "answers": [{"text": "Zürich", "answer_start": 7}]},)"
      R"({"id": "b", "question": "Who?", "answers": [{"text": "wins", "answer_start": 14}]},)"
      R"({"id": "c", "question": "Who?", "answers": [{"text": "Zürich", "answer_start": 10}]},)"
      R"({"id": "d", "question": "Who?", "answers": [{"text": "wins.", "answer_start": 15}]}]}]}]})");
  const TaskData d = read_squad(path);
  ASSERT_EQ(d.examples.size(), 4u);
  EXPECT_EQ(d.examples[0].answer_starts[0], 10);  // bytes
  EXPECT_EQ(d.examples[0].text[1].substr(10, 7), "Zürich");
  EXPECT_EQ(d.examples[1].answer_starts[0], 18);
  EXPECT_EQ(d.examples[2].answer_starts[0], -1);  // the byte offset given as if characters: other text there
  EXPECT_EQ(d.examples[3].answer_starts[0], -1);  // runs past the context
  EXPECT_EQ(utf8_offset("Café", 4), 5);
  EXPECT_EQ(utf8_offset("Café", 5), -1);
  EXPECT_EQ(utf8_offset("", 0), 0);
}

// Training skips questions whose answer is not at its answer_start, counting them (as BERT's
// run_squad.py does), and refuses a file where no answer is.
TEST(SquadReader, MisplacedTrainingAnswersAreSkippedAndCounted) {
  TempDir t;
  const std::string path = put(t, "s.json",
      R"({"data": [{"paragraphs": [{"context": "Denver won in 2016.", "qas": [)"
      R"({"id": "a", "question": "Who?", "answers": [{"text": "Denver", "answer_start": 0}]},)"
      R"({"id": "b", "question": "When?", "answers": [{"text": "2016", "answer_start": 3}]},)"
      R"({"id": "c", "question": "When?", "answers": [{"text": "2016", "answer_start": 400}]}]}]}]})");
  TaskData d = read_squad(path);
  skip_misplaced_answers(d);
  ASSERT_EQ(d.examples.size(), 1u);
  EXPECT_EQ(d.examples[0].id, "a");
  const std::string none = put(t, "n.json",
      R"({"data": [{"paragraphs": [{"context": "Denver won.", "qas": [)"
      R"({"id": "b", "question": "When?", "answers": [{"text": "2016", "answer_start": 3}]}]}]}]})");
  TaskData n = read_squad(none);
  EXPECT_NE(error_of([&] { skip_misplaced_answers(n); }).find(none + ": none of its 1 training answers matches"),
            std::string::npos);
}

TEST(RaceReader, OneJsonFilePerArticle) {
  TempDir t;
  put(t, "race/dev/high/1.txt",
      R"({"answers": ["B", "D"], "options": [["a", "b", "c", "d"], ["e", "f", "g", "h"]], "questions": ["Q1?", "The _ is"], "article": "Text.", "id": "high1.txt"})");
  put(t, "race/dev/middle/2.txt",
      R"({"answers": ["A"], "options": [["a", "b", "c", "d"]], "questions": ["Q?"], "article": "More.", "id": "middle2.txt"})");
  const auto d = load_task(t.path.string(), "race", "dev");
  ASSERT_EQ(d.examples.size(), 3u);
  EXPECT_EQ(d.examples[0].label, 1);
  EXPECT_EQ(d.examples[1].label, 3);
  EXPECT_EQ(d.examples[2].id, "middle2.txt-0");
  put(t, "race/test/high/3.txt", R"({"answers": ["E"], "options": [["a", "b", "c", "d"]], "questions": ["Q?"], "article": "A."})");
  EXPECT_NE(error_of([&] { load_task(t.path.string(), "race", "test"); }).find("answer 'E' is not one of A, B, C, D"),
            std::string::npos);
}

// The real files: counts equal the published split sizes (../shared/data/README.md).
TEST(TaskReaders, RealFilesMatchPublishedCounts) {
  const std::string root = std::string(THX_SOURCE_DIR) + "/../shared/data";
  if (!fs::exists(root + "/glue")) GTEST_SKIP() << root << " is absent: real-data reader counts skipped";
  const std::vector<std::tuple<std::string, std::string, size_t>> want = {
      {"cola", "train", 8551}, {"cola", "dev", 1043}, {"mrpc", "train", 3668}, {"mrpc", "dev", 408},
      {"rte", "train", 2490},  {"rte", "dev", 277},   {"sst2", "train", 67349}, {"sst2", "dev", 872},
      {"stsb", "train", 5749}, {"stsb", "dev", 1500}, {"wnli", "train", 635},   {"wnli", "dev", 71},
      {"qnli", "dev", 5463},   {"qnli", "test", 5463}, {"squad11", "dev", 10570}, {"squad11", "train", 87599},
      {"race", "dev", 4887},   {"race", "test", 4934}};
  for (const auto& [task, split, n] : want) {
    const TaskData d = load_task(root, task, split);
    EXPECT_EQ(d.examples.size(), n) << task << " " << split;
    EXPECT_EQ(d.skipped, 0);
  }
  // SuperGLUE: only train splits are offline.
  for (const auto& [task, n] : std::vector<std::pair<std::string, size_t>>{{"cb", 250}, {"copa", 400}, {"rte_sg", 2490}, {"wsc", 554}})
    EXPECT_EQ(read_superglue(task, task_path(root, task, "train")).examples.size(), n) << task;
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx
