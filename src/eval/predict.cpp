#include "eval/predict.h"

#include <algorithm>
#include <regex>

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "common/runtime.h"
#include "data/tokenizer.h"
#include "models/t5.h"
#include "training/loop.h"
#include "common/signals.h"

// Shapes: b lines in a batch, n input tokens, t decoded tokens.
namespace thx {

namespace {

// Tasks whose examples are their text fields and nothing else.
bool text_fields_only(const TaskSpec& s) {
  if (s.kind != TaskKind::classification && s.kind != TaskKind::regression) return false;
  for (const char* other : {"wic", "wsc", "multirc", "record", "copa"})
    if (s.name == other) return false;
  return true;
}

// The first k of `items`, comma-separated.
std::string first_lines_joined(const std::vector<std::string>& items, size_t k) {
  std::string out;
  for (size_t i = 0; i < std::min(k, items.size()); ++i) out += (i ? ", " : "") + items[i];
  return out;
}

std::string text_tasks() {
  std::string names;
  for (const auto& s : task_specs())
    if (text_fields_only(s)) names += (names.empty() ? "" : ", ") + s.name;
  return names;
}

}  // namespace

std::vector<TaskExample> predict_examples(const std::string& task, const std::vector<std::string>& lines,
                                          const std::string& where) {
  const TaskSpec& s = task_spec(task);
  THX_CHECK(text_fields_only(s), "predict --task {}: its examples need more than text fields; thx predict takes {} "
            "(use thx eval on a file in the task's own format for the others)", task, text_tasks());
  std::vector<TaskExample> out;
  for (size_t i = 0; i < lines.size(); ++i) {
    TaskExample e;
    e.id = std::to_string(i), e.line = int64_t(i + 1);
    std::string field;
    for (char c : lines[i] + "\t") {
      if (c != '\t') {
        field += c;
        continue;
      }
      e.text.push_back(field), field.clear();
    }
    std::string names;
    for (const auto& f : s.fields) names += (names.empty() ? "" : ", ") + f;
    THX_CHECK(e.text.size() == s.fields.size(), "{}:{}: task {} takes {} tab-separated field{} ({}), this line has {}",
              where, i + 1, task, s.fields.size(), s.fields.size() == 1 ? "" : "s", names, e.text.size());
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<int32_t> span_filling_input(const Tokenizer& tok, const std::string& line, int64_t inputs_length,
                                        const std::string& where, int64_t* ids_before_cut) {
  static const std::regex marker("<extra_id_(\\d+)>");
  std::vector<int32_t> ids;
  size_t at = 0;
  for (std::sregex_iterator it(line.begin(), line.end(), marker), end; it != end; ++it) {
    const auto piece = tok.encode(line.substr(at, size_t(it->position()) - at));
    ids.insert(ids.end(), piece.begin(), piece.end());
    const int64_t k = std::stoll((*it)[1].str().substr(0, 4));
    THX_CHECK(k < Tokenizer::kSentinels, "{}: <extra_id_{}>: sentinels go from 0 to {}", where, k,
              Tokenizer::kSentinels - 1);
    ids.push_back(tok.sentinel(k));
    at = size_t(it->position() + it->length());
  }
  const auto rest = tok.encode(line.substr(at));
  ids.insert(ids.end(), rest.begin(), rest.end());
  if (ids_before_cut) *ids_before_cut = int64_t(ids.size());
  if (int64_t(ids.size()) > inputs_length - 1) ids.resize(size_t(std::max<int64_t>(inputs_length - 1, 0)));
  ids.push_back(Tokenizer::kEos);
  return ids;
}

std::string span_filling_text(const Tokenizer& tok, const std::vector<int64_t>& ids) {
  std::string text;
  std::vector<int32_t> run;
  auto flush = [&] {
    if (!run.empty()) text += tok.decode(run), run.clear();
  };
  for (const int64_t id : ids) {
    if (id == Tokenizer::kPad || id == Tokenizer::kEos) break;
    const int64_t k = tok.pieces() + Tokenizer::kSentinels - 1 - id;
    if (id >= tok.pieces() && k >= 0 && k < Tokenizer::kSentinels) {
      flush();
      text += fmt::format("<extra_id_{}>", k);
    } else {
      run.push_back(int32_t(id));
    }
  }
  flush();
  return text;
}

std::vector<std::string> fill_spans(const Pretrained& model, const std::string& tokenizer,
                                    const std::vector<std::string>& lines, int64_t max_length,
                                    const std::string& where) {
  const PretrainConfig& pc = model.config;
  THX_CHECK(!pc.model.encoder_only(), "{}: a pretrained {} fills no spans; thx predict without --task takes a "
            "pretrained T5 (a fine-tuned model: --task and --config)", model.path, pc.model.type);
  const Tokenizer tok(tokenizer);
  THX_CHECK(tok.convention() == TokenizerConvention::t5, "{}: not a T5-convention tokenizer (no sentinels)", tokenizer);
  const int64_t vocab = pc.model.vocab_size > 0 ? pc.model.vocab_size : tok.vocab_size();
  T5 m(pc.spec, vocab);
  copy_parameters(m->named_parameters_by_path(), model.checkpoint.params, model.path);
  const torch::Device device = resolve_device(device_request(), "--device");
  m->to(device);
  m->eval();
  torch::NoGradGuard no_grad;
  std::vector<std::string> out;
  std::vector<std::string> cut;  // "line (ids)" of each line longer than the encoder takes
  // Progress every 10 s, within a line too: a long --max-length on a model that never ends its
  // spans decodes for a long time.
  const auto t0 = std::chrono::steady_clock::now();
  auto last = t0;
  size_t line = 0;
  const SignalScope signals;
  const auto progress = [&](int64_t step) {
    if (stop_signal() != 0)  // out of the decoding loop at once; nothing is written
      throw Interrupted(stop_signal(), fmt::format("predict: interrupted by {} while decoding line {} of {}; nothing "
                                                   "written", signal_name(stop_signal()), line + 1, lines.size()));
    if (seconds_since(last) < 10) return;
    last = std::chrono::steady_clock::now();
    thx::log("predict")->info("{}: line {} of {} ({} done in {}): {} of at most {} tokens decoded", where, line + 1,
                              lines.size(), line, format_duration(seconds_since(t0)), format_count(step + 1),
                              format_count(max_length));
  };
  thx::log("predict")->debug("{}: decoding {} lines, at most {} tokens each", where, lines.size(), max_length);
  for (size_t i = 0; i < lines.size(); ++i) {
    line = i;
    int64_t n = 0;
    const auto ids =
        span_filling_input(tok, lines[i], pc.data.inputs_length, fmt::format("{}:{}", where, i + 1), &n);
    if (n > pc.data.inputs_length - 1) cut.push_back(fmt::format("{} ({} ids)", i + 1, n));
    const torch::Tensor in = torch::tensor(std::vector<int64_t>(ids.begin(), ids.end()), torch::kInt64).unsqueeze(0);  // [1,n]
    const torch::Tensor got =
        m->greedy_decode(in.to(device), max_length, Tokenizer::kEos, progress).to(torch::kCPU).contiguous();  // [1,t]
    out.push_back(span_filling_text(tok, std::vector<int64_t>(got.data_ptr<int64_t>(), got.data_ptr<int64_t>() + got.numel())));
  }
  if (!cut.empty())
    thx::log("predict")->warn("{}: {} line{} longer than the {} ids the model was pretrained on (data.inputs_length "
                              "{}, EOS one of them), {} to its first {}: line{} {}{}",
                              where, cut.size(), cut.size() == 1 ? " is" : "s are", pc.data.inputs_length,
                              pc.data.inputs_length, cut.size() == 1 ? "cut" : "each cut", pc.data.inputs_length - 1,
                              cut.size() == 1 ? "" : "s",
                              first_lines_joined(cut, 5), cut.size() > 5 ? ", ..." : "");
  return out;
}

}  // namespace thx
