// prepare.h: `thx prepare`, a corpus tokenized once into compressed HDF5 shards.
//
// Output directory:
//   manifest.json          inputs (with size and mtime), options, tokenizer, counts, shards
//   train-00000.h5 ...     /tokens int32 [T] (gzip), /doc_offsets int64 [D+1]
//   heldout-00000.h5 ...   the same for the held-out split
// The held-out split is deterministic: whole files (heldout_files) or, by fraction, each
// document by a hash of its text, so that it does not depend on file order. A re-run with
// the same inputs, tokenizer and options does nothing; shards and the manifest are written
// atomically, the manifest last.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/corpus.h"

namespace thx {

struct PrepareOptions {
  std::vector<std::string> inputs;        // files, directories, globs
  CorpusFormat format = CorpusFormat::auto_detect;
  std::string tokenizer;                  // SentencePiece .model
  std::string out_dir;
  double heldout_fraction = 0.01;         // used when heldout_files is empty
  std::vector<std::string> heldout_files; // files, directories, globs; all of their documents
  int64_t shard_tokens = int64_t{1} << 24;
};

struct PrepareResult {
  bool up_to_date = false;  // nothing was done
  int64_t documents[2] = {0, 0}, tokens[2] = {0, 0};  // train, heldout
  CorpusStats stats;
};

PrepareResult run_prepare(const PrepareOptions& options);

// One split of a prepared directory, in memory.
struct TokenCorpus {
  std::vector<int32_t> tokens;
  std::vector<int64_t> offsets;  // document d is tokens[offsets[d], offsets[d+1])
  int64_t vocab_size = 0;        // of the tokenizer that produced it (S + 100)
  std::string tokenizer;         // its path, as recorded
  std::string convention = "t5"; // its id convention: t5 | albert (tokenizer.h)
  int64_t documents() const { return int64_t(offsets.size()) - 1; }
};

// ConfigError on data.prepared where its tokenizer's id convention `have` is not the model's
// `want` ("t5": T5's; "albert": BERT's and ALBERT's), saying how to make data with the right one.
void require_prepared_convention(const std::string& prepared, const std::string& have, const std::string& want);

// InputError naming the file for a missing or corrupt manifest or shard.
TokenCorpus load_split(const std::string& prepared_dir, const std::string& split);

// How to make a missing prepared directory: "scripts/prepare_data.sh NAME" for the data sets
// the shipped configs name (data/prepared/quickstart, enwiki, wiki-books-albert), else
// "thx prepare ... --out DIR".
std::string prepare_command(const std::string& prepared_dir);

}  // namespace thx
