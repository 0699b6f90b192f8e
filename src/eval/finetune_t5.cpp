#include "eval/finetune_t5.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/log.h"
#include "distributed/dist.h"
#include "data/tokenizer.h"
#include "eval/predictions.h"
#include "eval/text2text.h"
#include "models/t5.h"
#include "training/loop.h"
#include "training/pretrain.h"

// Shapes: b examples in a batch, n input tokens, t target tokens.
namespace thx {
namespace fs = std::filesystem;

namespace {

constexpr size_t kSamples = 3;  // decoded dev answers shown beside their targets at each evaluation

// "12 of 872 answers (1.4%) named no label (scored wrong; the files get the most frequent
// training label); e.g. 'positive' for 'positive', 'the the' for 'negative', ...": what a
// T5 model's answers look like, so that an accuracy of 0 is never a mystery.
std::string describe_answers(const TaskSpec& spec, const TaskEval& ev) {
  std::string s;
  if (spec.kind == TaskKind::regression)
    s = fmt::format("{} of {} answers ({:.1f}%) were no number (scored -1; the files get the training mean)",
                    ev.label_misses, ev.examples, 100.0 * double(ev.label_misses) / double(std::max<int64_t>(1, ev.examples)));
  else if (spec.kind != TaskKind::span)
    s = fmt::format("{} of {} answers ({:.1f}%) named no label (scored wrong; the files get the most frequent "
                    "training label)", ev.label_misses, ev.examples,
                    100.0 * double(ev.label_misses) / double(std::max<int64_t>(1, ev.examples)));
  std::string e;
  for (const auto& [answer, target] : ev.samples) e += fmt::format("{}'{}' for '{}'", e.empty() ? "" : ", ", answer, target);
  if (!e.empty()) s += (s.empty() ? "" : "; ") + std::string("e.g. ") + e;
  return s;
}

}  // namespace
using json = nlohmann::json;
using torch::Tensor;

namespace {

struct T5Item {
  std::vector<int32_t> input, target;
  bool input_cut = false, target_cut = false;  // longer than finetune.inputs_length / targets_length
};

// Rows of token ids, zero-padded to the longest ([rows, max len]); with prefix >= 0 each row
// starts with it (decoder inputs: the targets shifted right behind 0).
Tensor pad_rows(const std::vector<const std::vector<int32_t>*>& rows, int64_t prefix = -1) {
  size_t n = 0;
  for (auto* r : rows) n = std::max(n, r->size() + (prefix >= 0 ? 1 : 0));
  Tensor t = torch::zeros({int64_t(rows.size()), int64_t(std::max<size_t>(n, 1))}, torch::kInt64);  // [rows,n]
  auto a = t.accessor<int64_t, 2>();
  for (size_t i = 0; i < rows.size(); ++i) {
    size_t j = 0;
    if (prefix >= 0) a[i][j++] = prefix;
    for (size_t k = 0; k < rows[i]->size() && j < size_t(n); ++k) a[i][j++] = (*rows[i])[k];
  }
  return t;
}

class T5Finetune : public Trainee {
 public:
  explicit T5Finetune(const FinetuneJob& job)
      : job_(job), f_(job.config.finetune), pc_(with_dropout(job.pretrained.config, job.config.finetune)),
        tok_(job.tokenizer), rng_(uint64_t(f_.seed)) {
    const int64_t vocab = pc_.model.vocab_size > 0 ? pc_.model.vocab_size : tok_.vocab_size();
    if (job.checked.t5) {  // built (under finetune.seed) and loaded by fine-tuning's check
      model = job.checked.t5;
    } else {
      torch::manual_seed(uint64_t(f_.seed));
      model = T5(pc_.spec, vocab);
    }
    model->to(job.device);
  }

