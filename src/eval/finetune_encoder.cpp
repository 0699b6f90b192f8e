#include "eval/finetune_encoder.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <numeric>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/log.h"
#include "distributed/dist.h"
#include "data/tokenizer.h"
#include "eval/predictions.h"
#include "eval/squad_spans.h"
#include "eval/text2text.h"
#include "models/encoder.h"
#include "models/heads.h"
#include "training/loop.h"
#include "training/pretrain.h"

// Shapes: b features in a batch (multiple choice: b / K examples of K options), n positions,
// d = d_model, K classes or options.
namespace thx {
namespace fs = std::filesystem;
using json = nlohmann::json;
using torch::Tensor;

namespace {

// Data parallel: every rank fills the rows of its batches; afterwards every rank holds all of
// them (float32 rows of any shape, each sent with its index and shape).
void gather_rows(std::vector<Tensor>& rows) {
  if (!dist::active()) return;
  std::string mine;
  auto put = [&](int64_t v) { mine.append(reinterpret_cast<const char*>(&v), sizeof v); };
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!rows[i].defined()) continue;
    put(int64_t(i)), put(rows[i].dim());
    for (int64_t d : rows[i].sizes()) put(d);
    if (rows[i].numel() > 0)
      mine.append(reinterpret_cast<const char*>(rows[i].data_ptr<float>()), size_t(rows[i].numel()) * sizeof(float));
  }
  for (const std::string& theirs : dist::all_gather_bytes(mine)) {
    size_t at = 0;
    auto get = [&] {
      int64_t v;
      std::memcpy(&v, theirs.data() + at, sizeof v);
      at += sizeof v;
      return v;
    };
    while (at < theirs.size()) {
      const size_t i = size_t(get());
      std::vector<int64_t> shape(static_cast<size_t>(get()));
      for (auto& d : shape) d = get();
      Tensor t = torch::empty(shape, torch::kFloat32);
      if (t.numel() > 0) std::memcpy(t.data_ptr<float>(), theirs.data() + at, size_t(t.numel()) * sizeof(float));
      at += size_t(t.numel()) * sizeof(float);
      rows[i] = t;
    }
  }
}

struct Feature {
  std::vector<int32_t> ids, types;
  int64_t example = 0;
  int label = -1;
  float score = 0;
  int64_t start = 0, end = 0;       // span targets (0: [CLS])
  std::vector<int64_t> token_to_word;  // span: per position, the context word or -1
  std::vector<bool> max_context;
  bool cut = false;  // its text was cut to fit (inputs_length; SQuAD: the question to max_query_length)
};

// How many of the examples behind `feats` were cut to fit, and the log's line for it ("" when
// none): the share of `examples`, for `what` ("training examples", "dev examples").
// SQuAD's are its questions; a multiple-choice example's, its text or an option (features()).
std::string cut_examples_line(const std::vector<const Feature*>& feats, size_t examples, const std::string& what,
                              const FinetuneConfig& f, TaskKind kind) {
  std::set<int64_t> cut;
  for (const Feature* x : feats)
    if (x->cut) cut.insert(x->example);
  if (cut.empty()) return "";
  std::string why = fmt::format("are longer than finetune.inputs_length {} ([CLS] and [SEP] counted)", f.inputs_length);
  if (kind == TaskKind::span) why = fmt::format("have questions longer than finetune.max_query_length {}",
                                                f.max_query_length);
  if (kind == TaskKind::multiple_choice) why += fmt::format(" or have an option longer than half of it, {}",
                                                            f.inputs_length / 2);
  return fmt::format("{} of {} {} ({:.1f}%) {}: cut to fit", cut.size(), examples, what,
                     percent_of(int64_t(cut.size()), examples), why);
}

// Examples -> features: [CLS] a [SEP] b [SEP] with token types; SQuAD windows; one feature per
// option for multiple choice.
class Featurizer {
 public:
  Featurizer(const FinetuneConfig& f, const std::string& tokenizer) : f_(f), tok_(tokenizer) {
    require_convention(tok_, TokenizerConvention::albert, tokenizer, "BERT/ALBERT fine-tuning");
  }
  int64_t vocab_size() const { return tok_.vocab_size(); }

