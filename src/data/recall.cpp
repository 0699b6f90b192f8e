#include "data/recall.h"
#include "data/stream.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "common/error.h"
#include "data/span_corruption.h"  // random_below

namespace thx {

int64_t recall_keys(const RecallOptions& o) { return (o.vocab_size - 2) / 2; }
int64_t recall_values(const RecallOptions& o) { return o.vocab_size - 2 - recall_keys(o); }

RecallProblem recall_options_problem(const RecallOptions& o) {
  if (o.vocab_size < 4 || o.vocab_size > (int64_t(1) << 30))
    return {"data.recall.vocab_size", fmt::format("{} is invalid: must be in [4, 2^30] (0 padding, 1 reserved, "
                       "then keys and values)", o.vocab_size)};
  if (o.pairs < 1) return {"data.recall.pairs", fmt::format("{} is invalid: must be >= 1", o.pairs)};
  if (o.pairs > recall_keys(o))
    return {"data.recall.pairs", fmt::format("{} is more than the {} distinct keys data.recall.vocab_size {} allows "
                       "(keys are half the ids after 0 and 1)", o.pairs, recall_keys(o), o.vocab_size)};
  if (o.queries < 1 || o.queries > o.pairs)
    return {"data.recall.queries", fmt::format("{} is invalid: must be in [1, data.recall.pairs = {}] (each query "
                       "asks a distinct key)", o.queries, o.pairs)};
  if (o.length < 2 * o.pairs + o.queries)
    return {"data.inputs_length", fmt::format("{} is too short for {} pairs and {} queries (needs 2 * pairs + "
                       "queries = {})", o.length, o.pairs, o.queries, 2 * o.pairs + o.queries)};
  return {};
}

RecallExample recall_candidate(const RecallOptions& o, uint64_t seed, uint64_t index) {
  std::mt19937_64 rng(mix_seed(seed ^ mix_seed(index + 0x5eed)));
  const int64_t K = recall_keys(o), V = recall_values(o), P = o.pairs, Q = o.queries;
  RecallExample e;
  // P distinct keys: Floyd's sampling, then shuffled (Floyd's order is not uniform).
  std::vector<int32_t> keys;
  for (int64_t j = K - P; j < K; ++j) {
    const auto t = int32_t(random_below(rng, uint64_t(j) + 1));
    keys.push_back(std::find(keys.begin(), keys.end(), t) == keys.end() ? t : int32_t(j));
  }
  for (int64_t i = P - 1; i > 0; --i) std::swap(keys[i], keys[random_below(rng, uint64_t(i) + 1)]);
  for (int64_t i = 0; i < P; ++i) {
    e.keys.push_back(2 + keys[i]);
    e.values.push_back(int32_t(2 + K + int64_t(random_below(rng, uint64_t(V)))));
  }
  std::vector<int32_t> order(P);
  std::iota(order.begin(), order.end(), 0);
  for (int64_t i = 0; i < Q; ++i) std::swap(order[i], order[i + int64_t(random_below(rng, uint64_t(P - i)))]);
  e.queried.assign(order.begin(), order.begin() + Q);
  e.ids.assign(size_t(o.length), 0);
  for (int64_t i = 0; i < P; ++i) e.ids[2 * i] = e.keys[i], e.ids[2 * i + 1] = e.values[i];
  for (int64_t j = 0; j < Q; ++j) e.ids[2 * P + j] = e.keys[e.queried[j]];
  return e;
}

bool recall_held_out(const RecallExample& e) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the ids, then mixed
  for (const int32_t id : e.ids) h = (h ^ uint64_t(uint32_t(id))) * 0x100000001b3ull;
  return mix_seed(h) % 8 == 0;
}

RecallStream::RecallStream(RecallOptions o, uint64_t seed, bool held_out)
    : o_(o), seed_(seed), held_out_(held_out) {
  if (const RecallProblem p = recall_options_problem(o_); !p.key.empty())
    throw InputError(p.key + ": " + p.message);
}

RecallExample RecallStream::next_example() {
  for (;;) {
    RecallExample e = recall_candidate(o_, seed_, uint64_t(state_.example++));
    if (recall_held_out(e) == held_out_) return e;
  }
}

Batch RecallStream::next(int64_t batch_size) {
  const int64_t n = o_.length, Q = o_.queries, P = o_.pairs;
  Batch b;
  b.inputs = torch::zeros({batch_size, n}, torch::kInt64);
  b.token_types = torch::zeros({batch_size, n}, torch::kInt64);
  b.positions = torch::zeros({batch_size, Q}, torch::kInt64);
  b.targets = torch::zeros({batch_size, Q}, torch::kInt64);
  b.labels = torch::full({batch_size}, -1, torch::kInt64);
  auto in = b.inputs.accessor<int64_t, 2>(), pos = b.positions.accessor<int64_t, 2>(),
       tgt = b.targets.accessor<int64_t, 2>();
  for (int64_t r = 0; r < batch_size; ++r) {
    const RecallExample e = next_example();
    for (int64_t i = 0; i < n; ++i) in[r][i] = e.ids[size_t(i)];
    for (int64_t j = 0; j < Q; ++j) pos[r][j] = 2 * P + j, tgt[r][j] = e.values[size_t(e.queried[size_t(j)])];
  }
  return b;
}

}  // namespace thx
