#include "training/objective.h"

#include "common/error.h"
#include "models/encoder.h"
#include "models/t5.h"

// Shapes: Batch (data/stream.h): b examples, n input tokens, t target tokens (T5), P masked
// positions (BERT/ALBERT).
namespace thx {
namespace {

using torch::Tensor;

torch::Tensor cat_field(const std::vector<Batch>& micro, Tensor Batch::*field) {
  std::vector<Tensor> parts;
  for (const auto& m : micro) parts.push_back((m.*field).to(torch::kInt32));
  return torch::cat(parts);
}

// T5 span corruption: inputs -> targets through the decoder (teacher forcing).
class SpanCorruption : public Objective {
 public:
  SpanCorruption(const ModelSpec& spec, int64_t vocab) : model_(spec, vocab) {}
  torch::nn::Module& module() override { return *model_; }
  std::vector<std::pair<std::string, Tensor>> params() const override { return model_->named_parameters_by_path(); }
  Out forward(const Batch& b) override {
    const auto r = model_->forward(b.inputs, b.decoder_inputs, b.targets);
    Out o;
    o.loss = r.loss;
    o.sums.nll = r.nll_sum.item<double>(), o.sums.tokens = r.tokens;
    return o;
  }
  EvalMetrics metrics(const EvalSums& s) const override {
    EvalMetrics m;
    m.ln_ppl = s.nll / double(std::max<int64_t>(s.tokens, 1));
    return m;
  }
  Batch random_batch(const DataConfig& d, int64_t rows, int64_t vocab, const torch::Device& device) const override {
    const auto on = torch::TensorOptions().device(device).dtype(torch::kInt64);
    Batch b;
    b.inputs = torch::randint(2, vocab, {rows, d.inputs_length}, on);    // [b,n]
    b.targets = torch::randint(2, vocab, {rows, d.targets_length}, on);  // [b,t]
    b.decoder_inputs = torch::zeros_like(b.targets);                     // [b,t]: targets shifted right
    b.decoder_inputs.narrow(1, 1, d.targets_length - 1).copy_(b.targets.narrow(1, 0, d.targets_length - 1));
    return b;
  }
  std::vector<std::pair<std::string, Tensor>> probe_fields(const std::vector<Batch>& micro) const override {
    return {{"inputs", cat_field(micro, &Batch::inputs)},
            {"decoder_inputs", cat_field(micro, &Batch::decoder_inputs)},
            {"targets", cat_field(micro, &Batch::targets)}};
  }

 private:
  T5 model_;
};

// BERT/ALBERT: the masked tokens predicted, and (with a head) the sentence task.
class MaskedLm : public Objective {
 public:
  MaskedLm(const ModelSpec& spec, int64_t vocab, bool sentence_head) : model_(spec, vocab, sentence_head) {}
  torch::nn::Module& module() override { return *model_; }
  std::vector<std::pair<std::string, Tensor>> params() const override { return model_->named_parameters_by_path(); }
  Out forward(const Batch& b) override {
    const auto r = model_->forward(b.inputs, b.token_types, b.positions, b.targets, b.labels);
    Out o;
    o.loss = r.mlm_loss, o.second = r.sentence_loss;
    o.sums.nll = r.mlm_nll_sum.item<double>(), o.sums.tokens = r.mlm_tokens;
    o.sums.correct = r.mlm_correct;
    o.sums.sentence_count = r.sentence_count, o.sums.sentence_correct = r.sentence_correct;
    return o;
  }
  double second_weight(const Batch& b) const override {
    return b.labels.defined() ? double((b.labels >= 0).sum().item<int64_t>()) : 0.0;
  }
  EvalMetrics metrics(const EvalSums& s) const override {
    EvalMetrics m;
    m.ln_ppl = s.nll / double(std::max<int64_t>(s.tokens, 1));
    m.mlm_accuracy = double(s.correct) / double(std::max<int64_t>(s.tokens, 1));
    if (s.sentence_count > 0) m.sentence_accuracy = double(s.sentence_correct) / double(s.sentence_count);
    return m;
  }
  Batch random_batch(const DataConfig& d, int64_t rows, int64_t vocab, const torch::Device& device) const override {
    const auto on = torch::TensorOptions().device(device).dtype(torch::kInt64);
    const int64_t n = d.inputs_length, P = d.max_predictions_per_seq;
    Batch b;
    b.inputs = torch::randint(5, vocab, {rows, n}, on), b.token_types = torch::zeros({rows, n}, on);  // [b,n]
    b.positions = torch::randint(1, n, {rows, P}, on), b.targets = torch::randint(5, vocab, {rows, P}, on);  // [b,P]
    b.labels = torch::randint(0, 2, {rows}, on);  // [b]
    return b;
  }
  std::vector<std::pair<std::string, Tensor>> probe_fields(const std::vector<Batch>& micro) const override {
    THX_CHECK(micro.size() == 1, "step-probe: BERT/ALBERT probes take train.grad_accum 1");
    return {{"inputs", cat_field(micro, &Batch::inputs)},
            {"token_types", cat_field(micro, &Batch::token_types)},
            {"positions", cat_field(micro, &Batch::positions)},
            {"targets", cat_field(micro, &Batch::targets)},
            {"labels", cat_field(micro, &Batch::labels)}};
  }

 private:
  EncoderModel model_;
};

}  // namespace

std::unique_ptr<Objective> make_objective(const ModelSpec& spec, int64_t vocab, bool sentence_head) {
  if (spec.model.encoder_only()) return std::make_unique<MaskedLm>(spec, vocab, sentence_head);
  return std::make_unique<SpanCorruption>(spec, vocab);
}

}  // namespace thx
