// predict.h: `thx predict`, a model's output for lines of text (a file or stdin).
//
//   A fine-tuned model (--task T, with the fine-tuning recipe and its checkpoint, as `thx
//   eval`): each line holds one example's text fields, tab-separated, in the task's order
//   (sst2: sentence; mrpc: sentence1, sentence2; boolq: question, passage ...). Each output line
//   is the prediction as `thx eval`'s files write it (a GLUE/SuperGLUE label, an STS-B score),
//   computed by the same code on the same batches; for T5 a tab and the decoded answer
//   follow, so an answer that names no label (written as the fallback label) is visible.
//   Tasks whose examples need more than text fields (options, spans, words, entities) are
//   refused with the list of those that work.
//   A pretrained T5 (no --task; a pretraining checkpoint or run directory): each line is text
//   with <extra_id_N> where spans are missing, as span corruption's inputs; the output line is
//   the greedy decoding of the targets, each sentinel written back as <extra_id_N>.
#pragma once
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "eval/finetune_config.h"

namespace thx {

// The examples of `task` in `lines` (`where` names the input in messages: "<file>:<line>").
std::vector<TaskExample> predict_examples(const std::string& task, const std::vector<std::string>& lines,
                                          const std::string& where);

// Fine-tuned predictions, one per line (see above).
std::vector<std::string> predict_task(const FinetuneRunConfig& config, const Pretrained& model,
                                      const std::string& checkpoint, const std::string& task,
                                      const std::vector<std::string>& lines, const std::string& where);

// A span-filling line as the encoder's input: its text between <extra_id_N> markers encoded
// piece by piece, each marker as sentinel N's id (T5's convention: <extra_id_N> is the
// vocabulary's last id minus N), cut to inputs_length - 1 ids, EOS last. A marker past
// <extra_id_99> is an InputError naming `where`. `ids_before_cut`, where given, gets the
// number of ids before the cut (EOS not counted).
std::vector<int32_t> span_filling_input(const Tokenizer& tok, const std::string& line, int64_t inputs_length,
                                        const std::string& where, int64_t* ids_before_cut = nullptr);
// Decoded target ids as text: the pieces between sentinels decoded, each sentinel written back
// as its <extra_id_N>; it ends at the first EOS or padding id.
std::string span_filling_text(const Tokenizer& tok, const std::vector<int64_t>& ids);

// A pretrained T5's span filling: greedy decoding of at most max_length target tokens per line.
// SIGINT or SIGTERM stops it within a decoding step: Interrupted (common/signals.h), naming the
// line it was decoding.
std::vector<std::string> fill_spans(const Pretrained& model, const std::string& tokenizer,
                                    const std::vector<std::string>& lines, int64_t max_length,
                                    const std::string& where);

}  // namespace thx
