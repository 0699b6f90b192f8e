// BERT/ALBERT examples (data/mlm.h): masking statistics over many samples, n-gram lengths,
// whole words, sentence-order and next-sentence labels, determinism and resume.
#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "common/error.h"
#include "data/data_fixtures.h"
#include "data/mlm.h"
#include "data/prepare.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

constexpr int64_t kVocab = 1000;

// Word starts: even ids >= 6 start a word, odd ids continue one (ids 0-5 are special).
std::vector<uint8_t> word_starts() {
  std::vector<uint8_t> w(kVocab, 0);
  for (int64_t i = 6; i < kVocab; i += 2) w[size_t(i)] = 1;
  return w;
}

// Documents of consecutive ids, so that the order of two segments can be read off the tokens:
// document d holds the ids start_d, start_d + 1, ... (kept within [6, kVocab)).
TokenCorpus counting_corpus(int docs, int64_t len) {
  TokenCorpus c;
  c.vocab_size = kVocab, c.convention = "albert";
  c.offsets = {0};
  for (int d = 0; d < docs; ++d) {
    for (int64_t i = 0; i < len; ++i) c.tokens.push_back(int32_t(6 + (d * 37 + i) % (kVocab - 6)));
    c.offsets.push_back(int64_t(c.tokens.size()));
  }
  return c;
}

// The sequence before masking: the masked ids put back.
std::vector<int32_t> unmasked(const MaskedExample& e) {
  std::vector<int32_t> ids = e.ids;
  for (size_t i = 0; i < e.positions.size(); ++i) ids[size_t(e.positions[i])] = e.targets[i];
  return ids;
}

TEST(MlmMasking, RatesSplitAndNgramLengths) {
  const auto ws = word_starts();
  MlmOptions o;
  o.max_predictions = 1000;  // no cap: the rate alone decides
  std::mt19937_64 rng(1);
  int64_t tokens = 0, masked = 0, as_mask = 0, kept = 0, replaced = 0;
  for (int k = 0; k < 2000; ++k) {
    // 200 tokens: [CLS], words of 1-3 pieces, [SEP].
    std::vector<int32_t> ids{Tokenizer::kCls};
    while (ids.size() < 199) {
      const int pieces = 1 + int(rng() % 3);
      ids.push_back(int32_t(6 + 2 * (rng() % 400)));
      for (int p = 1; p < pieces && ids.size() < 199; ++p) ids.push_back(int32_t(7 + 2 * (rng() % 400)));
    }
    ids.push_back(Tokenizer::kSep);
    const std::vector<int32_t> types(ids.size(), 0);
    const MaskedExample e = mask_tokens(ids, types, ws, o, kVocab, rng);
    tokens += int64_t(ids.size());
    masked += int64_t(e.positions.size());
    EXPECT_LE(int64_t(e.positions.size()), 30);  // round(200 * 0.15)
    for (size_t i = 0; i < e.positions.size(); ++i) {
      const int32_t p = e.positions[i];
      ASSERT_EQ(e.targets[i], ids[size_t(p)]);
      ASSERT_NE(ids[size_t(p)], Tokenizer::kCls);
      ASSERT_NE(ids[size_t(p)], Tokenizer::kSep);
      if (i) ASSERT_LT(e.positions[i - 1], p);  // sorted, never twice
      const int32_t now = e.ids[size_t(p)];
      as_mask += now == Tokenizer::kMask, kept += now == ids[size_t(p)], replaced += now != Tokenizer::kMask && now != ids[size_t(p)];
      // Whole words: a masked continuation piece has its word start masked too.
      if (!ws[size_t(ids[size_t(p)])]) ASSERT_TRUE(std::find(e.positions.begin(), e.positions.end(), p - 1) != e.positions.end());
    }
    // Unmasked positions are untouched.
    std::vector<int32_t> back = unmasked(e);
    ASSERT_EQ(back, ids);
  }
  // Rate: round(len * 0.15) tokens per sequence, minus the few an n-gram cannot fill at the
  // end: within 3% of 0.15.
  const double rate = double(masked) / double(tokens);
  EXPECT_NEAR(rate, 0.15, 0.0045) << rate;
  // 80/10/10 over about 60000 tokens: binomial sigma 0.0016 (0.8) and 0.0012 (0.1); 5 sigma.
  EXPECT_NEAR(double(as_mask) / masked, 0.8, 0.008);
  EXPECT_NEAR(double(kept) / masked, 0.1, 0.006);
  EXPECT_NEAR(double(replaced) / masked, 0.1, 0.006);
}

