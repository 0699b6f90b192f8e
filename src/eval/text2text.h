// text2text.h: T5's text-to-text formats (Raffel et al., 2019, appendix D), for fine-tuning
// T5 on every task.
//
//   GLUE / SuperGLUE: "<task> <key1>: <text1> <key2>: <text2> ..." with the keys in T5's order
//     (alphabetical, as its glue preprocessor sorts them; MultiRC: question, answer,
//     paragraph), the target is the label's name:
//       mnli hypothesis: ... premise: ...     -> entailment | neutral | contradiction
//       sst2 sentence: ...                    -> negative | positive
//       stsb sentence1: ... sentence2: ...    -> the score rounded to 0.2, "3.8"
//   SQuAD:  "question: <q> context: <c>"       -> the first gold answer ("" when unanswerable)
//   ReCoRD: "record query: <q> entities: <e1>, <e2> passage: <p>" -> the answer
//   RACE:   "race question: <q> options: A: .. B: .. C: .. D: .. article: <a>" -> A..D
// T5 also pads punctuation with spaces for SQuAD; thx leaves the text as it is (its
// SentencePiece model sees the raw text in pretraining too).
//
// Decoded text maps back to a label by exact match with a label name; anything else is a miss
// (label -1, scored wrong), and an STS-B string that is not a number scores -1, as T5's
// string_to_float default.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "eval/tasks.h"

namespace thx {

struct TextExample {
  std::string input, target;
};

// The names T5 writes as targets for a task's classes (e.g. sst2: negative, positive).
const std::vector<std::string>& target_names(const TaskSpec& spec);

std::string t5_input(const TaskSpec& spec, const TaskExample& e);
// The training pairs of one example: one (ReCoRD: one per gold answer), none when unlabeled.
std::vector<TextExample> t5_training_pairs(const TaskSpec& spec, const TaskExample& e);

int text_to_label(const TaskSpec& spec, const std::string& text);  // -1: a miss
// The same against given renderings of the label names: a tokenizer that lacks a character
// of a name (a Wikipedia vocabulary without "_" for "not_entailment") decodes the name as
// decode(encode(name)), and that is what a model trained on those targets can produce.
int text_to_label(const std::vector<std::string>& rendered_names, const std::string& text);
double text_to_score(const std::string& text);                     // STS-B; -1 when not a number
std::optional<double> parse_score(const std::string& text);         // the same; nullopt when not a number
std::string score_to_text(double score);  // round(5 s) / 5 (half to even, as tf.round), "%.1f"

}  // namespace thx
