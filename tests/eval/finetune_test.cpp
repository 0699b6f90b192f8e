// Fine-tuning pieces: text-to-text formats round-trip, SQuAD window merging, greedy decoding
// with the incremental cache against full recomputation, and tiny models that fine-tune above
// chance on a tiny task through run_finetune (the code `thx finetune` runs).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "common/config_tree.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/schema.h"
#include "eval/finetune.h"
#include "data/tokenizer.h"
#include "eval/text2text.h"
#include "models/encoder.h"
#include "models/t5.h"
#include "training/checkpoint.h"
#include "eval/eval_fixtures.h"
#include "training/training_fixtures.h"

namespace thx {
namespace {
namespace THX_FILE_ID {
namespace fs = std::filesystem;
using test::TempDir;
using json = nlohmann::json;

TEST(TextToText, FormatsAsT5AndRoundTrips) {
  TaskExample mnli;
  mnli.text = {"The cat sat.", "A cat sat."};
  mnli.label = 2;
  const TaskSpec& m = task_spec("mnli");
  EXPECT_EQ(t5_input(m, mnli), "mnli hypothesis: A cat sat. premise: The cat sat.");
  const auto pairs = t5_training_pairs(m, mnli);
  ASSERT_EQ(pairs.size(), 1u);
  EXPECT_EQ(pairs[0].target, "contradiction");
  TaskExample sq;
  sq.text = {"Who won?", "Denver won."};
  sq.answers = {"Denver"};
  EXPECT_EQ(t5_input(task_spec("squad11"), sq), "question: Who won? context: Denver won.");
  EXPECT_EQ(t5_training_pairs(task_spec("squad11"), sq).at(0).target, "Denver");
  // Every class of every classification task maps to its target text and back.
  for (const auto& spec : task_specs()) {
    if (spec.kind != TaskKind::classification && spec.name != "copa") continue;
    for (int l = 0; l < int(target_names(spec).size()); ++l) {
      TaskExample e;
      e.text = {"a", "b", "c"}, e.options = {"a", "b"}, e.word = "cause", e.label = l;
      const auto p = t5_training_pairs(spec, e);
      ASSERT_EQ(p.size(), 1u) << spec.name;
      EXPECT_EQ(text_to_label(spec, p[0].target), l) << spec.name;
      EXPECT_FALSE(p[0].input.empty());
    }
    EXPECT_EQ(text_to_label(spec, "no such label"), -1) << spec.name;  // a miss
  }
  EXPECT_EQ(target_names(task_spec("sst2")), (std::vector<std::string>{"negative", "positive"}));
  // STS-B: rounded to 0.2 with one decimal, parsed back; not a number -> -1.
  EXPECT_EQ(score_to_text(3.78), "3.8");
  EXPECT_EQ(score_to_text(0.5), "0.4");  // tf.round(2.5) = 2: half to even
  EXPECT_EQ(score_to_text(1.5), "1.6");  // 7.5 -> 8
  for (int k = 0; k <= 25; ++k) EXPECT_NEAR(text_to_score(score_to_text(k * 0.2)), k * 0.2, 1e-9);
  EXPECT_EQ(text_to_score("high"), -1.0);
  // Unlabeled (test) examples give no training pairs.
  TaskExample unlabeled;
  unlabeled.text = {"x"};
  EXPECT_TRUE(t5_training_pairs(task_spec("sst2"), unlabeled).empty());
}

TEST(SpanHead, WindowsAndMaximumContext) {
  // 10 document tokens, room 4, stride 2: windows start at 0, 2, 4, 6; the last reaches the end.
  const auto w = doc_windows(10, 4, 2);
  ASSERT_EQ(w.size(), 4u);
  EXPECT_EQ(w[3], (std::pair<int64_t, int64_t>{6, 4}));
  // Token 3: window 0 gives min(3, 0) = 0, window 1 min(1, 2) = 1 -> window 1. Token 2: window
  // 0 min(2, 1) = 1, window 1 min(0, 3) = 0 -> window 0.
  EXPECT_FALSE(is_max_context(w, 0, 3));
  EXPECT_TRUE(is_max_context(w, 1, 3));
  EXPECT_TRUE(is_max_context(w, 0, 2));
  EXPECT_FALSE(is_max_context(w, 1, 2));
  // Every token has exactly one window of maximum context.
  for (int64_t t = 0; t < 10; ++t) {
    int owners = 0;
    for (size_t i = 0; i < w.size(); ++i) owners += is_max_context(w, i, t);
    EXPECT_EQ(owners, 1) << t;
  }
  // A stride longer than the room steps by the room, so that no token is skipped (BERT's
  // min(length, doc_stride)): 10 tokens, room 3, stride 5.
  EXPECT_EQ(doc_windows(10, 3, 5), (std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {3, 3}, {6, 3}, {9, 1}}));
  // Equal scores: the first window wins. 5 tokens, room 4, stride 1: token 2 has min(2, 1) = 1 in
  // window 0 and min(1, 2) = 1 in window 1.
  const auto ties = doc_windows(5, 4, 1);
  EXPECT_TRUE(is_max_context(ties, 0, 2));
  EXPECT_FALSE(is_max_context(ties, 1, 2));
  // The length's 0.01 per token counts: 350 tokens, room 300, stride 250 give windows of 300 and
  // 100 tokens; token 275 has min(275, 24) + 3 = 27 in the first and min(25, 74) + 1 = 26 in the
  // second (without the length term 24 against 25, the second).
  const auto wide = doc_windows(350, 300, 250);
  ASSERT_EQ(wide, (std::vector<std::pair<int64_t, int64_t>>{{0, 300}, {250, 100}}));
  EXPECT_TRUE(is_max_context(wide, 0, 275));
  EXPECT_FALSE(is_max_context(wide, 1, 275));
}

TEST(SpanHead, MergesWindowsByMaximumContext) {
  // Two windows over words 0..5 (one token per word) after [CLS] q [SEP] (3 positions).
  auto window = [](int64_t first_word, int64_t words, const std::vector<bool>& max_ctx) {
    SpanWindow s;
    s.token_to_word = {-1, -1, -1};
    s.max_context = {false, false, false};
    for (int64_t i = 0; i < words; ++i) s.token_to_word.push_back(first_word + i), s.max_context.push_back(max_ctx[i]);
    s.token_to_word.push_back(-1), s.max_context.push_back(false);
    s.start_logits.assign(s.token_to_word.size(), 0.f);
    s.end_logits.assign(s.token_to_word.size(), 0.f);
    return s;
  };
  SpanWindow a = window(0, 4, {true, true, true, false}), b = window(2, 4, {false, true, true, true});
  // The highest start overall is word 3 in window a, where word 3 does not have its maximum
  // context: it must lose to word 3 in window b (a lower logit but the right window).
  a.start_logits[3 + 3] = 9.f, a.end_logits[3 + 3] = 9.f;
  b.start_logits[3 + 1] = 5.f, b.end_logits[3 + 2] = 5.f;   // words 3..4 in window b
  SpanAnswer s = best_span({a, b}, 20, 30);
  EXPECT_EQ(s.start_word, 3);
  EXPECT_EQ(s.end_word, 4);
  EXPECT_DOUBLE_EQ(s.score, 10.0);
  // The no-answer score is the smallest [CLS] score over windows.
  a.start_logits[0] = 1.f, a.end_logits[0] = 1.f, b.start_logits[0] = -1.f;
  EXPECT_DOUBLE_EQ(best_span({a, b}, 20, 30).null_score, -1.0);
  EXPECT_DOUBLE_EQ(best_span({b, a}, 20, 30).null_score, -1.0);  // the smallest, not the last window's
  // max_answer_length 1 excludes the two-word span; end before start never counts.
  s = best_span({a, b}, 20, 1);
  EXPECT_EQ(s.end_word - s.start_word, 0);
  b.start_logits[3 + 2] = 20.f, b.end_logits[3 + 1] = 20.f;  // start word 4, end word 3
  s = best_span({b}, 20, 30);
  EXPECT_LE(s.start_word, s.end_word);
}

TEST(GreedyDecode, IncrementalCacheEqualsFullRecomputation) {
  ModelConfig mc;
  mc.d_model = 24, mc.d_ff = 32, mc.encoder_layers = 2, mc.decoder_layers = 2;
  mc.relative_buckets = 8, mc.relative_max_distance = 16;
  for (const char* variant : {"multi_head", "talking_heads", "general_bilinear"}) {
    AttentionConfig a;
    a.variant = variant, a.h = 4;
    AttentionConfig dyn = a;
    if (std::string(variant) == "talking_heads") dyn.dynamic = {"X_l", "M_w"};
    torch::manual_seed(3);
    T5 model(mc, T5Attention{a, dyn, a}, 40);
    model->eval();
    torch::Tensor inputs = torch::randint(2, 40, {3, 9});
    inputs[2].narrow(0, 6, 3).fill_(0);  // padding
    const int64_t L = 7;
    int64_t steps = 0;
    const torch::Tensor fast = model->greedy_decode(inputs, L, /*eos=*/1, [&](int64_t s) { EXPECT_EQ(s, steps++); });
    EXPECT_EQ(steps, fast.size(1)) << variant;  // a call after each step taken
    // Reference: the whole decoder rerun on the growing prefix, argmax of the last position.
    torch::NoGradGuard g;
    torch::Tensor prefix = torch::zeros({3, 1}, torch::kInt64);
    torch::Tensor slow = torch::zeros({3, L}, torch::kInt64);
    torch::Tensor done = torch::zeros({3}, torch::kBool);
    for (int64_t s = 0; s < L; ++s) {
      const torch::Tensor next = model->logits(inputs, prefix).select(1, s).argmax(-1);
      slow.select(1, s).copy_(next.masked_fill(done, 0));
      done = done | (next == 1);
      prefix = torch::cat({prefix, next.view({3, 1})}, 1);
    }
    // It stops when every row has ended (no column of only padding is allocated or returned).
    ASSERT_LE(fast.size(1), L) << variant;
    EXPECT_TRUE(torch::equal(fast, slow.narrow(1, 0, fast.size(1)))) << variant << "\n" << fast << "\n" << slow;
    EXPECT_TRUE(slow.narrow(1, fast.size(1), L - fast.size(1)).eq(0).all().item<bool>()) << variant;
  }
  // Every row ended at its first step: one column; a max_length far past memory is not allocated.
  torch::manual_seed(3);
  AttentionConfig mh;
  mh.variant = "multi_head", mh.h = 4;
  T5 model(mc, T5Attention{mh, mh, mh}, 40);
  model->eval();
  torch::NoGradGuard g;
  const torch::Tensor inputs = torch::randint(2, 40, {1, 5});
  const torch::Tensor first = model->logits(inputs, torch::zeros({1, 1}, torch::kInt64)).select(1, 0).argmax(-1);
  const torch::Tensor one = model->greedy_decode(inputs, int64_t(1) << 40, /*eos=*/first.item<int64_t>());  // [1,1]
  EXPECT_TRUE(torch::equal(one, first.view({1, 1}))) << one;
}

double best_accuracy(const std::string& out) {
  std::ifstream in(out + "/sst2.json");
  const json j = json::parse(in);
  EXPECT_EQ(j["examples"], 100);
  EXPECT_EQ(j["protocol"].get<std::string>().find("best"), 0u);
  return j["metrics"]["accuracy"];
}

// A randomly initialised tiny ALBERT standing in for a pretrained one, and a fine-tuning config
// (AdamW at a constant 3e-3) on t's data/ with it; each test sets its tasks and lengths.
struct TinyAlbert {
  Pretrained p;
  FinetuneRunConfig c;
};
TinyAlbert tiny_albert(const TempDir& t, int64_t max_positions = 32) {
  TinyAlbert a;
  a.p.config = test::tiny_albert_pretrain("", 1);
  a.p.config.model.max_positions = max_positions;
  finish(a.p.config);
  a.p.path = "in-memory";
  torch::manual_seed(1);
  const std::string tok = test::tiny_tokenizer(t, 64, TokenizerConvention::albert);
  EncoderModel m(a.p.config.model, a.p.config.attention.encoder_self, 64, false);
  for (const auto& [k, v] : m->named_parameters_by_path()) a.p.checkpoint.params[k] = v.detach().clone();
  a.c.finetune.pretrained = "in-memory", a.c.finetune.tokenizer = tok, a.c.finetune.data = t.file("data");
  a.c.optimizer.name = "adamw", a.c.optimizer.schedule = "constant", a.c.optimizer.learning_rate = 3e-3;
  return a;
}

TEST(Finetune, TinyAlbertLearnsATinyTaskAboveChance) {
  TempDir t;
  test::write_tiny_sst2(t);
  auto [p, c] = tiny_albert(t);
  c.finetune.tasks = {"sst2"};
  c.finetune.steps = 60, c.finetune.batch_size = 16, c.finetune.inputs_length = 32;
  c.finetune.eval_every = 30, c.finetune.log_every = 30, c.finetune.max_query_length = 8;
  c.finetune.deterministic = true;  // (allowed on the CPU too; its line must reach the log)
  run_finetune(c, p, t.file("out"));
  const double acc = best_accuracy(t.file("out"));
  EXPECT_GT(acc, 80.0) << "chance is 50%";
  // A task head has no nll: its progress lines and records leave it out.
  const std::string log = read_file(t.file("out/finetune.log"));
  EXPECT_NE(log.find("sst2 step 30/60 loss "), std::string::npos) << log;
  // It opens with what was logged before the folder was written: the memory bound, the data's counts.
  EXPECT_NE(log.find("] [finetune] memory: at least "), std::string::npos) << log;
  EXPECT_NE(log.find("] [finetune] sst2: "), std::string::npos) << log;
  EXPECT_NE(log.find("] [finetune] deterministic algorithms (finetune.deterministic): each step repeats to the bit "
                     "on " + test::run_device().str() + "\n"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find(" nll "), std::string::npos) << log;
  EXPECT_EQ(read_file(t.file("out/metrics.jsonl")).find("\"nll\""), std::string::npos);
  // The predictions file is in GLUE's submission layout, one row per dev example.
  std::ifstream tsv(t.file("out/SST-2.tsv"));
  std::string header;
  std::getline(tsv, header);
  EXPECT_EQ(header, "index\tprediction");
  int rows = 0;
  for (std::string line; std::getline(tsv, line);) ++rows;
  EXPECT_EQ(rows, 100);
  // A task whose files are absent (MNLI is not offline here) stops before --out is touched.
  FinetuneRunConfig missing = c;
  missing.finetune.tasks = {"mnli"};
  try {
    run_finetune(missing, p, t.file("never"));
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("not found (task mnli, split train"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(t.file("never")));
  // Results are never overwritten: a second run into the same directory is refused.
  EXPECT_THROW(run_finetune(c, p, t.file("out")), InputError);
  // `thx eval` without fine-tuned parameters for a task stops before --out is touched.
  FinetuneRunConfig other = c;
  other.finetune.tasks = {"sst2"};
  EXPECT_THROW(run_eval(other, p, t.file("nothing-here"), t.file("eval-never")), InputError);
  EXPECT_FALSE(fs::exists(t.file("eval-never")));
  // `thx eval` on the fine-tuned parameters reproduces the final evaluation's score.
  run_eval(c, p, t.file("out"), t.file("eval"));
  std::ifstream in(t.file("eval/sst2.json"));
  const json e = json::parse(in);
  std::ifstream in2(t.file("out/sst2.json"));
  const json f = json::parse(in2);
  EXPECT_DOUBLE_EQ(e["metrics"]["accuracy"].get<double>(), f["history"].back()["metrics"]["accuracy"].get<double>());
  // The reported (best) score is reproducible from a saved file: <task>-best.h5 holds the best
  // step's parameters, sst2.json says which file holds which step, and `thx eval` on the best
  // file gives the reported score exactly.
  ASSERT_TRUE(f.contains("weights")) << f.dump(1);
  EXPECT_EQ(f["weights"]["best"]["file"], "sst2-best.h5");
  EXPECT_EQ(f["weights"]["best"]["step"], f["step"]);
  EXPECT_EQ(f["weights"]["last"]["file"], "sst2.h5");
  EXPECT_EQ(f["weights"]["last"]["step"], 60);
  EXPECT_EQ(load_checkpoint(t.file("out/sst2-best.h5")).step, f["step"].get<int64_t>());
  EXPECT_EQ(load_checkpoint(t.file("out/sst2.h5")).step, 60);
  run_eval(c, p, t.file("out/sst2-best.h5"), t.file("eval-best"));
  std::ifstream in3(t.file("eval-best/sst2.json"));
  EXPECT_DOUBLE_EQ(json::parse(in3)["metrics"]["accuracy"].get<double>(), acc);
}

// The encoder heads against their formulas. After a short fine-tuning run (one evaluation, at
// the last step, so the written predictions come from the saved parameters), every dev example
// is rerun alone (no padding, no batching) from <task>.h5 and scored by hand:
//   pooled = tanh(x[:,0] W_p + b_p); classification argmax(pooled W + b); regression pooled w + b;
//   multiple choice: one score per option ([CLS] article [SEP] question+option [SEP]), argmax.
// The predictions files thx wrote must equal these, row by row.
TEST(EncoderHeads, PredictionsEqualTheHeadFormulas) {
  TempDir t;
  test::write_tiny_sst2(t);
  fs::create_directories(t.file("data/glue/STS-B"));
  for (const char* split : {"train", "dev"}) {
    std::string tsv = "sentence1\tsentence2\tscore\n";
    for (int i = 0; i < 12; ++i) {  // the score counts the "attention"s: learnable, so the scores spread
      std::string a = "the model";
      for (int k = 0; k < i % 6; ++k) a += " attention";
      tsv += fmt::format("{}\theads talk{}\t{}\n", a, i < 6 ? "" : " to", i % 6);  // no two pairs alike: no ties
    }
    std::ofstream(t.file(std::string("data/glue/STS-B/") + split + ".tsv")) << tsv;
  }
  for (const char* split : {"train", "dev"})
    for (int a = 0; a < 3; ++a) {
      fs::create_directories(t.file(fmt::format("data/race/{}/high", split)));
      json art = {{"id", fmt::format("high{}.txt", a)}, {"article", "the model heads talk to each other"}};
      art["questions"] = {"what do heads do", "the heads _ each other"};
      art["options"] = {{"talk", "learn", "model", "softmax"}, {"attention", "to", "other", "the"}};
      art["answers"] = {std::string(1, char('A' + a)), "D"};
      std::ofstream(t.file(fmt::format("data/race/{}/high/{}.txt", split, a))) << art.dump();
    }
  auto [p, c] = tiny_albert(t, 128);  // room for every fixture input: the reference does not cut
  c.finetune.tasks = {"sst2", "stsb", "race"};
  c.finetune.steps = 60, c.finetune.batch_size = 8, c.finetune.inputs_length = 128, c.finetune.eval_batch_size = 5;
  c.finetune.eval_every = 60, c.finetune.log_every = 60;
  run_finetune(c, p, t.file("out"));

  Tokenizer tk(c.finetune.tokenizer);
  const PretrainConfig& pretrained = p.config;  // (clang 14: a lambda cannot name a structured binding)
  auto reference = [&](const std::string& task, const std::string& a, const std::string* b) {
    const Checkpoint ck = load_checkpoint(t.file("out/" + task + ".h5"));
    EncoderModel r(pretrained.model, pretrained.attention.encoder_self, 64, false);
    torch::NoGradGuard g;
    r->eval();
    for (auto& [k, v] : r->named_parameters_by_path()) v.copy_(ck.params.at(k));
    std::vector<int64_t> ids = {Tokenizer::kCls}, types;
    for (int32_t x : tk.encode(a)) ids.push_back(x);
    ids.push_back(Tokenizer::kSep);
    types.assign(ids.size(), 0);
    if (b) {
      for (int32_t x : tk.encode(*b)) ids.push_back(x);
      ids.push_back(Tokenizer::kSep);
      types.resize(ids.size(), 1);
    }
    const auto n = int64_t(ids.size());
    EXPECT_LE(n, 64) << "the run would have cut this input";
    const torch::Tensor x = r->encode(torch::tensor(ids).view({1, n}), torch::tensor(types).view({1, n}));
    const torch::Tensor pooled = torch::tanh(torch::matmul(x.select(1, 0), ck.params.at("pooler/w")) + ck.params.at("pooler/bias"));
    return (torch::matmul(pooled, ck.params.at("heads/" + task + "/w")) + ck.params.at("heads/" + task + "/bias")).view(-1);
  };
  auto lines = [&](const std::string& f) {
    std::ifstream in(t.file(f));
    std::vector<std::string> v;
    for (std::string l; std::getline(in, l);) v.push_back(l.substr(l.find('\t') + 1));
    return std::vector<std::string>(v.begin() + 1, v.end());  // without the header
  };
  // Classification.
  const auto sst = load_task(t.file("data"), "sst2", "dev");
  const auto sst_pred = lines("out/SST-2.tsv");
  ASSERT_EQ(sst_pred.size(), sst.examples.size());
  int correct = 0;
  for (size_t i = 0; i < sst.examples.size(); ++i) {
    const torch::Tensor l = reference("sst2", sst.examples[i].text[0], nullptr);
    ASSERT_EQ(l.numel(), 2);
    const int label = int(l.argmax().item<int64_t>());
    EXPECT_EQ(sst_pred[i], task_spec("sst2").labels[size_t(label)]) << i << " logits " << l;
    correct += label == sst.examples[i].label;
  }
  EXPECT_GT(correct, 80) << "a learned head; a constant one would not test the inputs";
  std::ifstream sj(t.file("out/sst2.json"));
  EXPECT_NEAR(json::parse(sj)["metrics"]["accuracy"].get<double>(), 100.0 * correct / double(sst.examples.size()), 1e-9);
  // Regression: the written score (3 decimals) is pooled w + b; the Pearson r in stsb.json,
  // computed from the unrounded scores, equals the reference's (the scores differ in the 4th
  // decimal only after 6 steps, so this is the check that sees the inputs).
  const auto sts = load_task(t.file("data"), "stsb", "dev");
  const auto sts_pred = lines("out/STS-B.tsv");
  ASSERT_EQ(sts_pred.size(), sts.examples.size());
  std::vector<double> ref_score, gold;
  for (size_t i = 0; i < sts.examples.size(); ++i) {
    const torch::Tensor l = reference("stsb", sts.examples[i].text[0], &sts.examples[i].text[1]);
    ASSERT_EQ(l.numel(), 1);
    EXPECT_NEAR(std::stod(sts_pred[i]), l.item<double>(), 1.5e-3) << i;
    ref_score.push_back(l.item<double>()), gold.push_back(sts.examples[i].score);
  }
  const auto spread = std::minmax_element(ref_score.begin(), ref_score.end());
  EXPECT_GT(*spread.second - *spread.first, 0.5) << "near-constant scores would not test the inputs";
  std::ifstream stj(t.file("out/stsb.json"));
  const json sts_metrics = json::parse(stj)["metrics"];
  EXPECT_NEAR(sts_metrics["pearson"].get<double>(), 100.0 * pearson(ref_score, gold), 1e-2);
  EXPECT_NEAR(sts_metrics["spearman"].get<double>(), 100.0 * spearman(ref_score, gold), 1e-2);
  // Multiple choice: the argmax of the four option scores, as a letter.
  const auto race = load_task(t.file("data"), "race", "dev");
  std::ifstream rp(t.file("out/race_predictions.json"));
  const json race_pred = json::parse(rp);
  ASSERT_EQ(race_pred.size(), race.examples.size());
  for (const auto& e : race.examples) {
    std::vector<float> score;
    for (const auto& o : e.options) {
      const std::string& q = e.text[1];
      const size_t blank = q.find('_');
      const std::string second = blank == std::string::npos ? q + " " + o : q.substr(0, blank) + o + q.substr(blank + 1);
      score.push_back(reference("race", e.text[0], &second).item<float>());
    }
    ASSERT_EQ(score.size(), 4u);
    const auto best = std::max_element(score.begin(), score.end()) - score.begin();
    EXPECT_EQ(race_pred[e.id].get<std::string>(), std::string(1, char('A' + best))) << e.id;
  }
}

TEST(Finetune, TinyT5LearnsATinyTaskAboveChanceTextToText) {
  TempDir t;
  test::write_tiny_sst2(t);
  Pretrained p;
  p.config = test::tiny_pretrain("", 1);
  p.path = "in-memory";
  const std::string tok = test::tiny_tokenizer(t, 64, TokenizerConvention::t5);
  torch::manual_seed(1);
  T5 m(p.config.model, p.config.attention, 164);
  for (const auto& [k, v] : m->named_parameters_by_path()) p.checkpoint.params[k] = v.detach().clone();
  FinetuneRunConfig c;
  c.finetune.pretrained = "in-memory", c.finetune.tokenizer = tok, c.finetune.data = t.file("data");
  c.finetune.tasks = {"sst2"};
  c.finetune.steps = 150, c.finetune.batch_size = 16, c.finetune.inputs_length = 32, c.finetune.targets_length = 12;
  c.finetune.eval_every = 75, c.finetune.log_every = 75, c.finetune.max_query_length = 8;
  c.finetune.freeze_embedding = false;  // a random embedding cannot stay fixed and spell labels
  c.optimizer.schedule = "constant", c.optimizer.learning_rate = 1e-2;
  run_finetune(c, p, t.file("out"));
  EXPECT_GT(best_accuracy(t.file("out")), 80.0) << "chance is 50%; a miss counts as wrong";
  // Each evaluation logs its label-miss count (as the record's label_misses) and decoded
  // answers beside their targets; the progress lines keep T5's nll.
  const std::string log = read_file(t.file("out/finetune.log"));
  const json record = json::parse(read_file(t.file("out/sst2.json")));
  ASSERT_EQ(record["history"].size(), 2u);
  for (const auto& h : record["history"]) {
    const std::regex said(fmt::format("step {} sst2 dev: {} of 100 answers \\({:.1f}%\\) named no label \\(scored "
                                      "wrong; the files get the most frequent training label\\); e\\.g\\. '[^']*' "
                                      "for '(negative|positive)', '[^']*' for '(negative|positive)', '[^']*' for "
                                      "'(negative|positive)'\n",
                                      h["step"].get<int64_t>(), h["label_misses"].get<int64_t>(),
                                      h["label_misses"].get<double>()));
    EXPECT_TRUE(std::regex_search(log, said)) << h.dump() << "\n" << log;
  }
  EXPECT_NE(log.find(" nll "), std::string::npos) << log;
  EXPECT_EQ(record["weights"]["last"]["file"], "model.h5");
  EXPECT_EQ(load_checkpoint(t.file("out/sst2-best.h5")).step, record["step"].get<int64_t>());
}

// RTE's "not_entailment": the tiny tokenizer has no "_", so the model can only ever produce
// the name as decode(encode(name)) renders it; evaluation compares against that rendering.
TEST(Finetune, TinyT5LabelsWithCharactersTheVocabularyLacks) {
  TempDir t;
  test::write_tiny_sst2(t);
  fs::create_directories(t.file("data/glue/RTE"));
  for (const char* split : {"train", "dev"}) {
    std::ifstream in(t.file(std::string("data/glue/SST-2/") + split + ".tsv"));
    std::string line, tsv = "index\tsentence1\tsentence2\tlabel\n";
    std::getline(in, line);
    for (int i = 0; std::getline(in, line); ++i) {
      const auto tab = line.find('\t');
      tsv += std::to_string(i) + "\tthe model\t" + line.substr(0, tab) + "\t" +
             (line.substr(tab + 1) == "1" ? "entailment" : "not_entailment") + "\n";
    }
    std::ofstream(t.file(std::string("data/glue/RTE/") + split + ".tsv")) << tsv;
  }
  Pretrained p;
  p.config = test::tiny_pretrain("", 1);
  p.path = "in-memory";
  const std::string tok = test::tiny_tokenizer(t, 64, TokenizerConvention::t5);
  Tokenizer tk(tok);
  ASSERT_NE(tk.decode(tk.encode("not_entailment")), "not_entailment") << "the fixture needs a lossy name";
  torch::manual_seed(1);
  T5 m(p.config.model, p.config.attention, 164);
  for (const auto& [k, v] : m->named_parameters_by_path()) p.checkpoint.params[k] = v.detach().clone();
  FinetuneRunConfig c;
  c.finetune.pretrained = "in-memory", c.finetune.tokenizer = tok, c.finetune.data = t.file("data");
  c.finetune.tasks = {"rte"};
  c.finetune.steps = 150, c.finetune.batch_size = 16, c.finetune.inputs_length = 32, c.finetune.targets_length = 16;
  c.finetune.eval_every = 150, c.finetune.log_every = 150, c.finetune.max_query_length = 8;
  c.finetune.freeze_embedding = false;
  c.optimizer.schedule = "constant", c.optimizer.learning_rate = 1e-2;
  run_finetune(c, p, t.file("out"));
  std::ifstream in(t.file("out/rte.json"));
  EXPECT_GT(json::parse(in)["metrics"]["accuracy"].get<double>(), 80.0);
}

// The key and message of validate's error ("" when it accepts the config).
std::pair<std::string, std::string> config_error(const FinetuneConfig& c) {
  try {
    validate(c);
  } catch (const ConfigError& e) {
    return {e.key, e.what()};
  }
  return {};
}

TEST(Finetune, ConfigErrorsNameTheKey) {
  FinetuneConfig c;
  c.pretrained = "x";
  EXPECT_EQ(config_error(c).first, "finetune.tasks");  // no tasks
  c.tasks = {"sst2", "mnli_matched"};
  const auto [key, what] = config_error(c);
  EXPECT_EQ(key, "finetune.tasks[1]");
  EXPECT_NE(what.find("allowed: cola"), std::string::npos) << what;
  c.tasks = {"sst2"};
  c.max_query_length = 600;
  EXPECT_EQ(config_error(c).first, "") << "only SQuAD's windows use max_query_length";
  c.tasks = {"sst2", "squad20"};
  EXPECT_EQ(config_error(c).first, "finetune.max_query_length");
  EXPECT_THROW(resolve_checkpoint("/nonexistent/run"), InputError);
}

// SQuAD v2.0 through the span head end to end: windows over a context longer than one input,
// the no-answer threshold chosen on dev, and the official predictions files.
TEST(Finetune, TinyAlbertSquadV2WritesOfficialPredictions) {
  TempDir t;
  json data = {{"version", "v2.0"}, {"data", json::array()}};
  json paragraphs = json::array();
  for (int i = 0; i < 24; ++i) {
    std::string context = "the model heads talk to each other and learn";
    for (int k = 0; k < i % 5; ++k) context += " the model heads talk";
    const bool answerable = i % 3 != 0;
    const std::string answer = "attention";
    const int64_t start = int64_t(context.size()) + 1;
    if (answerable) context += " " + answer + " weights";
    json qa = {{"id", "q" + std::to_string(i)}, {"question", "what do heads learn"}, {"is_impossible", !answerable}};
    qa["answers"] = answerable ? json::array({{{"text", answer}, {"answer_start", start}}}) : json::array();
    paragraphs.push_back({{"context", context}, {"qas", json::array({qa})}});
  }
  data["data"].push_back({{"title", "t"}, {"paragraphs", paragraphs}});
  fs::create_directories(t.file("data/squad/v2.0"));
  std::ofstream(t.file("data/squad/v2.0/train-v2.0.json")) << data.dump();
  std::ofstream(t.file("data/squad/v2.0/dev-v2.0.json")) << data.dump();
  auto [p, c] = tiny_albert(t);
  c.finetune.tasks = {"squad20"};
  c.finetune.steps = 20, c.finetune.batch_size = 8, c.finetune.inputs_length = 24;  // several windows
  c.finetune.eval_every = 20, c.finetune.log_every = 20, c.finetune.max_query_length = 6;
  c.finetune.doc_stride = 4;
  run_finetune(c, p, t.file("out"));
  std::ifstream in(t.file("out/squad20.json"));
  const json r = json::parse(in);
  for (const char* k : {"exact_match", "f1", "has_ans_f1", "no_ans_f1", "threshold", "best_f1"})
    EXPECT_TRUE(r["metrics"].contains(k)) << k;
  EXPECT_EQ(r["examples"], 24);
  std::ifstream pf(t.file("out/squad20_predictions.json"));
  const json preds = json::parse(pf);
  EXPECT_EQ(preds.size(), 24u);
  for (const auto& [id, a] : preds.items()) EXPECT_TRUE(a.is_string());
  EXPECT_TRUE(fs::exists(t.file("out/squad20_na_probs.json")));
}

TEST(Predictions, OfficialFormatsPerBenchmark) {
  TempDir t;
  auto read = [&](const std::string& f) {
    std::ifstream in(t.file(f));
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  std::vector<TaskExample> dev(2);
  dev[0].id = "0", dev[1].id = "1";
  TaskEval ev;
  ev.predictions = {"entailment", "not_entailment"};
  write_predictions(t.path.string(), task_spec("rte"), dev, ev);
  EXPECT_EQ(read("RTE.tsv"), "index\tprediction\n0\tentailment\n1\tnot_entailment\n");
  ev.predictions = {"True", "False"};
  write_predictions(t.path.string(), task_spec("boolq"), dev, ev);
  EXPECT_EQ(read("BoolQ.jsonl"), "{\"idx\":0,\"label\":\"true\"}\n{\"idx\":1,\"label\":\"false\"}\n");
  ev.predictions = {"choice2", "choice1"};
  write_predictions(t.path.string(), task_spec("copa"), dev, ev);
  EXPECT_EQ(read("COPA.jsonl"), "{\"idx\":0,\"label\":1}\n{\"idx\":1,\"label\":0}\n");
  // MultiRC nests answers in questions in passages.
  std::vector<TaskExample> m(3);
  m[0].id = "0/0/0", m[1].id = "0/0/1", m[2].id = "0/1/2";
  ev.predictions = {"True", "False", "True"};
  write_predictions(t.path.string(), task_spec("multirc"), m, ev);
  const json j = json::parse(read("MultiRC.jsonl"));
  EXPECT_EQ(j["idx"], 0);
  ASSERT_EQ(j["passage"]["questions"].size(), 2u);
  EXPECT_EQ(j["passage"]["questions"][0]["answers"][1]["label"], 0);
  EXPECT_EQ(j["passage"]["questions"][1]["answers"][0]["idx"], 2);
  // SQuAD: {id: answer}.
  ev.answers = {{"a", "Denver"}, {"b", ""}};
  write_predictions(t.path.string(), task_spec("squad11"), dev, ev);
  EXPECT_EQ(json::parse(read("squad11_predictions.json")), json({{"a", "Denver"}, {"b", ""}}));
}

// Every shipped fine-tuning config reads and validates once a pretrained model is named.
TEST(Finetune, ShippedConfigsValidate) {
  int n = 0;
  for (const char* dir : {"configs/paper", "configs/mini"})
    for (const auto& f : fs::directory_iterator(fs::path(THX_SOURCE_DIR) / dir)) {
      if (f.path().filename().string().rfind("finetune", 0) != 0) continue;
      ConfigTree t;
      t.merge_file(f.path().string());
      t.set("finetune.pretrained=runs/x");
      FinetuneRunConfig c;
      EXPECT_NO_THROW(c = cfg::read<FinetuneRunConfig>(t.root())) << f.path();
      EXPECT_NO_THROW(validate(c.finetune)) << f.path();
      EXPECT_NO_THROW(validate(c.optimizer)) << f.path();
      ++n;
    }
  EXPECT_EQ(n, 8);  // paper: T5 + five ALBERT columns; mini: T5 and ALBERT
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx
