// `thx predict` as a user runs it: a fine-tuned ALBERT's and T5's predictions for lines of text
// equal what `thx eval` wrote for the same examples, row by row; a pretrained T5 fills the
// spans of each line; bad input is one line and exit 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

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
  RunResult r = run_thx("--threads 1 finetune --config " + s.config + " --out " + ft +
                        " --set finetune.steps=20 --set finetune.eval_every=20 --set checkpoint.every=20");
  ASSERT_EQ(r.code, 0) << r.out;
  r = run_thx("--threads 1 eval --config " + s.config + " --set finetune.eval_examples=0 --checkpoint " + ft +
              " --out " + s.dir.file("ev"));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto tsv = split_lines(read_file(s.dir.file("ev/SST-2.tsv")));  // "index\tprediction"
  const auto dev = split_lines(read_file(s.dir.file("data/glue/SST-2/dev.tsv")));  // "sentence\tlabel"
  ASSERT_EQ(tsv.size(), dev.size());
  std::string input;
  for (size_t i = 1; i < dev.size(); ++i) input += dev[i].substr(0, dev[i].find('\t')) + "\n";
  const std::string in = s.dir.write("sentences.txt", input);
  r = run_thx("--threads 1 --log-level warn predict --config " + s.config + " --task sst2 --checkpoint " + ft +
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
  r = run_thx("--log-level warn predict --config " + s.config + " --task sst2 --checkpoint " + ft + " --input " + in +
              " --out " + s.dir.file("p.txt"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(split_lines(read_file(s.dir.file("p.txt"))), got);
  if (albert) {  // bad input: one line, exit 2, nothing written
    const std::string two = s.dir.write("two.txt", "a\tb\n");
    r = run_thx("predict --config " + s.config + " --task sst2 --checkpoint " + ft + " --input " + two + " --out " +
                s.dir.file("q.txt"));
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(r.out, "thx: error: " + two + ":1: task sst2 takes 1 tab-separated field (sentence), this line has 2\n");
    EXPECT_FALSE(std::filesystem::exists(s.dir.file("q.txt")));
    r = run_thx("predict --config " + s.config + " --task copa --checkpoint " + ft + " --input " + two);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("predict --task copa: its examples need more than text fields; thx predict takes cola, "),
              std::string::npos) << r.out;
  } else {  // the pretrained T5 fills the spans of each line
    const std::string spans = s.dir.write("spans.txt", "the model <extra_id_0> to each other\nheads <extra_id_0>\n");
    r = run_thx("--log-level warn predict --checkpoint " + s.dir.file("pretrained") + " --input " + spans +
                " --max-length 6");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(split_lines(r.out).size(), 2u) << r.out;
    r = run_thx("predict --checkpoint " + s.dir.file("pretrained") + " --input " + spans + " --task sst2");
    EXPECT_EQ(r.code, 2) << r.out;
    r = run_thx("predict --checkpoint " + s.dir.file("pretrained") + " --input " + spans + " --out " +
                s.dir.file("missing/p.txt"));
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(r.out, "thx: error: --out " + s.dir.file("missing/p.txt") + ": directory " + s.dir.file("missing") +
                         " does not exist\n");
    const std::string past = s.dir.write("past.txt", "fine <extra_id_99>\nheads <extra_id_100> here\n");
    r = run_thx("predict --checkpoint " + s.dir.file("pretrained") + " --input " + past);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(r.out, "thx: error: " + past + ":2: <extra_id_100>: sentinels go from 0 to 99\n");
    // A line that is not UTF-8 is refused (as Python's open() would); a line longer than the
    // pretraining inputs is cut, and the user told which.
    const std::string bad = s.dir.write("bad.txt", "fine <extra_id_0>\nheads \xff\xfe <extra_id_0>\n");
    r = run_thx("predict --checkpoint " + s.dir.file("pretrained") + " --input " + bad);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(r.out, "thx: error: " + bad + ":2: not valid UTF-8; thx predict reads UTF-8 text\n");
    std::string words;
    for (int i = 0; i < 400; ++i) words += "heads talk ";
    const std::string long_line = s.dir.write("long.txt", "fine <extra_id_0>\n" + words + "<extra_id_0>\n");
    r = run_thx("predict --checkpoint " + s.dir.file("pretrained") + " --input " + long_line + " --max-length 4");
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
                             std::pair<int64_t, int64_t>* counts) {
  for (const char* split : {"train", "dev"}) {
    const auto lines = split_lines(read_file(s.dir.file(std::string("data/glue/SST-2/") + split + ".tsv")));
    int64_t n = 0;
    for (size_t i = 1; i < lines.size(); ++i) n += longer(lines[i], split);
    (std::string(split) == "train" ? counts->first : counts->second) = n;
  }
  EXPECT_GT(counts->first, 0) << "no input this long: the test would not test";
  EXPECT_LT(counts->first, 400) << "every input this long: the test would not tell cut from all";
  return run_thx("--threads 1 finetune --config " + s.config + " --out " + s.dir.file("ft") +
                 " --set finetune.inputs_length=" + std::to_string(length) +
                 " --set finetune.steps=2 --set finetune.eval_every=2 --set checkpoint.every=2"
                 " --set finetune.max_train_examples=0 --set finetune.eval_examples=0");
}

// T5 fine-tuning counts the inputs (and targets) it cuts to finetune.inputs_length, for the
// training pairs and each dev set, against the tokenizer's own count of each line here.
TEST(FinetuneCuts, ATasksInputsLongerThanInputsLengthAreCounted) {
  FinetuneFixture s;
  make_finetune_fixture(s, false);
  const Tokenizer tok(s.dir.file("tiny.model"));
  const auto& names = target_names(task_spec("sst2"));  // the targets: "negative", "positive"
  int64_t targets = 0;
  std::pair<int64_t, int64_t> n;
  const RunResult r = finetune_with_cuts(s, 32, [&](const std::string& line, const std::string& split) {
    TaskExample e;
    e.text = {line.substr(0, line.find('\t'))};
    const int label = std::stoi(line.substr(line.find('\t') + 1));
    if (split == "train") targets += int64_t(tok.encode(names.at(size_t(label))).size()) > 8 - 1;
    return int64_t(tok.encode(t5_input(task_spec("sst2"), e)).size()) > 32 - 1;
  }, &n);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(fmt::format("sst2: of 400 training pairs, {} ({:.1f}%) had inputs longer than "
                                   "finetune.inputs_length 32 and {} ({:.1f}%) targets longer than "
                                   "finetune.targets_length 8 (EOS counted): cut to fit",
                                   n.first, n.first / 4.0, targets, targets / 4.0)),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find(fmt::format("{} of its 100 inputs ({:.1f}%) are longer than finetune.inputs_length 32",
                                   n.second, double(n.second))),
            std::string::npos) << r.out;
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

TEST(Predict, AFineTunedAlbertPredictsWhatEvalWrote) { expect_predict_equals_eval(true); }
TEST(Predict, AFineTunedT5PredictsWhatEvalWroteAndAPretrainedOneFillsSpans) { expect_predict_equals_eval(false); }

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
