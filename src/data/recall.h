// recall.h: multi-query associative recall (MQAR; Arora et al. 2023, "Zoology"), a synthetic
// source of encoder (MLM-style) batches that tests what attention must do to discriminate
// between keys (`data.synthetic: associative_recall`, configs/mini/recall.yaml).
//
// Ids: 0 padding, 1 reserved, keys [2, 2 + K), values [2 + K, vocab_size), K = (vocab_size - 2) / 2.
// An example of P pairs and Q queries, inputs_length n >= 2P + Q:
//
//   k_1 v_1 k_2 v_2 ... k_P v_P  q_1 ... q_Q  0 ... 0
//
// with P distinct keys, values drawn with repetition, and the queries Q distinct keys of the
// example in random order. The prediction positions are those of the queries and the targets
// their keys' values: a query is answered only by finding its key among the pairs. (Zoology
// places queries at random gaps after the pairs; here they follow them directly.)
//
// Candidate k is a function of (seed, k) alone. Every possible example has a class from a hash
// of its tokens: one in 8 is held out. The training stream skips held-out-class candidates
// and the held-out stream keeps only those, so the two can never share an example, whatever
// the seeds. The stream (RecallStream, data/stream.h) keeps the next candidate's index as its
// state (StreamState::example). This header includes no LibTorch (config.h reads the options).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace thx {

struct RecallOptions {
  int64_t vocab_size = 256;
  int64_t pairs = 16;
  int64_t queries = 4;
  int64_t length = 64;  // inputs_length
};

struct RecallExample {
  std::vector<int32_t> keys, values;  // [P]: the pairs, in sequence order
  std::vector<int32_t> queried;       // [Q]: index into keys of each query, in sequence order
  std::vector<int32_t> ids;           // [length]: the sequence, padded with 0
};

// Why the options cannot make examples: the key at fault (data.recall.vocab_size,
// data.recall.pairs, data.recall.queries or data.inputs_length) and what is allowed; an empty
// key if they can.
struct RecallProblem {
  std::string key, message;
};
RecallProblem recall_options_problem(const RecallOptions& o);

int64_t recall_keys(const RecallOptions& o);    // K
int64_t recall_values(const RecallOptions& o);  // vocab_size - 2 - K

// Candidate `index` of the generator seeded `seed`, and whether it belongs to the held-out class.
RecallExample recall_candidate(const RecallOptions& o, uint64_t seed, uint64_t index);
bool recall_held_out(const RecallExample& e);

}  // namespace thx
