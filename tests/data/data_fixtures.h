// data_fixtures.h: small corpora and a tokenizer trained on them, for the data tests.
#pragma once
#include <string>

#include "data/tokenizer.h"
#include "test_util.h"

namespace thx::test {

// Deterministic English-like text: `docs` documents separated by blank lines.
inline std::string synthetic_corpus(int docs, int sentences_per_doc = 6) {
  static const char* words[] = {"the", "model", "attention", "heads", "talk", "to", "each",
                                "other", "and", "learn", "a", "projection", "across", "layers",
                                "of", "text", "with", "softmax", "weights", "values", "keys",
                                "queries", "in", "training", "data", "is", "large"};
  std::string out;
  uint64_t x = 88172645463325252ULL;
  for (int d = 0; d < docs; ++d) {
    for (int s = 0; s < sentences_per_doc; ++s) {
      std::string sent;
      const int len = 5 + int(x % 9);
      for (int w = 0; w < len; ++w) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        sent += (w ? " " : "") + std::string(words[x % 27]);
      }
      sent[0] = char(std::toupper(sent[0]));
      out += sent + ". ";
    }
    out += "\n\n";
  }
  return out;
}

// A SentencePiece model of `pieces` pieces trained on synthetic_corpus(200), in `dir`.
inline std::string tiny_tokenizer(const TempDir& dir, int64_t pieces = 64,
                                  TokenizerConvention convention = TokenizerConvention::t5) {
  const std::string corpus = dir.write("spm_corpus.txt", synthetic_corpus(200));
  SpmTrainOptions o;
  o.inputs = {corpus};
  o.format = CorpusFormat::text;
  o.model_prefix = dir.file("tiny");
  o.pieces = pieces;
  o.threads = 1;
  o.convention = convention;
  train_sentencepiece(o);
  return dir.file("tiny.model");
}

}  // namespace thx::test