  // [CLS] a [SEP] b [SEP], the longer side cut first.
  Feature pair(std::vector<int32_t> a, std::vector<int32_t> b, bool has_b) const {
    const size_t room = size_t(f_.inputs_length) - (has_b ? 3 : 2);
    Feature f;
    f.cut = a.size() + b.size() > room;
    while (a.size() + b.size() > room) (a.size() >= b.size() ? a : b).pop_back();
    f.ids.push_back(Tokenizer::kCls);
    f.ids.insert(f.ids.end(), a.begin(), a.end());
    f.ids.push_back(Tokenizer::kSep);
    f.types.assign(f.ids.size(), 0);
    if (has_b) {
      f.ids.insert(f.ids.end(), b.begin(), b.end());
      f.ids.push_back(Tokenizer::kSep);
      f.types.resize(f.ids.size(), 1);
    }
    return f;
  }

  // Features of one example; multiple choice: one per option, in order; SQuAD: one per window.
  std::vector<Feature> features(const TaskSpec& s, const TaskExample& e, int64_t index, bool training) const {
    std::vector<Feature> out;
    if (s.kind == TaskKind::multiple_choice) {
      const std::vector<int32_t> ctx = tok_.encode(e.text[0]);
      for (size_t o = 0; o < e.options.size(); ++o) {
        std::string second;
        if (s.name == "race") {
          const std::string& q = e.text[1];
          const size_t blank = q.find('_');
          second = blank != std::string::npos ? q.substr(0, blank) + e.options[o] + q.substr(blank + 1)
                                              : q + " " + e.options[o];
        } else {  // COPA
          second = (e.word == "cause" ? "What was the cause? " : "What happened as a result? ") + e.options[o];
        }
        auto b = tok_.encode(second);
        // The option side keeps up to half the input; the article is cut first.
        const bool option_cut = b.size() > size_t(f_.inputs_length / 2);
        if (option_cut) b.resize(size_t(f_.inputs_length / 2));
        Feature f = pair(ctx, b, true);
        f.cut = f.cut || option_cut;
        f.example = index, f.label = e.label;
        out.push_back(std::move(f));
      }
      return out;
    }
    if (s.kind == TaskKind::span) return span_features(e, index, training);
    std::vector<int32_t> a = tok_.encode(e.text[0]), b;
    bool has_b = e.text.size() > 1;
    if (s.name == "wic") a = tok_.encode(e.word + ": " + e.text[0]);
    if (s.name == "wsc") b = tok_.encode(e.word + " / " + e.word2), has_b = true;
    else if (s.name == "multirc") a = tok_.encode(e.text[0] + " " + e.text[1]), b = tok_.encode(e.text[2]);
    else if (has_b) b = tok_.encode(e.text[1]);
    Feature f = pair(std::move(a), std::move(b), has_b);
    f.example = index, f.label = e.label, f.score = float(e.score);
    out.push_back(std::move(f));
    return out;
  }

