#include "data/mlm.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "common/error.h"
#include "data/span_corruption.h"
#include "data/tokenizer.h"

namespace thx {
namespace {

constexpr int32_t kCls = Tokenizer::kCls, kSep = Tokenizer::kSep, kMask = Tokenizer::kMask;

double uniform(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1.0p-53; }

}  // namespace

MaskedExample mask_tokens(std::vector<int32_t> ids, std::vector<int32_t> types,
                          const std::vector<uint8_t>& word_starts, const MlmOptions& o,
                          int64_t vocab_size, std::mt19937_64& rng) {
  MaskedExample ex;
  const int64_t n = int64_t(ids.size());
  // Whole-word units of token positions; [CLS] and [SEP] belong to none.
  std::vector<std::vector<int32_t>> units;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t t = ids[size_t(i)];
    if (t == kCls || t == kSep) continue;
    const bool starts = t < int64_t(word_starts.size()) && word_starts[size_t(t)];
    const bool continues = o.whole_word && !starts && !units.empty() && units.back().back() == i - 1;
    if (continues) units.back().push_back(int32_t(i));
    else units.push_back({int32_t(i)});
  }
  const int64_t want = std::min<int64_t>(
      o.max_predictions, std::max<int64_t>(1, int64_t(std::nearbyint(double(n) * o.masked_lm_prob))));
  std::vector<int64_t> starts(units.size());
  for (size_t i = 0; i < starts.size(); ++i) starts[i] = int64_t(i);
  for (int64_t i = int64_t(starts.size()) - 1; i > 0; --i)
    std::swap(starts[size_t(i)], starts[random_below(rng, uint64_t(i + 1))]);
  std::vector<uint8_t> covered(size_t(n), 0);
  std::vector<int32_t> chosen;
  auto ngram_tokens = [&](int64_t first, int64_t len) {
    std::vector<int32_t> t;
    for (int64_t u = first; u < first + len; ++u) t.insert(t.end(), units[size_t(u)].begin(), units[size_t(u)].end());
    return t;
  };
  for (int64_t first : starts) {
    if (int64_t(chosen.size()) >= want) break;
    const int64_t max_n = std::min<int64_t>(o.max_ngram, int64_t(units.size()) - first);
    double total = 0;
    for (int64_t k = 1; k <= max_n; ++k) total += 1.0 / double(k);
    double r = uniform(rng) * total;
    int64_t len = 1;
    for (; len < max_n; ++len) {
      r -= 1.0 / double(len);
      if (r < 0) break;
    }
    std::vector<int32_t> tokens = ngram_tokens(first, len);
    while (int64_t(chosen.size() + tokens.size()) > want && len > 1) tokens = ngram_tokens(first, --len);
    if (int64_t(chosen.size() + tokens.size()) > want) continue;
    if (std::any_of(tokens.begin(), tokens.end(), [&](int32_t p) { return covered[size_t(p)] != 0; }))
      continue;
    ex.ngrams.push_back(int(len));
    for (int32_t p : tokens) covered[size_t(p)] = 1, chosen.push_back(p);
  }
  std::sort(chosen.begin(), chosen.end());
  for (int32_t p : chosen) {
    ex.positions.push_back(p);
    ex.targets.push_back(ids[size_t(p)]);
    const double u = uniform(rng);
    if (u < 0.8) ids[size_t(p)] = kMask;
    else if (u >= 0.9) ids[size_t(p)] = int32_t(kMask + 1 + int64_t(random_below(rng, uint64_t(vocab_size - kMask - 1))));
  }
  ex.ids = std::move(ids);
  ex.types = std::move(types);
  return ex;
}

MlmStream::MlmStream(const TokenCorpus& corpus, std::vector<uint8_t> word_starts, MlmOptions o,
                     uint64_t seed, bool shuffle)
    : corpus_(corpus), word_starts_(std::move(word_starts)), o_(std::move(o)), seed_(seed), shuffle_(shuffle) {
  THX_CHECK(corpus.documents() > 0, "masked LM: the corpus has no documents");
  THX_CHECK(o_.max_seq_length >= 8, "data.inputs_length {} is too short for [CLS] A [SEP] B [SEP]",
            o_.max_seq_length);
  THX_CHECK(corpus.vocab_size > kMask + 1, "masked LM: vocabulary {} is too small", corpus.vocab_size);
  start_epoch();
}

void MlmStream::start_epoch() {
  const int64_t n = corpus_.documents();
  order_.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) order_[size_t(i)] = i;
  if (shuffle_) {
    std::mt19937_64 rng(mix_seed(seed_ ^ mix_seed(uint64_t(state_.epoch) + 1)));
    for (int64_t i = n - 1; i > 0; --i) std::swap(order_[size_t(i)], order_[random_below(rng, uint64_t(i + 1))]);
  }
}

void MlmStream::set_state(const StreamState& s) {
  THX_CHECK(s.doc >= 0 && s.doc < corpus_.documents() && s.offset >= 0 && s.epoch >= 0 && s.example >= 0,
            "data stream state (epoch {}, doc {}, offset {}) does not fit this corpus ({} docs)",
            s.epoch, s.doc, s.offset, corpus_.documents());
  state_ = s;
  start_epoch();
}

