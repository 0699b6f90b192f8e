// squad_spans.h: SQuAD's span prediction as BERT's and ALBERT's run_squad do it: doc-stride
// windows over the context's tokens, each token scored in the window where it has the most
// context, and the best (start, end) pair of the n-best starts and ends within
// max_answer_length; the [CLS] position's score is "no answer" (SQuAD v2).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace thx {

// SQuAD span prediction over the windows of one example (exposed for tests).
struct SpanWindow {
  std::vector<int64_t> token_to_word;     // per feature position: the context word, or -1
  std::vector<bool> max_context;          // per feature position: this window is its best
  std::vector<float> start_logits, end_logits;
};
struct SpanAnswer {
  int64_t start_word = -1, end_word = -1;  // -1: no answer
  double score = -1e30, null_score = 1e30;
};
SpanAnswer best_span(const std::vector<SpanWindow>& windows, int64_t n_best, int64_t max_answer_tokens);

// Windows over a document of `doc_tokens` tokens with room for `room` per window: starts.
std::vector<std::pair<int64_t, int64_t>> doc_windows(int64_t doc_tokens, int64_t room, int64_t stride);
// Whether the token at `pos` of the document has its maximum context in window w (BERT's
// _check_is_max_context: min(left, right) + 0.01 * length, the first window wins ties).
bool is_max_context(const std::vector<std::pair<int64_t, int64_t>>& windows, size_t w, int64_t pos);

// The words of the predicted span (whitespace-separated words of the context), joined by single
// spaces; "" for no answer.
std::string answer_text(const std::string& context, const SpanAnswer& a);

}  // namespace thx