  // SQuAD: the context split on whitespace into words, each word tokenized on its own (so a
  // token maps back to a word), the question cut to max_query_length, doc-stride windows.
  std::vector<Feature> span_features(const TaskExample& e, int64_t index, bool training) const {
    const auto& fc = f_;
    const std::string& context = e.text[1];
    std::vector<int64_t> word_start_char;  // per word
    std::vector<int64_t> char_to_word(context.size(), -1);
    {
      bool in_word = false;
      for (size_t i = 0; i < context.size(); ++i) {
        const char c = context[i];
        const bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r';
        if (!space && !in_word) word_start_char.push_back(int64_t(i));
        in_word = !space;
        char_to_word[i] = int64_t(word_start_char.size()) - 1;
      }
    }
    std::vector<int32_t> doc;
    std::vector<int64_t> doc_word;
    std::vector<int64_t> word_first_token(word_start_char.size()), word_last_token(word_start_char.size());
    for (size_t w = 0; w < word_start_char.size(); ++w) {
      const int64_t a = word_start_char[w];
      const int64_t b = w + 1 < word_start_char.size() ? word_start_char[w + 1] : int64_t(context.size());
      std::string word = context.substr(size_t(a), size_t(b - a));
      while (!word.empty() && (word.back() == ' ' || word.back() == '\n' || word.back() == '\t' || word.back() == '\r'))
        word.pop_back();
      word_first_token[w] = int64_t(doc.size());
      for (int32_t t : tok_.encode(word)) doc.push_back(t), doc_word.push_back(int64_t(w));
      word_last_token[w] = int64_t(doc.size()) - 1;
    }
    int64_t ans_start = -1, ans_end = -1;  // document token positions of the first gold answer
    if (training && !e.impossible && !e.answers.empty()) {
      const int64_t c0 = e.answer_starts[0], c1 = c0 + int64_t(e.answers[0].size()) - 1;
      if (c0 >= 0 && c1 < int64_t(context.size()) && c1 >= c0) {
        const int64_t w0 = char_to_word[size_t(c0)], w1 = char_to_word[size_t(c1)];
        if (w0 >= 0 && w1 >= w0) ans_start = word_first_token[size_t(w0)], ans_end = word_last_token[size_t(w1)];
      }
      if (ans_start < 0) return {};  // an answer that does not line up with the text: skipped
    }
    bool question_cut = false;
    const auto q = cut(tok_.encode(e.text[0]), size_t(fc.max_query_length), &question_cut);
    const int64_t room = fc.inputs_length - int64_t(q.size()) - 3;
    const auto windows = doc_windows(int64_t(doc.size()), room, fc.doc_stride);
    std::vector<Feature> out;
    for (size_t w = 0; w < windows.size(); ++w) {
      const auto [start, len] = windows[w];
      Feature f;
      f.example = index, f.cut = question_cut;
      f.ids.push_back(Tokenizer::kCls);
      f.ids.insert(f.ids.end(), q.begin(), q.end());
      f.ids.push_back(Tokenizer::kSep);
      f.types.assign(f.ids.size(), 0);
      f.token_to_word.assign(f.ids.size(), -1);
      f.max_context.assign(f.ids.size(), false);
      const int64_t offset = int64_t(f.ids.size());
      for (int64_t i = start; i < start + len; ++i) {
        f.ids.push_back(doc[size_t(i)]), f.types.push_back(1);
        f.token_to_word.push_back(doc_word[size_t(i)]);
        f.max_context.push_back(is_max_context(windows, w, i));
      }
      f.ids.push_back(Tokenizer::kSep), f.types.push_back(1), f.token_to_word.push_back(-1), f.max_context.push_back(false);
      if (ans_start >= 0 && ans_start >= start && ans_end < start + len)
        f.start = ans_start - start + offset, f.end = ans_end - start + offset;
      out.push_back(std::move(f));
    }
    return out;
  }

  // Features -> ids and token types [b,n], zero-padded.
  static Batch batch(const std::vector<const Feature*>& fs) {
    size_t n = 0;
    for (auto* f : fs) n = std::max(n, f->ids.size());
    Batch b;
    b.inputs = torch::zeros({int64_t(fs.size()), int64_t(n)}, torch::kInt64);  // [b,n]
    b.token_types = torch::zeros_like(b.inputs);                                // [b,n]
    auto a = b.inputs.accessor<int64_t, 2>(), t = b.token_types.accessor<int64_t, 2>();
    for (size_t i = 0; i < fs.size(); ++i)
      for (size_t j = 0; j < fs[i]->ids.size(); ++j) a[i][j] = fs[i]->ids[j], t[i][j] = fs[i]->types[j];
    return b;
  }

  // Head outputs: classification [b,K], regression [b], span [b,n,2], choice [b] (one score
  // per option).
  Tensor head_forward(EncoderModel& m, TaskHead& h, const TaskSpec& s, const Tensor& ids, const Tensor& types) const {
    const torch::Device on = h->w.device();  // the model's device (batches are built on the CPU)
    const Tensor hidden = m->encode(ids.to(on), types.to(on));  // [b,n,d]
    if (s.kind == TaskKind::span) return h->forward(hidden);  // [b,n,2]
    Tensor pooled = m->pooled(hidden);                  // [b,d]
    if (m->is_training() && f_.classifier_dropout > 0) pooled = torch::dropout(pooled, f_.classifier_dropout, true);  // [b,d]
    const Tensor out = h->forward(pooled);              // [b,K]
    return s.kind == TaskKind::classification ? out : out.squeeze(1);
  }