  // Every task's dev split, and with need_train its training pairs and mixing rate.
  void load(bool need_train) {
    auto log = thx::log("finetune");
    for (const auto& t : f_.tasks) {
      specs_.push_back(&task_spec(t));
      data_.push_back(shuffled(job_.data.at(t), f_, rng_));
      records.push_back(TaskRecord{t, 0, -1, {}, nlohmann::json::array(), need_train ? f_.steps : 0});
      fallback_label_.push_back(0);  // thx eval reads no training split: the first label,
      fallback_score_.push_back(2.5);  // and the middle of STS-B's 0-5 scale
      if (!need_train) continue;
      std::vector<T5Item> items;
      for (const auto& e : data_.back().train.examples)
        for (const auto& p : t5_training_pairs(*specs_.back(), e)) items.push_back(item(p.input, p.target));
      THX_CHECK(!items.empty(), "{}: no labeled training examples", data_.back().train.path);
      rates_.push_back(double(std::min<int64_t>(int64_t(items.size()), f_.mixing_cap)));
      std::map<int, int64_t> counts;  // the most frequent training label (ties: the smallest)
      for (const auto& e : data_.back().train.examples)
        if (e.label >= 0) ++counts[e.label];
      int64_t most = 0;
      for (const auto& [label, n] : counts)
        if (n > most) fallback_label_.back() = label, most = n;
      double sum = 0, n = 0;  // regression: the mean training score
      for (const auto& e : data_.back().train.examples)
        if (std::isfinite(e.score)) sum += e.score, ++n;
      if (n > 0) fallback_score_.back() = sum / n;
      log->info("{}: {} training pairs, {} dev examples", t, items.size(), data_.back().dev.examples.size());
      log_cut_training_pairs(t, items);
      train_.push_back(std::move(items));
    }
    if (!need_train) return;
    const double total_rate = std::accumulate(rates_.begin(), rates_.end(), 0.0);
    for (size_t k = 0; k < rates_.size(); ++k) log->info("mixture: {} {:.2f}%", f_.tasks[k], 100 * rates_[k] / total_rate);
    pick_task_ = std::discrete_distribution<size_t>(rates_.begin(), rates_.end());
    if (f_.freeze_embedding) model->shared.requires_grad_(false);
    std::vector<std::pair<std::string, Tensor>> trained;
    for (const auto& [k, p] : model->named_parameters_by_path())
      if (p.requires_grad()) trained.emplace_back(k, p);
    optimizer_ = make_optimizer(job_.config.optimizer, optimized_params(*model, trained, job_.config.optimizer));
  }

  torch::nn::Module& module() override { return *model; }
  std::vector<std::pair<std::string, Tensor>> parameters() override { return model->named_parameters_by_path(); }
  Optimizer& optimizer() override { return *optimizer_; }

  std::vector<Batch> next_step(int64_t micro) override {
    std::vector<Batch> out;
    for (int64_t m = 0; m < micro; ++m) {
      std::vector<const std::vector<int32_t>*> in, tg;
      for (int64_t i = 0; i < f_.batch_size / micro; ++i) {
        const auto& items = train_[pick_task_(rng_)];
        const T5Item& it = items[std::uniform_int_distribution<size_t>(0, items.size() - 1)(rng_)];
        in.push_back(&it.input), tg.push_back(&it.target);
      }
      Batch b;
      b.inputs = pad_rows(in), b.targets = pad_rows(tg);                            // [b,n], [b,t]
      b.decoder_inputs = pad_rows(tg, 0).narrow(1, 0, b.targets.size(1));          // [b,t] shifted right
      out.push_back(std::move(b));
    }
    return out;
  }
  double weight(const Batch& b) override { return double((b.targets != 0).sum().item<int64_t>()); }
  int64_t tokens(const Batch& b) override { return b.inputs.numel() + b.targets.numel(); }
  MicroLoss forward(const Batch& batch) override {
    const Batch b = to_device(batch, job_.device);
    auto r = model->forward(b.inputs, b.decoder_inputs, b.targets);
    return {r.loss, r.nll_sum.item<double>(), {}};
  }