// The n-gram length distribution, p(n) ~ 1/n for n <= 3: 6/11, 3/11, 2/11. Measured where
// neither the cap nor collisions bias which n-grams are kept: one-piece words, 5000 tokens,
// 2% masked (a longer n-gram is skipped slightly more often, as it more often touches a
// covered position: about 1% here).
TEST(MlmMasking, NgramLengthsFollowOneOverN) {
  const auto ws = word_starts();
  MlmOptions o;
  o.masked_lm_prob = 0.02, o.max_predictions = 100000;
  std::mt19937_64 rng(3);
  int64_t count[4] = {0, 0, 0, 0};
  for (int k = 0; k < 200; ++k) {
    std::vector<int32_t> ids{Tokenizer::kCls};
    for (int i = 0; i < 4998; ++i) ids.push_back(int32_t(6 + 2 * (rng() % 400)));
    ids.push_back(Tokenizer::kSep);
    const MaskedExample e = mask_tokens(ids, std::vector<int32_t>(ids.size(), 0), ws, o, kVocab, rng);
    for (int n : e.ngrams) ++count[n];
  }
  const double all = double(count[1] + count[2] + count[3]);  // about 11000: sigma 0.005
  EXPECT_NEAR(count[1] / all, 6.0 / 11, 0.02);
  EXPECT_NEAR(count[2] / all, 3.0 / 11, 0.02);
  EXPECT_NEAR(count[3] / all, 2.0 / 11, 0.02);
}

TEST(MlmMasking, CapAndSmallSequences) {
  const auto ws = word_starts();
  MlmOptions o;
  o.max_predictions = 3;
  std::mt19937_64 rng(2);
  std::vector<int32_t> ids{Tokenizer::kCls};
  for (int i = 0; i < 100; ++i) ids.push_back(int32_t(6 + 2 * i));
  ids.push_back(Tokenizer::kSep);
  for (int k = 0; k < 200; ++k) {
    const MaskedExample e = mask_tokens(ids, std::vector<int32_t>(ids.size(), 0), ws, o, kVocab, rng);
    EXPECT_EQ(e.positions.size(), 3u);  // the cap binds exactly: single words fill it
  }
  // A sequence of [CLS] w [SEP] masks its one word: max(1, round(3 * 0.15)) = 1.
  o.max_predictions = 20;
  const MaskedExample e = mask_tokens({Tokenizer::kCls, 8, Tokenizer::kSep}, {0, 0, 0}, ws, o, kVocab, rng);
  EXPECT_EQ(e.positions, (std::vector<int32_t>{1}));
}

// A word piece that continues a word (odd id) right after [SEP], as a segment truncated at its
// front begins, is a unit of its own, not a part of the word before the [SEP]: in [CLS] 8 [SEP]
// 9 [SEP] with one prediction each of the two is masked alone; joined, the two-piece unit
// exceeds the one prediction and nothing would be masked.
TEST(MlmMasking, AWholeWordNeverSpansASeparator) {
  const auto ws = word_starts();
  MlmOptions o;
  o.max_predictions = 1;
  std::mt19937_64 rng(3);
  const std::vector<int32_t> ids = {Tokenizer::kCls, 8, Tokenizer::kSep, 9, Tokenizer::kSep};
  std::set<int32_t> seen;
  for (int k = 0; k < 20; ++k) {
    const MaskedExample e = mask_tokens(ids, std::vector<int32_t>(ids.size(), 0), ws, o, kVocab, rng);
    ASSERT_EQ(e.positions.size(), 1u);
    seen.insert(e.positions[0]);
  }
  EXPECT_EQ(seen, (std::set<int32_t>{1, 3}));
}