  TaskEval evaluate(EncoderModel& m, TaskHead& h, const TaskSpec& s, const std::vector<TaskExample>& dev) const {
    torch::NoGradGuard g;
    m->eval(), h->eval();
    std::vector<Feature> feats;
    for (size_t i = 0; i < dev.size(); ++i)
      for (auto& f : features(s, dev[i], int64_t(i), false)) feats.push_back(std::move(f));
    if (dev_cut_told_.insert(s.name).second) {  // once per task, not at every evaluation
      std::vector<const Feature*> all;
      for (const Feature& f : feats) all.push_back(&f);
      const std::string line = cut_examples_line(all, dev.size(), "dev examples", f_, s.kind);
      if (!line.empty()) thx::log("finetune")->info("{}: {}", s.name, line);
    }
    const std::vector<Tensor> rows = head_rows(m, h, s, feats);
    m->train(), h->train();
    Outputs out(dev.size());
    for (size_t i = 0; i < feats.size(); ++i) out.add(s, feats[i], rows[i]);
    TaskEval ev;
    ev.examples = int64_t(dev.size());
    std::vector<std::string> texts(dev.size());
    for (size_t i = 0; i < dev.size(); ++i) {
      if (s.kind == TaskKind::multiple_choice) {
        const auto& c = out.choice[i];
        out.labels[i] = c.empty() ? -1 : int(std::max_element(c.begin(), c.end()) - c.begin());
      }
      if (s.kind == TaskKind::span) {
        const SpanAnswer a = best_span(out.windows[i], f_.n_best, f_.max_answer_length);
        texts[i] = answer_text(dev[i].text[1], a);
        if (s.name == "squad20")  // the no-answer margin; the official script's best threshold decides
          ev.na_probs[dev[i].id] = a.start_word < 0 ? 1e9 : a.null_score - a.score;
        ev.answers[dev[i].id] = texts[i];
        ev.predictions.push_back(texts[i]);
      } else if (s.kind == TaskKind::regression) {
        ev.predictions.push_back(fmt::format("{:.3f}", out.scores[i]));
      } else {
        const int l = out.labels[i];
        ev.predictions.push_back(l < 0 ? "" : s.name == "race" ? std::string(1, char('A' + l))
                                          : s.name == "copa"  ? target_names(s)[size_t(l)]
                                                              : s.labels[size_t(l)]);
      }
    }
    if (s.name == "squad20") {
      const double thresh = apply_no_answer_threshold(dev, texts, ev);
      ev.metrics = score_task(s, dev, out.labels, out.scores, texts, &ev.na_probs);
      ev.metrics["threshold"] = thresh;
      return ev;
    }
    ev.metrics = score_task(s, dev, out.labels, out.scores, texts);
    return ev;
  }

  // Each feature's head output (classes, a score, an option's score, or the window's [n,2]
  // span logits), on the CPU; data parallel: rank r runs batches r, r+W, ... and the rows are
  // gathered.
  std::vector<Tensor> head_rows(EncoderModel& m, TaskHead& h, const TaskSpec& s, const std::vector<Feature>& feats) const {
    const size_t bs = size_t(eval_rows(f_));
    std::vector<Tensor> rows(feats.size());
    for (size_t b0 = bs * size_t(dist::rank()); b0 < feats.size(); b0 += bs * size_t(dist::world_size())) {
      check_stop();  // a signal: stop within one batch
      std::vector<const Feature*> fs;
      for (size_t i = b0; i < std::min(feats.size(), b0 + bs); ++i) fs.push_back(&feats[i]);
      const Batch in = batch(fs);
      const Tensor o = head_forward(m, h, s, in.inputs, in.token_types).to(torch::kCPU).contiguous();  // head_forward's
      for (size_t i = 0; i < fs.size(); ++i)
        rows[b0 + i] = s.kind == TaskKind::span ? o[int64_t(i)].narrow(0, 0, int64_t(fs[i]->ids.size())).contiguous()
                                                : o[int64_t(i)].contiguous();  // [K], [], or [n,2]
    }
    gather_rows(rows);
    return rows;
  }