  json evaluate(int64_t step) override {
    auto log = thx::log("finetune");
    json all = json::object();
    for (size_t k = 0; k < specs_.size(); ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      const TaskEval ev = evaluate_task(k);
      const bool best = note_eval(records[k], step, ev);
      log->info("step {} {} dev ({} examples, {:.0f} s): {}{}", step, specs_[k]->name, ev.examples,
                seconds_since(t0), show_metrics(ev.metrics), best ? " (best so far)" : "");
      log->info("step {} {} dev: {}", step, specs_[k]->name, describe_answers(*specs_[k], ev));
      if (dist::rank() == 0) {  // rank 0 writes; every rank keeps the records (checkpointed)
        if (best) {
          write_predictions(job_.out, *specs_[k], data_[k].dev.examples, ev);
          write_params((fs::path(job_.out) / best_weights_file(records[k].task)).string(),
                       model->named_parameters_by_path(), job_.pretrained.config.yaml, step);
        }
        write_record(job_.out, records[k], weights_block(records[k], "model.h5", job_.config.finetune.steps));
      }
      all[specs_[k]->name] = ev.metrics;
    }
    return all;
  }

  void save_state(Checkpoint& c) override { save_finetune_state(c, rng_, records); }
  void load_state(const Checkpoint& c) override { load_finetune_state(c, rng_, records); }

  // How many training pairs were cut to fit (T5 cuts them too; a count that is not small says
  // that finetune.inputs_length or targets_length is too short for the task).
  void log_cut_training_pairs(const std::string& task, const std::vector<T5Item>& items) const {
    int64_t inputs = 0, targets = 0;
    for (const T5Item& it : items) inputs += it.input_cut, targets += it.target_cut;
    const auto share = [&](int64_t n) { return fmt::format("{} ({:.1f}%)", n, percent_of(n, items.size())); };
    if (inputs > 0 || targets > 0)
      thx::log("finetune")->info("{}: of {} training pairs, {} had inputs longer than finetune.inputs_length {} and {} "
                                 "targets longer than finetune.targets_length {} (EOS counted): cut to fit", task,
                                 items.size(), share(inputs), f_.inputs_length, share(targets), f_.targets_length);
  }

  // Task k's dev inputs as ids, cut to finetune.inputs_length with EOS last; how many were cut
  // is logged once per task, not at every evaluation.
  std::vector<std::vector<int32_t>> dev_inputs(size_t k) {
    const int64_t length = f_.inputs_length;
    std::vector<std::vector<int32_t>> inputs;
    int64_t longer = 0;
    for (const auto& e : data_[k].dev.examples) {
      bool was_cut = false;
      auto v = cut(tok_.encode(t5_input(*specs_[k], e)), size_t(length - 1), &was_cut);
      longer += was_cut;
      v.push_back(Tokenizer::kEos);
      inputs.push_back(std::move(v));
    }
    if (longer > 0 && dev_cut_told_.insert(k).second)
      thx::log("finetune")->info("{} ({}): {} of its {} inputs ({:.1f}%) are longer than finetune.inputs_length {} "
                                 "(EOS counted): cut to fit", specs_[k]->name, data_[k].dev.path, longer,
                                 inputs.size(), percent_of(longer, inputs.size()), length);
    return inputs;
  }