TEST(MlmStream, SentenceOrderLabelsAndSwaps) {
  const TokenCorpus c = counting_corpus(50, 400);
  MlmOptions o;
  o.max_seq_length = 64, o.short_seq_prob = 0;  // every chunk is long enough to hold a word start
  MlmStream s(c, word_starts(), o, 3, true);
  int swapped = 0, n = 2000;
  for (int k = 0; k < n; ++k) {
    const MaskedExample e = s.next_example();
    const std::vector<int32_t> ids = unmasked(e);
    ASSERT_EQ(ids.front(), Tokenizer::kCls);
    ASSERT_EQ(ids.back(), Tokenizer::kSep);
    ASSERT_LE(int64_t(ids.size()), o.max_seq_length);
    const auto sep = std::find(ids.begin(), ids.end(), Tokenizer::kSep) - ids.begin();
    // Types: 0 through the first [SEP], 1 after it.
    for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(e.types[i], int64_t(i) <= sep ? 0 : 1);
    const std::vector<int32_t> a(ids.begin() + 1, ids.begin() + sep), b(ids.begin() + sep + 1, ids.end() - 1);
    ASSERT_FALSE(a.empty());
    ASSERT_FALSE(b.empty());
    auto next = [](int32_t t) { return int32_t(6 + (t - 6 + 1) % (kVocab - 6)); };
    // Consecutive within a segment; across the cut, in order unless swapped.
    for (size_t i = 1; i < a.size(); ++i) ASSERT_EQ(a[i], next(a[i - 1]));
    for (size_t i = 1; i < b.size(); ++i) ASSERT_EQ(b[i], next(b[i - 1]));
    if (e.label == 0) {
      ASSERT_EQ(b.front(), next(a.back()));
    } else {
      ASSERT_EQ(a.front(), next(b.back()));
      ++swapped;
    }
    // The cut is at a word start (even ids start words).
    ASSERT_EQ((e.label == 0 ? b.front() : a.front()) % 2, 0);
  }
  // p = 0.5 over 2000: sigma 0.011; 4 sigma.
  EXPECT_NEAR(double(swapped) / n, 0.5, 0.045);
}

TEST(MlmStream, NextSentenceAndNoSentenceTask) {
  const TokenCorpus c = counting_corpus(50, 400);
  MlmOptions o;
  o.max_seq_length = 64, o.sentence = "nsp";
  MlmStream s(c, word_starts(), o, 4, true);
  int random = 0;
  auto next = [](int32_t t) { return int32_t(6 + (t - 6 + 1) % (kVocab - 6)); };
  for (int k = 0; k < 1000; ++k) {
    const MaskedExample e = s.next_example();
    const std::vector<int32_t> ids = unmasked(e);
    const auto sep = std::find(ids.begin(), ids.end(), Tokenizer::kSep) - ids.begin();
    if (e.label == 0) EXPECT_EQ(ids[size_t(sep + 1)], next(ids[size_t(sep - 1)]));
    random += e.label == 1;
  }
  EXPECT_NEAR(random / 1000.0, 0.5, 0.065);
  o.sentence = "none";
  MlmStream one(c, word_starts(), o, 4, true);
  const MaskedExample e = one.next_example();
  EXPECT_EQ(e.label, -1);
  EXPECT_EQ(std::count(e.ids.begin(), e.ids.end(), Tokenizer::kSep), 1);
}