  // The head rows gathered per dev example: a class, a score, the options' scores, or the
  // span windows.
  struct Outputs {
    std::vector<int> labels;
    std::vector<double> scores;
    std::vector<std::vector<float>> choice;
    std::vector<std::vector<SpanWindow>> windows;
    explicit Outputs(size_t n) : labels(n, -1), scores(n, 0), choice(n), windows(n) {}
    void add(const TaskSpec& s, const Feature& f, const Tensor& r) {
      const size_t e = size_t(f.example);
      if (s.kind == TaskKind::classification) labels[e] = int(r.argmax().item<int64_t>());
      else if (s.kind == TaskKind::regression) scores[e] = r.item<double>();
      else if (s.kind == TaskKind::multiple_choice) choice[e].push_back(r.item<float>());
      else {
        SpanWindow w;
        w.token_to_word = f.token_to_word, w.max_context = f.max_context;
        const Tensor st = r.select(1, 0).contiguous(), en = r.select(1, 1).contiguous();  // [n], [n]
        w.start_logits.assign(st.data_ptr<float>(), st.data_ptr<float>() + st.numel());
        w.end_logits.assign(en.data_ptr<float>(), en.data_ptr<float>() + en.numel());
        windows[e].push_back(std::move(w));
      }
    }
  };

  // SQuAD v2.0: the no-answer threshold chosen on dev as the official script does, then
  // applied (answers above it become ""); returns it.
  static double apply_no_answer_threshold(const std::vector<TaskExample>& dev, std::vector<std::string>& texts,
                                          TaskEval& ev) {
    std::vector<SquadQuestion> qs;
    for (const auto& e : dev) qs.push_back({e.id, e.answers, !e.impossible});
    std::map<std::string, double> f1;
    for (size_t i = 0; i < dev.size(); ++i) {
      double best = 0;
      std::vector<std::string> golds;
      for (const auto& a : dev[i].answers)
        if (!normalize_answer(a).empty()) golds.push_back(a);
      if (golds.empty()) golds = {""};
      for (const auto& g : golds) best = std::max(best, squad_f1_v2(g, texts[i]));
      f1[dev[i].id] = best;
    }
    const double thresh = best_no_answer_threshold(qs, ev.answers, f1, ev.na_probs).second;
    for (size_t i = 0; i < dev.size(); ++i)
      if (ev.na_probs[dev[i].id] > thresh) texts[i] = "", ev.answers[dev[i].id] = "", ev.predictions[i] = "";
    return thresh;
  }

 private:
  const FinetuneConfig& f_;
  Tokenizer tok_;
  // Tasks whose dev set's cut examples were logged (one featurizer serves every task of a run;
  // evaluate() is const).
  mutable std::set<std::string> dev_cut_told_;
};