  // One task's dev set decoded greedily, in batches of similar input lengths.
  TaskEval evaluate_task(size_t k) {
    const auto& f = f_;
    const TaskSpec& spec = *specs_[k];
    const auto& dev = data_[k].dev.examples;
    const std::vector<std::vector<int32_t>> inputs = dev_inputs(k);
    std::vector<size_t> order(dev.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return inputs[a].size() < inputs[b].size(); });
    std::vector<std::string> texts(dev.size());
    model->eval();
    // Data parallel: rank r decodes batches r, r+W, ...; the texts are gathered.
    const size_t bs = size_t(eval_rows(f));
    for (size_t b = bs * size_t(dist::rank()); b < order.size(); b += bs * size_t(dist::world_size())) {
      check_stop();  // a signal: stop within one batch's decoding
      std::vector<const std::vector<int32_t>*> rows;
      for (size_t i = b; i < std::min(order.size(), b + bs); ++i) rows.push_back(&inputs[order[i]]);
      const Tensor ids = model->greedy_decode(pad_rows(rows).to(job_.device), f.targets_length, Tokenizer::kEos)
                             .to(torch::kCPU);  // [b,t]
      auto a = ids.accessor<int64_t, 2>();
      for (size_t r = 0; r < rows.size(); ++r) {
        std::vector<int32_t> v;
        for (int64_t j = 0; j < ids.size(1) && a[r][j] != 0 && a[r][j] != Tokenizer::kEos; ++j) v.push_back(int32_t(a[r][j]));
        texts[order[b + r]] = tok_.decode(v);
      }
    }
    model->train();
    if (dist::active()) {
      json mine = json::object();
      for (size_t b = bs * size_t(dist::rank()); b < order.size(); b += bs * size_t(dist::world_size()))
        for (size_t i = b; i < std::min(order.size(), b + bs); ++i) mine[std::to_string(order[i])] = texts[order[i]];
      for (const std::string& theirs : dist::all_gather_bytes(mine.dump())) {
        const json part = json::parse(theirs);
        for (const auto& [i, text] : part.items()) texts[std::stoul(i)] = text.get<std::string>();
      }
    }
    TaskEval ev;
    ev.examples = int64_t(dev.size());
    std::vector<int> labels;
    std::vector<double> scores;
    // Label names as the tokenizer renders them (what the model was trained to produce).
    std::vector<std::string> rendered;
    for (const auto& name : target_names(spec)) rendered.push_back(tok_.decode(tok_.encode(name)));
    for (size_t i = 0; i < dev.size(); ++i) {
      if (spec.kind == TaskKind::regression) {
        // T5 scores an answer that is no number as -1; the file gets the training scores' mean
        // instead (a number in the task's range), and the miss is counted.
        const std::optional<double> v = parse_score(texts[i]);
        scores.push_back(v.value_or(-1.0));
        if (!v) ++ev.label_misses;
        ev.predictions.push_back(fmt::format("{:.3f}", v.value_or(fallback_score_[k])));
      } else if (spec.kind == TaskKind::span) {
        ev.answers[dev[i].id] = texts[i];
        ev.predictions.push_back(texts[i]);
      } else {
        labels.push_back(text_to_label(rendered, texts[i]));
        // Submission files name classes as the task's files do. An answer that names no class
        // scores as wrong, and the file gets the most frequent training label instead (T5's
        // convention; a leaderboard rejects other text); the misses are counted.
        int l = labels.back();
        if (l < 0) l = fallback_label_[k], ++ev.label_misses;
        ev.predictions.push_back(spec.name == "copa" ? target_names(spec)[size_t(l)] : spec.labels[size_t(l)]);
      }
    }
    ev.metrics = score_task(spec, dev, labels, scores, texts);
    ev.decoded = texts;
    for (size_t i = 0; i < dev.size() && ev.samples.size() < kSamples; ++i) {
      const auto pairs = t5_training_pairs(spec, dev[i]);
      if (!pairs.empty()) ev.samples.emplace_back(texts[i], pairs.front().target);
    }
    return ev;
  }

  T5 model{nullptr};
  std::vector<TaskRecord> records;
  std::vector<const TaskSpec*> specs_;
  std::vector<Splits> data_;

 private:
  T5Item item(const std::string& input, const std::string& target) const {
    T5Item it;
    it.input = cut(tok_.encode(input), size_t(f_.inputs_length - 1), &it.input_cut);
    it.input.push_back(Tokenizer::kEos);
    it.target = cut(tok_.encode(target), size_t(f_.targets_length - 1), &it.target_cut);
    it.target.push_back(Tokenizer::kEos);
    return it;
  }

