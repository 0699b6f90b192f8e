#include "eval/squad_spans.h"

#include <algorithm>
#include <numeric>

namespace thx {

std::vector<std::pair<int64_t, int64_t>> doc_windows(int64_t doc_tokens, int64_t room, int64_t stride) {
  std::vector<std::pair<int64_t, int64_t>> w;  // (start, length)
  for (int64_t start = 0;;) {
    const int64_t len = std::min(room, doc_tokens - start);
    w.emplace_back(start, std::max<int64_t>(len, 0));
    if (start + len >= doc_tokens) break;
    start += std::min(len, stride);
  }
  return w;
}

bool is_max_context(const std::vector<std::pair<int64_t, int64_t>>& windows, size_t w, int64_t pos) {
  double best = -1;
  size_t best_w = 0;
  for (size_t i = 0; i < windows.size(); ++i) {
    const auto [start, len] = windows[i];
    if (pos < start || pos >= start + len) continue;
    const int64_t left = pos - start, right = start + len - 1 - pos;
    const double score = double(std::min(left, right)) + 0.01 * double(len);
    if (score > best) best = score, best_w = i;
  }
  return best >= 0 && best_w == w;
}

SpanAnswer best_span(const std::vector<SpanWindow>& windows, int64_t n_best, int64_t max_answer_tokens) {
  SpanAnswer a;
  auto top = [&](const std::vector<float>& v) {
    std::vector<int64_t> idx(v.size());
    std::iota(idx.begin(), idx.end(), 0);
    const int64_t k = std::min<int64_t>(n_best, int64_t(v.size()));
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t x, int64_t y) { return v[x] > v[y]; });
    idx.resize(size_t(k));
    return idx;
  };
  for (const auto& w : windows) {
    if (w.start_logits.empty()) continue;
    a.null_score = std::min(a.null_score, double(w.start_logits[0]) + double(w.end_logits[0]));
    for (int64_t s : top(w.start_logits))
      for (int64_t e : top(w.end_logits)) {
        if (s >= int64_t(w.token_to_word.size()) || e >= int64_t(w.token_to_word.size())) continue;
        if (w.token_to_word[s] < 0 || w.token_to_word[e] < 0 || !w.max_context[s]) continue;
        if (e < s || e - s + 1 > max_answer_tokens) continue;
        const double score = double(w.start_logits[s]) + double(w.end_logits[e]);
        if (score > a.score) a.score = score, a.start_word = w.token_to_word[s], a.end_word = w.token_to_word[e];
      }
  }
  return a;
}

std::string answer_text(const std::string& context, const SpanAnswer& a) {
  if (a.start_word < 0) return "";
  std::vector<std::string> words;
  std::string cur;
  for (char c : context) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (!cur.empty()) words.push_back(cur), cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) words.push_back(cur);
  std::string s;
  for (int64_t w = a.start_word; w <= a.end_word && w < int64_t(words.size()); ++w) s += (s.empty() ? "" : " ") + words[size_t(w)];
  return s;
}

}  // namespace thx