// One task's fine-tuning behind the loop's interface.
class EncoderTask : public Trainee {
 public:
  // `checked`: the pretrained model as fine-tuning's check built and loaded it (under
  // finetune.seed), for the first task; the others build their own from the checkpoint.
  EncoderTask(const FinetuneJob& job, const Featurizer& fz, const std::string& task, EncoderModel checked)
      : job_(job), f_(job.config.finetune), fz_(fz), s_(task_spec(task)), rng_(uint64_t(f_.seed)),
        pc_(with_dropout(job.pretrained.config, f_)) {
    d_ = shuffled(job.data.at(task), f_, rng_);
    if (checked) {
      model = checked;
    } else {
      torch::manual_seed(uint64_t(f_.seed));
      const int64_t vocab = pc_.model.vocab_size > 0 ? pc_.model.vocab_size : fz.vocab_size();
      model = EncoderModel(pc_.spec, vocab, false);
      copy_parameters(model->named_parameters_by_path(), job.pretrained.checkpoint.params, job.pretrained.path);
    }
    head = TaskHead(pc_.model.d_model, head_outputs(s_));
    model->to(job.device), head->to(job.device);
    // Training units: one feature, or (multiple choice) the options of one example together.
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < d_.train.examples.size(); ++i) {
      const auto& e = d_.train.examples[i];
      if (s_.kind != TaskKind::regression && s_.kind != TaskKind::span && e.label < 0) continue;
      auto fs = fz.features(s_, e, int64_t(i), true);
      if (fs.empty()) continue;
      if (s_.kind == TaskKind::multiple_choice) units_.push_back(std::move(fs));
      else
        for (auto& f : fs) units_.push_back({std::move(f)});
    }
    THX_CHECK(!units_.empty(), "{}: no usable training examples", d_.train.path);
    thx::log("finetune")->info("{}: {} training units from {} examples ({:.0f} s), {} dev examples", task,
                               units_.size(), d_.train.examples.size(), seconds_since(t0), d_.dev.examples.size());
    std::vector<const Feature*> all;
    for (const auto& unit : units_)
      for (const Feature& f : unit) all.push_back(&f);
    const std::string cut_line = cut_examples_line(all, d_.train.examples.size(), "training examples", f_, s_.kind);
    if (!cut_line.empty()) thx::log("finetune")->info("{}: {}", task, cut_line);
    params_ = model->named_parameters_by_path();
    std::vector<OptimizedParam> op = optimized_params(*model, params_, job.config.optimizer);
    for (auto [name, p] : std::vector<std::pair<std::string, Tensor>>{{"w", head->w}, {"bias", head->b}}) {
      OptimizedParam o;
      o.path = "heads/" + task + "/" + name, o.param = p, o.view = p.sizes().vec();
      o.no_decay = name == "bias";
      op.push_back(o);
      params_.emplace_back(o.path, p);
    }
    optimizer_ = make_optimizer(job.config.optimizer, op);
    record.task = task, record.steps = f_.steps;
    order_.resize(units_.size());
    std::iota(order_.begin(), order_.end(), 0);
    cursor_ = order_.size();
  }

  torch::nn::Module& module() override { return *model; }
  std::vector<std::pair<std::string, Tensor>> parameters() override { return params_; }
  Optimizer& optimizer() override { return *optimizer_; }

  std::vector<Batch> next_step(int64_t micro) override {
    std::vector<Batch> out;
    for (int64_t m = 0; m < micro; ++m) {
      std::vector<const Feature*> fs;
      for (int64_t i = 0; i < f_.batch_size / micro; ++i) {
        if (cursor_ == order_.size()) std::shuffle(order_.begin(), order_.end(), rng_), cursor_ = 0;
        for (const auto& f : units_[order_[cursor_++]]) fs.push_back(&f);
      }
      Batch b = Featurizer::batch(fs);
      const int64_t B = int64_t(fs.size());
      b.labels = torch::empty({B}, torch::kInt64);      // [b] class or option label
      b.scores = torch::empty({B});                     // [b] regression target
      b.targets = torch::empty({B, 2}, torch::kInt64);  // [b,2] span start, end (0: [CLS])
      for (int64_t i = 0; i < B; ++i) {
        const Feature& f = *fs[size_t(i)];
        b.labels[i] = f.label, b.scores[i] = f.score, b.targets[i][0] = f.start, b.targets[i][1] = f.end;
      }
      out.push_back(std::move(b));
    }
    return out;
  }
  double weight(const Batch& b) override { return double(b.inputs.size(0)); }
  int64_t tokens(const Batch& b) override { return b.inputs.numel(); }
  // The pooler serves only the sentence-level heads; span heads leave it without a gradient.
  bool may_leave_parameters_unused() const override { return true; }
  MicroLoss forward(const Batch& batch) override {
    const Batch b = to_device(batch, job_.device);
    const Tensor o = fz_.head_forward(model, head, s_, b.inputs, b.token_types);  // [b,K], [b] or [b,n,2]
    return {loss(o, b), 0.0, {}};
  }

  json evaluate(int64_t step) override {
    const auto e0 = std::chrono::steady_clock::now();
    const TaskEval ev = fz_.evaluate(model, head, s_, d_.dev.examples);
    const bool best = note_eval(record, step, ev);
    thx::log("finetune")->info("step {} {} dev ({} examples, {:.0f} s): {}{}", step, s_.name, ev.examples,
                               seconds_since(e0), show_metrics(ev.metrics), best ? " (best so far)" : "");
    if (dist::rank() == 0) {  // rank 0 writes; every rank keeps the record (it is checkpointed)
      if (best) {
        write_predictions(job_.out, s_, d_.dev.examples, ev);
        write_params((fs::path(job_.out) / best_weights_file(record.task)).string(), parameters(),
                     job_.pretrained.config.yaml, step);
      }
      write_record(job_.out, record, weights_block(record, record.task + ".h5", job_.config.finetune.steps));
    }
    return json(ev.metrics);
  }

  // Beyond the shared fine-tuning state: this task's data order and where the epoch is.
  void save_state(Checkpoint& c) override {
    save_finetune_state(c, rng_, {record});
    c.extra["order"] = json{{"order", order_}, {"cursor", cursor_}}.dump();
  }
  void load_state(const Checkpoint& c) override {
    std::vector<TaskRecord> records{record};
    load_finetune_state(c, rng_, records);
    record = records.front();
    if (!c.extra.count("order")) throw InputError("no /state/extra/order: not a fine-tuning checkpoint of this task");
    const json o = json::parse(c.extra.at("order"));
    order_ = o.at("order").get<std::vector<size_t>>(), cursor_ = o.at("cursor");
    THX_CHECK(order_.size() == units_.size() && cursor_ <= order_.size(),
              "the data order has {} units, the task's data {} (did the data change?)", order_.size(), units_.size());
    for (size_t i : order_) THX_CHECK(i < units_.size(), "the data order names unit {} of {}", i, units_.size());
  }

  EncoderModel model{nullptr};
  TaskHead head{nullptr};
  TaskRecord record;

 private:
  // The head's loss over a micro-batch: mean squared error, span start/end cross-entropy
  // (padding masked out), softmax over each example's K options, or class cross-entropy.
  Tensor loss(const Tensor& o, const Batch& b) const {
    const int64_t B = b.inputs.size(0);
    if (s_.kind == TaskKind::regression) return torch::mse_loss(o, b.scores);  // o [b]
    if (s_.kind == TaskKind::span) {
      // Padding positions must not win: their logits are masked out of the softmax.
      const Tensor pad = b.inputs == 0;                                                   // [b,n]
      const Tensor sl = o.select(2, 0).masked_fill(pad, -1e9), el = o.select(2, 1).masked_fill(pad, -1e9);  // [b,n]
      const Tensor st = b.targets.select(1, 0).contiguous(), en = b.targets.select(1, 1).contiguous();  // [b]
      return 0.5 * (torch::cross_entropy_loss(sl, st) + torch::cross_entropy_loss(el, en));  // scalar
    }
    if (s_.kind == TaskKind::multiple_choice) {
      const int64_t K = int64_t(s_.name == "race" ? 4 : 2);
      const Tensor y = b.labels.view({B / K, K}).select(1, 0).contiguous();  // [b/K]: the first option's label
      return torch::cross_entropy_loss(o.view({B / K, K}), y);  // [b/K,K] scores of each example's options
    }
    return torch::cross_entropy_loss(o, b.labels);  // o [b,K]
  }

  const FinetuneJob& job_;
  const FinetuneConfig& f_;
  const Featurizer& fz_;
  const TaskSpec& s_;
  std::mt19937_64 rng_;  // the training split's shuffle, then the data order per epoch
  PretrainConfig pc_;
  Splits d_;
  std::vector<std::vector<Feature>> units_;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<size_t> order_;
  size_t cursor_ = 0;
};

}  // namespace

