// `thx predict` as a user runs it: a fine-tuned ALBERT's and T5's predictions for lines of text
// equal what `thx eval` wrote for the same examples, row by row; a pretrained T5 fills the
// spans of each line; bad input is one line and exit 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "cli/forked_cli.h"
#include "common/fs.h"
#include "data/tokenizer.h"
#include "eval/eval_fixtures.h"
#include "eval/text2text.h"
#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The dev sentences of the fixture's SST-2, one per line, and their predictions by `thx eval`.
void expect_predict_equals_eval(bool albert) {
  SCOPED_TRACE(albert ? "albert" : "t5");
  FinetuneFixture s;
  make_finetune_fixture(s, albert);
  const std::string ft = s.dir.file("ft");
  RunResult r = fork_thx("--threads 1 finetune --config " + s.config + " --out " + ft +
                        " --set finetune.steps=20 --set finetune.eval_every=20 --set checkpoint.every=20");
  ASSERT_EQ(r.code, 0) << r.out;
  r = fork_thx("--threads 1 eval --config " + s.config + " --set finetune.eval_examples=0 --checkpoint " + ft +
              " --out " + s.dir.file("ev"));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto tsv = split_lines(read_file(s.dir.file("ev/SST-2.tsv")));  // "index\tprediction"
  const auto dev = split_lines(read_file(s.dir.file("data/glue/SST-2/dev.tsv")));  // "sentence\tlabel"
  ASSERT_EQ(tsv.size(), dev.size());
  std::string input;
  for (size_t i = 1; i < dev.size(); ++i) input += dev[i].substr(0, dev[i].find('\t')) + "\n";
  const std::string in = s.dir.write("sentences.txt", input);
  r = fork_thx("--threads 1 --log-level warn predict --config " + s.config + " --task sst2 --checkpoint " + ft +
              " --input " + in);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto got = split_lines(r.out);
  ASSERT_EQ(got.size(), dev.size() - 1) << r.out;
  for (size_t i = 0; i < got.size(); ++i) {
    const std::string want = tsv[i + 1].substr(tsv[i + 1].find('\t') + 1);
    const std::string label = got[i].substr(0, got[i].find('\t'));
    EXPECT_EQ(label, want) << "line " << i + 1 << ": " << got[i];
    if (!albert) {  // then the decoded answer: the label's name when it names one
      const std::string answer = got[i].substr(got[i].find('\t') + 1);
      const int l = text_to_label(task_spec("sst2"), answer);
      if (l >= 0) EXPECT_EQ(std::to_string(l), want) << answer;
    }
  }
  // --out writes the same lines to a file.
  r = fork_thx("--log-level warn predict --config " + s.config + " --task sst2 --checkpoint " + ft + " --input " + in +
              " --out " + s.dir.file("p.txt"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(split_lines(read_file(s.dir.file("p.txt"))), got);
  if (albert) {  // bad input: one line, exit 2, nothing written
    const std::string two = s.dir.write("two.txt", "a\tb\n");
    r = fork_thx("predict --config " + s.config + " --task sst2 --checkpoint " + ft + " --input " + two + " --out " +
                s.dir.file("q.txt"));
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(r.out, "thx: error: " + two + ":1: task sst2 takes 1 tab-separated field (sentence), this line has 2\n");
    EXPECT_FALSE(std::filesystem::exists(s.dir.file("q.txt")));
    r = fork_thx("predict --config " + s.config + " --task copa --checkpoint " + ft + " --input " + two);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("predict --task copa: its examples need more than text fields; thx predict takes cola, "),
              std::string::npos) << r.out;
  } else {  // the pretrained T5 fills the spans of each line
    const std::string spans = s.dir.write("spans.txt", "the model <extra_id_0> to each other\nheads <extra_id_0>\n");
    r = fork_thx("--log-level warn predict --checkpoint " + s.dir.file("pretrained") + " --input " + spans +
                " --max-length 6");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(split_lines(r.out).size(), 2u) << r.out;
    r = fork_thx("predict --checkpoint " + s.dir.file("pretrained") + " --input " + spans + " --task sst2");
    EXPECT_EQ(r.code, 2) << r.out;
    r = fork_thx("predict --checkpoint " + s.dir.file("pretrained") + " --input " + spans + " --out " +
                s.dir.file("missing/p.txt"));
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(r.out, "thx: error: --out " + s.dir.file("missing/p.txt") + ": directory " + s.dir.file("missing") +
                         " does not exist\n");
    const std::string past = s.dir.write("past.txt", "fine <extra_id_99>\nheads <extra_id_100> here\n");
    r = fork_thx("predict --checkpoint " + s.dir.file("pretrained") + " --input " + past);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(r.out, "thx: error: " + past + ":2: <extra_id_100>: sentinels go from 0 to 99\n");
    // A line that is not UTF-8 is refused (as Python's open() would); a line longer than the
    // pretraining inputs is cut, and the user told which.
    const std::string bad = s.dir.write("bad.txt", "fine <extra_id_0>\nheads \xff\xfe <extra_id_0>\n");
    r = fork_thx("predict --checkpoint " + s.dir.file("pretrained") + " --input " + bad);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(r.out, "thx: error: " + bad + ":2: not valid UTF-8; thx predict reads UTF-8 text\n");
    std::string words;
    for (int i = 0; i < 400; ++i) words += "heads talk ";
    const std::string long_line = s.dir.write("long.txt", "fine <extra_id_0>\n" + words + "<extra_id_0>\n");
    r = fork_thx("predict --checkpoint " + s.dir.file("pretrained") + " --input " + long_line + " --max-length 4");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find(long_line + ": 1 line is longer than the "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("cut to its first "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(": line 2 ("), std::string::npos) << r.out;
  }
}

// The fixture's SST-2 fine-tuned for 2 steps with inputs_length `length`, every example read:
// the run's output. `longer(line, split)` says whether a "sentence\tlabel" line is longer than
// fits, as the test counts it with the tokenizer; `counts` gets how many in train and dev.
RunResult finetune_with_cuts(const FinetuneFixture& s, int64_t length,
                             const std::function<bool(const std::string&, const std::string&)>& longer,
                             std::pair<int64_t, int64_t>* counts, const std::string& more_sets = "") {
  for (const char* split : {"train", "dev"}) {
    const auto lines = split_lines(read_file(s.dir.file(std::string("data/glue/SST-2/") + split + ".tsv")));
    int64_t n = 0;
    for (size_t i = 1; i < lines.size(); ++i) n += longer(lines[i], split);
    (std::string(split) == "train" ? counts->first : counts->second) = n;
  }
  EXPECT_GT(counts->first, 0) << "no input this long: the test would not test";
  EXPECT_LT(counts->first, 400) << "every input this long: the test would not tell cut from all";
  return fork_thx("--threads 1 finetune --config " + s.config + " --out " + s.dir.file("ft") +
                 " --set finetune.inputs_length=" + std::to_string(length) +
                 " --set finetune.steps=2 --set finetune.eval_every=2 --set checkpoint.every=2"
                 " --set finetune.max_train_examples=0 --set finetune.eval_examples=0" + more_sets);
}

// T5 fine-tuning counts the inputs (and targets) it cuts to finetune.inputs_length, for the
// training pairs and each dev set, against the tokenizer's own count of each line here. Two
// tasks in one run: SST-2, and CoLA on the same sentences, whose targets "acceptable" and
// "unacceptable" differ in length, so that a targets_length cuts one and not the other.
TEST(FinetuneCuts, ATasksInputsLongerThanInputsLengthAreCounted) {
  FinetuneFixture s;
  make_finetune_fixture(s, false);
  const Tokenizer tok(s.dir.file("tiny.model"));
  const auto& sst2 = target_names(task_spec("sst2"));  // "negative", "positive"
  const auto& cola = target_names(task_spec("cola"));  // "unacceptable", "acceptable"
  const int64_t targets_length = int64_t(tok.encode(cola.at(1)).size()) + 1;  // (EOS one of its tokens)
  ASSERT_GT(int64_t(tok.encode(cola.at(0)).size()), targets_length - 1) << "no target would be cut";
  // CoLA's files: source, label, original label, sentence; no header.
  std::filesystem::create_directories(s.dir.file("data/glue/CoLA"));
  int64_t cola_inputs = 0, cola_targets = 0, cola_dev = 0;
  for (const std::string split : {"train", "dev"}) {
    const auto lines = split_lines(read_file(s.dir.file("data/glue/SST-2/" + split + ".tsv")));
    std::string tsv;
    for (size_t i = 1; i < lines.size() && i <= 60; ++i) {
      TaskExample e;
      e.text = {lines[i].substr(0, lines[i].find('\t'))};
      const int label = std::stoi(lines[i].substr(lines[i].find('\t') + 1));
      tsv += fmt::format("src\t{}\t\t{}\n", label, e.text[0]);
      const bool longer = int64_t(tok.encode(t5_input(task_spec("cola"), e)).size()) > 32 - 1;
      if (split == "dev") {
        cola_dev += longer;
        continue;
      }
      cola_inputs += longer;
      cola_targets += int64_t(tok.encode(cola.at(size_t(label))).size()) > targets_length - 1;
    }
    s.dir.write("data/glue/CoLA/" + split + ".tsv", tsv);
  }
  EXPECT_GT(cola_targets, 0);
  EXPECT_LT(cola_targets, 60);
  int64_t sst2_targets = 0;
  std::pair<int64_t, int64_t> n;
  const RunResult r = finetune_with_cuts(s, 32, [&](const std::string& line, const std::string& split) {
    TaskExample e;
    e.text = {line.substr(0, line.find('\t'))};
    const int label = std::stoi(line.substr(line.find('\t') + 1));
    if (split == "train") sst2_targets += int64_t(tok.encode(sst2.at(size_t(label))).size()) > targets_length - 1;
    return int64_t(tok.encode(t5_input(task_spec("sst2"), e)).size()) > 32 - 1;
  }, &n, " --set finetune.tasks=[sst2,cola] --set finetune.targets_length=" + std::to_string(targets_length));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto pairs_line = [&](const std::string& task, int64_t pairs, int64_t inputs, int64_t targets) {
    return fmt::format("{}: of {} training pairs, {} ({:.1f}%) had inputs longer than finetune.inputs_length 32 "
                       "and {} ({:.1f}%) targets longer than finetune.targets_length {} (EOS counted): cut to fit",
                       task, pairs, inputs, 100.0 * inputs / pairs, targets, 100.0 * targets / pairs, targets_length);
  };
  EXPECT_NE(r.out.find(pairs_line("sst2", 400, n.first, sst2_targets)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(pairs_line("cola", 60, cola_inputs, cola_targets)), std::string::npos) << r.out;
  for (const auto& [task, dir, cut, of] : {std::tuple{"sst2", "SST-2", n.second, 100}, {"cola", "CoLA", cola_dev, 60}})
    EXPECT_NE(r.out.find(fmt::format("{} ({}): {} of its {} inputs ({:.1f}%) are longer than finetune.inputs_length 32",
                                     task, s.dir.file(std::string("data/glue/") + dir + "/dev.tsv"), cut, of,
                                     100.0 * double(cut) / of)),
              std::string::npos) << task << "\n" << r.out;
}

// ALBERT's fine-tuning counts the examples whose [CLS] text [SEP] it cuts to inputs_length.
TEST(FinetuneCuts, AnEncodersExamplesLongerThanInputsLengthAreCounted) {
  FinetuneFixture s;
  make_finetune_fixture(s, true);
  const Tokenizer tok(s.dir.file("tiny.model"));
  std::pair<int64_t, int64_t> n;
  const RunResult r = finetune_with_cuts(s, 16, [&](const std::string& line, const std::string&) {
    return int64_t(tok.encode(line.substr(0, line.find('\t'))).size()) > 16 - 2;
  }, &n);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string tail = " are longer than finetune.inputs_length 16 ([CLS] and [SEP] counted): cut to fit";
  EXPECT_NE(r.out.find(fmt::format("sst2: {} of 400 training examples ({:.1f}%){}", n.first, n.first / 4.0, tail)),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find(fmt::format("sst2: {} of 100 dev examples ({:.1f}%){}", n.second, double(n.second), tail)),
            std::string::npos) << r.out;
}

// Two tasks in one ALBERT run, each with its own cut: SQuAD's questions past
// finetune.max_query_length (8 in the fixture), RACE's examples past inputs_length or with an
// option past half of it. The counts are the test's own, from the tokenizer.
TEST(FinetuneCuts, SquadsQuestionsAndRacesOptionsAreCountedInOneRun) {
  FinetuneFixture s;
  make_finetune_fixture(s, true);
  const Tokenizer tok(s.dir.file("tiny.model"));
  const int64_t length = 32, query = 8;
  const std::vector<std::string> questions = {"Who?", "Who won the game that the heads talked about all day?",
                                              "Why?", "Which of the talking heads won it?"};
  const std::vector<std::string> options = {"a", "b", "the long story of the heads that talked all day", "c"};
  const std::string article = "Heads won.";
  auto squad = [&](int examples, int64_t* cut) {
    std::string qas;
    for (int i = 0; i < examples; ++i) {
      const std::string& q = questions[size_t(i) % questions.size()];
      *cut += int64_t(tok.encode(q).size()) > query;
      qas += fmt::format(R"({}{{"id": "q{}", "question": "{}", "answers": [{{"text": "Heads", "answer_start": 0}}]}})",
                         i ? ", " : "", i, q);
    }
    return fmt::format(R"({{"version": "1.1", "data": [{{"title": "T", "paragraphs": )"
                       R"([{{"context": "{}", "qas": [{}]}}]}}]}})", article, qas);
  };
  // RACE: one file per article; an example is a question with its four options.
  auto race = [&](const std::string& split, int files, int64_t* cut) {
    for (int i = 0; i < files; ++i) {
      std::string opts;
      bool any = false;
      for (int k = 0; k < 4; ++k) {
        // Every other file's options are all short: some examples are not cut.
        const std::string& o = i % 2 ? options[size_t(k) % 2] : options[size_t(i + k) % options.size()];
        const size_t b = tok.encode(questions[0] + " " + o).size();  // the option side: question and option
        any = any || b > size_t(length / 2) ||
              tok.encode(article).size() + std::min(b, size_t(length / 2)) > size_t(length - 3);
        opts += fmt::format(R"({}"{}")", k ? ", " : "", o);
      }
      *cut += any;
      s.dir.write(fmt::format("data/race/{}/high/{}.txt", split, i),
                  fmt::format(R"({{"article": "{}", "questions": ["{}"], "options": [[{}]], )"
                              R"("answers": ["A"], "id": "{}"}})", article, questions[0], opts, i));
    }
  };
  int64_t squad_train = 0, squad_dev = 0, race_train = 0, race_dev = 0;
  std::filesystem::create_directories(s.dir.file("data/squad/v1.1"));
  for (const char* split : {"train", "dev"})
    std::filesystem::create_directories(s.dir.file(std::string("data/race/") + split + "/high"));
  s.dir.write("data/squad/v1.1/train-v1.1.json", squad(20, &squad_train));
  s.dir.write("data/squad/v1.1/dev-v1.1.json", squad(10, &squad_dev));
  race("train", 12, &race_train);
  race("dev", 6, &race_dev);
  for (const auto& [n, of] : {std::pair{squad_train, 20}, {squad_dev, 10}, {race_train, 12}, {race_dev, 6}}) {
    EXPECT_GT(n, 0) << "nothing cut: the test would not test";
    EXPECT_LT(n, of) << "everything cut: the test would not tell cut from all";
  }
  const RunResult r = fork_thx("--threads 1 finetune --config " + s.config + " --out " + s.dir.file("ft2") +
                              " --set finetune.tasks=[squad11,race] --set finetune.inputs_length=32"
                              " --set finetune.steps=2 --set finetune.eval_every=2 --set checkpoint.every=2"
                              " --set finetune.max_train_examples=0 --set finetune.eval_examples=0");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string squad_why = ") have questions longer than finetune.max_query_length 8: cut to fit";
  const std::string race_why = ") are longer than finetune.inputs_length 32 ([CLS] and [SEP] counted) or have an "
                               "option longer than half of it, 16: cut to fit";
  for (const auto& [line, why] : std::vector<std::pair<std::string, std::string>>{
           {fmt::format("squad11: {} of 20 training examples ({:.1f}%", squad_train, squad_train * 5.0), squad_why},
           {fmt::format("squad11: {} of 10 dev examples ({:.1f}%", squad_dev, squad_dev * 10.0), squad_why},
           {fmt::format("race: {} of 12 training examples ({:.1f}%", race_train, race_train * 100.0 / 12), race_why},
           {fmt::format("race: {} of 6 dev examples ({:.1f}%", race_dev, race_dev * 100.0 / 6), race_why}})
    EXPECT_NE(r.out.find(line + why), std::string::npos) << line << why << "\n" << r.out;
}

TEST(Predict, AFineTunedAlbertPredictsWhatEvalWrote) { expect_predict_equals_eval(true); }
TEST(Predict, AFineTunedT5PredictsWhatEvalWroteAndAPretrainedOneFillsSpans) { expect_predict_equals_eval(false); }

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