MaskedExample MlmStream::next_example() {
  std::mt19937_64 rng(mix_seed(seed_ ^ mix_seed(~uint64_t(state_.example))));
  ++state_.example;
  const bool two = o_.sentence != "none";
  const int64_t max_tokens = o_.max_seq_length - (two ? 3 : 2);
  int64_t target = max_tokens;
  if (uniform(rng) < o_.short_seq_prob) target = 2 + int64_t(random_below(rng, uint64_t(max_tokens - 1)));
  // The next chunk of the current document.
  const int32_t* chunk = nullptr;
  int64_t len = 0, doc = 0;
  for (int64_t tries = 0; len == 0; ++tries) {
    THX_CHECK(tries <= 2 * corpus_.documents() + 2, "masked LM: no document has 2 tokens");
    doc = order_[size_t(state_.doc)];
    const int64_t begin = corpus_.offsets[size_t(doc)], dlen = corpus_.offsets[size_t(doc) + 1] - begin;
    if (dlen - state_.offset >= 2) {
      len = std::min(target, dlen - state_.offset);
      chunk = corpus_.tokens.data() + begin + state_.offset;
      state_.offset += len;
    } else {
      state_.offset = 0;
      if (++state_.doc == corpus_.documents()) {
        state_.doc = 0;
        ++state_.epoch;
        start_epoch();
      }
    }
  }
  std::vector<int32_t> a(chunk, chunk + len), b;
  int label = -1;
  if (two) {
    std::vector<int64_t> cuts;  // word starts in [1, len)
    for (int64_t i = 1; i < len; ++i)
      if (chunk[i] < int64_t(word_starts_.size()) && word_starts_[size_t(chunk[i])]) cuts.push_back(i);
    const int64_t c = cuts.empty() ? 1 + int64_t(random_below(rng, uint64_t(len - 1)))
                                   : cuts[random_below(rng, cuts.size())];
    b.assign(a.begin() + c, a.end());
    a.resize(size_t(c));
    label = 0;
    if (o_.sentence == "sop") {
      if (uniform(rng) < 0.5) std::swap(a, b), label = 1;
    } else if (uniform(rng) < 0.5 && corpus_.documents() > 1) {  // nsp: B from another document
      int64_t other = int64_t(random_below(rng, uint64_t(corpus_.documents() - 1)));
      if (other >= doc) ++other;
      const int64_t ob = corpus_.offsets[size_t(other)], olen = corpus_.offsets[size_t(other) + 1] - ob;
      const int64_t want = std::min<int64_t>(int64_t(b.size()), olen);
      const int64_t start = olen > want ? int64_t(random_below(rng, uint64_t(olen - want + 1))) : 0;
      b.assign(corpus_.tokens.begin() + ob + start, corpus_.tokens.begin() + ob + start + want);
      label = 1;
    }
  }
  std::vector<int32_t> ids{kCls}, types{0};
  for (int32_t t : a) ids.push_back(t), types.push_back(0);
  ids.push_back(kSep), types.push_back(0);
  if (two) {
    for (int32_t t : b) ids.push_back(t), types.push_back(1);
    ids.push_back(kSep), types.push_back(1);
  }
  MaskedExample ex = mask_tokens(std::move(ids), std::move(types), word_starts_, o_, corpus_.vocab_size, rng);
  ex.label = label;
  return ex;
}

Batch MlmStream::next(int64_t batch_size) {
  Batch bt;
  const int64_t n = o_.max_seq_length, P = o_.max_predictions;
  bt.inputs = torch::zeros({batch_size, n}, torch::kInt64);
  bt.token_types = torch::zeros({batch_size, n}, torch::kInt64);
  bt.positions = torch::zeros({batch_size, P}, torch::kInt64);
  bt.targets = torch::zeros({batch_size, P}, torch::kInt64);
  bt.labels = torch::full({batch_size}, -1, torch::kInt64);
  auto in = bt.inputs.accessor<int64_t, 2>(), ty = bt.token_types.accessor<int64_t, 2>();
  auto po = bt.positions.accessor<int64_t, 2>(), tg = bt.targets.accessor<int64_t, 2>();
  auto lb = bt.labels.accessor<int64_t, 1>();
  for (int64_t i = 0; i < batch_size; ++i) {
    const MaskedExample ex = next_example();
    for (size_t j = 0; j < ex.ids.size(); ++j) in[i][int64_t(j)] = ex.ids[j], ty[i][int64_t(j)] = ex.types[j];
    for (size_t j = 0; j < ex.positions.size(); ++j) po[i][int64_t(j)] = ex.positions[j], tg[i][int64_t(j)] = ex.targets[j];
    lb[i] = ex.label;
  }
  return bt;
}

std::vector<uint8_t> mlm_word_starts(const TokenCorpus& corpus, const std::string& prepared) {
  require_prepared_convention(prepared, corpus.convention, "albert");
  const Tokenizer tok(corpus.tokenizer);
  THX_CHECK(tok.vocab_size() == corpus.vocab_size, "{}: its tokenizer {} has {} pieces, the shards {}",
            prepared, corpus.tokenizer, tok.vocab_size(), corpus.vocab_size);
  return tok.word_starts();
}

}  // namespace thx