TEST(MlmStream, ShortSequencesDeterminismAndResume) {
  const TokenCorpus c = counting_corpus(30, 300);
  MlmOptions o;
  o.max_seq_length = 64;
  MlmStream s(c, word_starts(), o, 5, true);
  int shorter = 0;
  for (int k = 0; k < 1000; ++k) shorter += s.next_example().ids.size() < 64;
  // short_seq_prob 0.1, plus chunks cut by document ends (300 = 4 x 61 + 56: one in 5).
  EXPECT_GT(shorter, 250);
  EXPECT_LT(shorter, 420);
  MlmStream a(c, word_starts(), o, 6, true), b(c, word_starts(), o, 6, true);
  a.next(7);
  const StreamState st = a.state();
  const Batch x = a.next(5);
  b.set_state(st);
  const Batch y = b.next(5);
  for (auto [p, q] : {std::pair{&x.inputs, &y.inputs}, {&x.token_types, &y.token_types},
                      {&x.positions, &y.positions}, {&x.targets, &y.targets}, {&x.labels, &y.labels}})
    EXPECT_TRUE(torch::equal(*p, *q));
  EXPECT_EQ(x.inputs.sizes().vec(), (std::vector<int64_t>{5, 64}));
  EXPECT_EQ(x.positions.sizes().vec(), (std::vector<int64_t>{5, 20}));
  // Another seed, another batch.
  MlmStream other(c, word_starts(), o, 7, true);
  other.next(7);
  EXPECT_FALSE(torch::equal(other.next(5).inputs, x.inputs));
}

TEST(MlmStream, RefusesT5Shards) {
  TempDir dir;
  TokenCorpus c = counting_corpus(2, 10);
  c.convention = "t5";
  try {
    mlm_word_starts(c, "data/prepared/enwiki");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("data/prepared/enwiki: tokenized with t5 ids"), std::string::npos) << e.what();
  }
}

// Fine-tuning refuses a tokenizer of the other convention with one line: the file, what the
// model needs, and the command that trains a fitting one.
TEST(AlbertTokenizer, TheOtherConventionIsRefusedNamingTheFixingCommand) {
  TempDir dir;
  const std::string albert = tiny_tokenizer(dir, 64, TokenizerConvention::albert);
  const Tokenizer t(albert);
  EXPECT_NO_THROW(require_convention(t, TokenizerConvention::albert, albert, "BERT/ALBERT fine-tuning"));
  EXPECT_EQ(error_of([&] { require_convention(t, TokenizerConvention::t5, albert, "T5 fine-tuning"); }),
            albert + ": an ALBERT-convention tokenizer; T5 fine-tuning needs T5's ids, eos 1 and 100 sentinels "
            "(`thx spm-train --convention t5`)");
}

TEST(AlbertTokenizer, IdsAndWordStarts) {
  TempDir dir;
  const Tokenizer t(tiny_tokenizer(dir, 64, TokenizerConvention::albert));
  EXPECT_EQ(t.convention(), TokenizerConvention::albert);
  EXPECT_EQ(t.vocab_size(), 64);  // no sentinels
  EXPECT_EQ(t.piece(0), "<pad>");
  EXPECT_EQ(t.piece(1), "<unk>");
  EXPECT_EQ(t.piece(2), "[CLS]");
  EXPECT_EQ(t.piece(3), "[SEP]");
  EXPECT_EQ(t.piece(4), "[MASK]");
  const auto ws = t.word_starts();
  EXPECT_EQ(ws[2] + ws[3] + ws[4], 0);
  const std::vector<int32_t> ids = t.encode("The model heads talk");
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ws[size_t(ids[0])], 1);  // the first piece of a text starts a word
  for (int32_t id : ids) EXPECT_EQ(ws[size_t(id)] != 0, t.piece(id).rfind("\xe2\x96\x81", 0) == 0);
  EXPECT_EQ(t.decode(ids), "The model heads talk");
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
