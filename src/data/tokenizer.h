// tokenizer.h: SentencePiece with T5's or ALBERT's id conventions.
//
// t5:     pad 0, eos 1, unk 2, then the model's other pieces; after the S SentencePiece pieces
//         come 100 sentinels, <extra_id_k> = S + 99 - k (T5's 32000 pieces: <extra_id_0> =
//         32099). vocab_size() = S + 100.
// albert: <pad> 0, <unk> 1, [CLS] 2, [SEP] 3, [MASK] 4 (control pieces), no eos, no
//         sentinels: vocab_size() = S (ALBERT's 30000).
// The convention is read from the model; any other layout is refused. T5's spiece.model,
// ALBERT's 30k-clean.model and models from train_sentencepiece() follow one of them.
// Embeddings may be padded to a multiple of 128 (padded_vocab_size); padded ids are never
// produced.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/corpus.h"

namespace thx {

enum class TokenizerConvention { t5, albert };
const char* convention_name(TokenizerConvention c);
// "t5" | "albert"; InputError naming `what` otherwise.
TokenizerConvention parse_convention(const std::string& s, const std::string& what);

class Tokenizer;
// InputError unless `tok` (loaded from `path`) has `want`'s ids: one line naming the file, what
// `who` (say "T5 fine-tuning") needs, and the command that trains a fitting tokenizer.
void require_convention(const Tokenizer& tok, TokenizerConvention want, const std::string& path,
                        const std::string& who);

class Tokenizer {
 public:
  static constexpr int32_t kPad = 0, kEos = 1, kUnk = 2;  // t5
  static constexpr int32_t kAlbertUnk = 1, kCls = 2, kSep = 3, kMask = 4;  // albert
  static constexpr int64_t kSentinels = 100;

  // InputError naming the file when it cannot be loaded or breaks the id conventions.
  explicit Tokenizer(const std::string& model_path);
  ~Tokenizer();

  std::vector<int32_t> encode(const std::string& text) const;
  // Sentinels print as <extra_id_k>; pad and eos are dropped.
  std::string decode(const std::vector<int32_t>& ids) const;

  TokenizerConvention convention() const { return convention_; }
  int64_t pieces() const { return pieces_; }  // S
  int64_t vocab_size() const {                // t5: S + 100; albert: S
    return convention_ == TokenizerConvention::t5 ? pieces_ + kSentinels : pieces_;
  }
  std::string piece(int32_t id) const;
  // One flag per id of vocab_size(): 1 where the piece starts a word (SentencePiece's U+2581
  // prefix). Control pieces, pad, unk and sentinels are 0. ALBERT's whole-word masking units.
  std::vector<uint8_t> word_starts() const;
  int32_t sentinel(int64_t k) const { return int32_t(pieces_ + kSentinels - 1 - k); }
  const std::string& path() const { return path_; }

 private:
  void* handle_ = nullptr;  // a SentencePieceProcessor inside the plugin (spm_plugin.cpp)
  int64_t pieces_ = 0;
  TokenizerConvention convention_ = TokenizerConvention::t5;
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
  TokenizerConvention convention = TokenizerConvention::t5;
};

// Trains a unigram SentencePiece model (as T5's and ALBERT's) with the convention's ids: t5:
// pad 0, eos 1, unk 2, no bos; albert: pad 0, unk 1, control [CLS] [SEP] [MASK] 2-4, no eos/bos.
// Returns the corpus statistics. InputError for unusable inputs or options.
CorpusStats train_sentencepiece(const SpmTrainOptions& options);

}  // namespace thx
