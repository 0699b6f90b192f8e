// mlm.h: BERT's and ALBERT's pretraining examples: masked-LM with ALBERT's n-gram whole-word
// masking, plus sentence-order prediction (ALBERT), next-sentence prediction (BERT) or none.
//
// Example k, from a seeded generator of (seed, k):
//   1. length: max_seq_length - 3 (- 2 without a sentence task); with short_seq_prob, a length
//      uniform in [2, that]. The next chunk of that many tokens is cut from the current
//      document (documents in an order shuffled per epoch; a document's tail shorter than 2
//      tokens is skipped). Shards hold no sentence boundaries, so segments are cut at random
//      word starts (SentencePiece's U+2581), ALBERT's "consecutive spans of one document".
//   2. sop: A = chunk[0,c), B = chunk[c,len) for a random word-start cut c; with p = 0.5 they are
//      swapped and the label is 1 (ALBERT's is_random_next). nsp: with p = 0.5, B is a span of a
//      random other document and the label is 1. none: one segment, label -1.
//   3. tokens [CLS] A [SEP] B [SEP], token types 0 up to the first [SEP], then 1.
//   4. masking, as ALBERT's create_masked_lm_predictions with ngram masking:
//      units = whole words (a word-start piece and the pieces that continue it; [CLS]/[SEP]
//      never); num_to_predict = min(max_predictions_per_seq, max(1, round(len * prob)));
//      units visited in random order; from unit i an n-gram of n <= max_ngram whole units is
//      drawn with p(n) ~ 1/n (only n-grams inside the sequence), shortened while it would pass
//      num_to_predict, skipped if it still would or if it touches a covered position. Each
//      chosen token: 80% [MASK], 10% itself, 10% a random ordinary piece.
// The random bits differ from ALBERT's numpy draws; the distribution does not.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "data/prepare.h"
#include "data/stream.h"

namespace thx {

struct MlmOptions {
  int64_t max_seq_length = 512;
  double masked_lm_prob = 0.15;
  int64_t max_predictions = 20;     // ALBERT at 512: 20
  int64_t max_ngram = 3;
  double short_seq_prob = 0.1;
  std::string sentence = "sop";     // sop | nsp | none
  bool whole_word = true;
};

struct MaskedExample {
  std::vector<int32_t> ids, types;       // the masked sequence, unpadded
  std::vector<int32_t> positions, targets;  // sorted masked positions and their original ids
  int label = -1;                        // 1: swapped (sop) / random (nsp); -1: none
  std::vector<int> ngrams;               // the length in units of each masked n-gram (tests)
};

// Masks `ids` in place as step 4 above. vocab_size: random replacements come from
// [5, vocab_size) (ALBERT's ordinary pieces).
MaskedExample mask_tokens(std::vector<int32_t> ids, std::vector<int32_t> types,
                          const std::vector<uint8_t>& word_starts, const MlmOptions& o,
                          int64_t vocab_size, std::mt19937_64& rng);

class MlmStream : public ExampleStream {
 public:
  // word_starts: Tokenizer::word_starts() of the corpus's (ALBERT-convention) tokenizer.
  MlmStream(const TokenCorpus& corpus, std::vector<uint8_t> word_starts, MlmOptions o,
            uint64_t seed, bool shuffle);

  MaskedExample next_example();
  Batch next(int64_t batch_size) override;
  const StreamState& state() const override { return state_; }
  void set_state(const StreamState& s) override;
  const MlmOptions& options() const { return o_; }

 private:
  void start_epoch();
  const TokenCorpus& corpus_;
  std::vector<uint8_t> word_starts_;
  MlmOptions o_;
  uint64_t seed_;
  bool shuffle_;
  StreamState state_;
  std::vector<int64_t> order_;
};

// The corpus's tokenizer, loaded from the path its manifest records, checked to follow
// ALBERT's ids; returns its word starts. InputError naming `prepared` otherwise.
std::vector<uint8_t> mlm_word_starts(const TokenCorpus& corpus, const std::string& prepared);

}  // namespace thx