int64_t head_outputs(const TaskSpec& s) {
  if (s.kind == TaskKind::regression || s.kind == TaskKind::multiple_choice) return 1;
  if (s.kind == TaskKind::span) return 2;
  return int64_t(s.labels.size());
}

int finetune_encoder(const FinetuneJob& job) {
  const auto& f = job.config.finetune;
  const Featurizer fz(f, job.tokenizer);
  EncoderModel first = job.checked.encoder;  // built and loaded by the check: the first task's
  for (const auto& task : f.tasks) {
    const std::string final_file = (fs::path(job.out) / (task + ".h5")).string();
    // Rank 0 decides (the other ranks may not see the output directory).
    if (job.resume && !dist::broadcast_bytes(dist::rank() == 0 && fs::exists(final_file) ? "done" : "").empty()) {
      thx::log("finetune")->info("{}: already fine-tuned ({}); skipped", task, final_file);
      continue;
    }
    EncoderTask t(job, fz, task, first);
    first = nullptr;  // the next task starts from the checkpoint again
    LoopOptions o;
    o.steps = f.steps, o.steps_key = "finetune.steps", o.log_every = f.log_every, o.eval_every = f.eval_every;
    o.batch_size = f.batch_size;
    o.checkpoint_every = job.config.checkpoint.every, o.keep = job.config.checkpoint.keep;
    o.schedule = job.config.optimizer;
    o.clip_global_norm = clip_global_norm(job.config.optimizer, true);  // as BERT's and ALBERT's
    o.reports_nll = false;  // a task head's loss is all there is
    o.checkpoint_dir = (fs::path(job.out) / "checkpoints" / task).string();
    o.metrics_file = (fs::path(job.out) / "metrics.jsonl").string();
    o.open_outputs = job.open_outputs, o.tag = task, o.config = job.yaml, o.resume = job.resume, o.eval_if_finished = false;
    o.precision = train_precision(f, job.pretrained.config), o.eval_precision = eval_precision(f, job.pretrained.config);
    o.train_memory_hint = with_th_path_advice("lower finetune.batch_size",
                                              with_dropout(job.pretrained.config, f).spec, job.device);
    o.eval_memory_hint = "lower finetune.eval_batch_size";
    if (job.config.finetune.deterministic) o.deterministic_key = "finetune.deterministic";
    const LoopResult r = train(t, o);
    if (!r.finished) return r.signal ? r.signal : SIGTERM;
    if (dist::rank() == 0) write_params(final_file, t.parameters(), job.pretrained.config.yaml, f.steps);
    thx::log("finetune")->info("{}: best at step {}: {} (its parameters: {}; the last step's: {})", task,
                               t.record.best_step, show_metrics(t.record.best),
                               (fs::path(job.out) / best_weights_file(task)).string(), final_file);
  }
  return 0;
}

