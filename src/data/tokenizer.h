// tokenizer.h: SentencePiece with T5's id conventions.
//
// Ids: pad 0, eos 1, unk 2, then the model's other pieces; after the S SentencePiece pieces
// come 100 sentinels, <extra_id_k> = S + 99 - k (T5's 32000 pieces: <extra_id_0> = 32099).
// A model whose pad/eos/unk ids are not 0/1/2 is refused: T5's spiece.model and models from
// train_sentencepiece() both follow this. Embeddings may be padded to a multiple of 128
// (padded_vocab_size); padded ids are never produced.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/corpus.h"

namespace thx {

class Tokenizer {
 public:
  static constexpr int32_t kPad = 0, kEos = 1, kUnk = 2;
  static constexpr int64_t kSentinels = 100;

  // InputError naming the file when it cannot be loaded or breaks the id conventions.
  explicit Tokenizer(const std::string& model_path);
  ~Tokenizer();

  std::vector<int32_t> encode(const std::string& text) const;
  // Sentinels print as <extra_id_k>; pad and eos are dropped.
  std::string decode(const std::vector<int32_t>& ids) const;

  int64_t pieces() const { return pieces_; }                     // S
  int64_t vocab_size() const { return pieces_ + kSentinels; }  // S + 100
  int32_t sentinel(int64_t k) const { return int32_t(pieces_ + kSentinels - 1 - k); }
  const std::string& path() const { return path_; }

 private:
  void* handle_ = nullptr;  // a SentencePieceProcessor inside the plugin (spm_plugin.cpp)
  int64_t pieces_ = 0;
  std::string path_;
};

// v rounded up to a multiple of `multiple` (T5 pads 32100 to 32128).
inline int64_t padded_vocab_size(int64_t v, int64_t multiple = 128) {
  return (v + multiple - 1) / multiple * multiple;
}

struct SpmTrainOptions {
  std::vector<std::string> inputs;  // files, directories, globs
  CorpusFormat format = CorpusFormat::auto_detect;
  std::string model_prefix;         // writes <prefix>.model and <prefix>.vocab
  int64_t pieces = 8000;            // S, including pad, eos and unk
  int64_t max_sentences = 1000000;  // sampled uniformly (seeded) from all corpus lines
  double character_coverage = 0.9995;
  uint64_t seed = 0;
  int64_t threads = 0;              // 0: every core
};

// Trains a unigram SentencePiece model (as T5's) with pad 0, eos 1, unk 2 and no bos.
// Returns the corpus statistics. InputError for unusable inputs or options.
CorpusStats train_sentencepiece(const SpmTrainOptions& options);

}  // namespace thx