  const FinetuneJob& job_;
  const FinetuneConfig& f_;
  PretrainConfig pc_;
  Tokenizer tok_;
  std::mt19937_64 rng_;  // the mixture sampler (and, before training, the data shuffles)
  std::vector<std::vector<T5Item>> train_;
  std::set<size_t> dev_cut_told_;  // tasks whose dev inputs' cut was logged
  std::vector<double> rates_;
  std::vector<int> fallback_label_;     // per task: what a prediction file gets for a miss
  std::vector<double> fallback_score_;  // (regression: the mean training score)
  std::discrete_distribution<size_t> pick_task_;
  std::unique_ptr<Optimizer> optimizer_;
};

}  // namespace

int finetune_t5(const FinetuneJob& job) {
  const auto& f = job.config.finetune;
  T5Finetune t(job);
  if (!job.checked.t5)
    copy_parameters(t.model->named_parameters_by_path(), job.pretrained.checkpoint.params, job.pretrained.path);
  t.load(true);
  LoopOptions o;
  o.steps = f.steps, o.steps_key = "finetune.steps", o.log_every = f.log_every, o.eval_every = f.eval_every;
  o.batch_size = f.batch_size;
  o.checkpoint_every = job.config.checkpoint.every, o.keep = job.config.checkpoint.keep;
  o.schedule = job.config.optimizer;
  o.clip_global_norm = clip_global_norm(job.config.optimizer, false);
  o.checkpoint_dir = (fs::path(job.out) / "checkpoints").string();
  o.metrics_file = (fs::path(job.out) / "metrics.jsonl").string();
  o.open_outputs = job.open_outputs, o.config = job.yaml, o.resume = job.resume, o.eval_if_finished = false;
  o.precision = train_precision(f, job.pretrained.config), o.eval_precision = eval_precision(f, job.pretrained.config);
  o.train_memory_hint = with_th_path_advice("lower finetune.batch_size", with_dropout(job.pretrained.config, f).spec,
                                            job.device);
  o.eval_memory_hint = "lower finetune.eval_batch_size";
  if (job.config.finetune.deterministic) o.deterministic_key = "finetune.deterministic";
  const LoopResult r = train(t, o);
  if (!r.finished) return r.signal ? r.signal : SIGTERM;
  if (dist::rank() == 0) write_params((fs::path(job.out) / "model.h5").string(), t.model->named_parameters_by_path(),
               job.pretrained.config.yaml, f.steps);
  for (const auto& rec : t.records)
    thx::log("finetune")->info("{}: best at step {}: {} (the model at that step: {}; the last step's: {})", rec.task,
                               rec.best_step, show_metrics(rec.best),
                               (fs::path(job.out) / best_weights_file(rec.task)).string(),
                               (fs::path(job.out) / "model.h5").string());
  return 0;
}

std::vector<TaskEval> evaluate_t5(const FinetuneJob& job, const Checkpoint& ck, const std::string& file) {
  T5Finetune t(job);
  copy_parameters(t.model->named_parameters_by_path(), ck.params, file);
  t.load(false);
  std::vector<TaskEval> out;
  for (size_t k = 0; k < t.specs_.size(); ++k) out.push_back(t.evaluate_task(k));
  return out;
}

void eval_t5(const FinetuneJob& job, const Checkpoint& ck, const std::string& file) {
  T5Finetune t(job);
  copy_parameters(t.model->named_parameters_by_path(), ck.params, file);
  t.load(false);
  for (size_t k = 0; k < t.specs_.size(); ++k) {
    const TaskEval ev = t.evaluate_task(k);
    note_eval(t.records[k], ck.step, ev);
    write_predictions(job.out, *t.specs_[k], t.data_[k].dev.examples, ev);
    write_record(job.out, t.records[k]);
    thx::log("eval")->info("{} dev ({} examples): {}", t.records[k].task, ev.examples, show_metrics(ev.metrics));
  }
}

}  // namespace thx