TaskEval evaluate_encoder_task(const FinetuneJob& job, const std::string& task, const Checkpoint& ck,
                               const std::string& file) {
  const auto& f = job.config.finetune;
  const TaskSpec& s = task_spec(task);
  const Splits& d = job.data.at(task);
  const Featurizer fz(f, job.tokenizer);
  const PretrainConfig pc = with_dropout(job.pretrained.config, f);
  const int64_t vocab = pc.model.vocab_size > 0 ? pc.model.vocab_size : fz.vocab_size();
  EncoderModel m(pc.spec, vocab, false);
  copy_parameters(m->named_parameters_by_path(), ck.params, file);
  TaskHead h(pc.model.d_model, head_outputs(s));
  copy_parameters({{"heads/" + task + "/w", h->w}, {"heads/" + task + "/bias", h->b}}, ck.params, file);
  m->to(job.device), h->to(job.device);
  return fz.evaluate(m, h, s, d.dev.examples);
}

void eval_encoder_task(const FinetuneJob& job, const std::string& task, const Checkpoint& ck, const std::string& file) {
  const TaskSpec& s = task_spec(task);
  const Splits& d = job.data.at(task);
  const TaskEval ev = evaluate_encoder_task(job, task, ck, file);
  TaskRecord rec;
  rec.task = task;
  note_eval(rec, ck.step, ev);
  write_predictions(job.out, s, d.dev.examples, ev);
  write_record(job.out, rec);
  thx::log("eval")->info("{} dev ({} examples): {}", task, ev.examples, show_metrics(ev.metrics));
}

}  // namespace thx
