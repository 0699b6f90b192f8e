// Tokenizer, `prepare` shards and the span-corruption stream, end to end on small fixtures.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "common/error.h"
#include "common/fs.h"
#include "data/data_fixtures.h"
#include "data/prepare.h"
#include "data/stream.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {
namespace fs = std::filesystem;

TEST(Tokenizer, T5IdConventions) {
  TempDir dir;
  const Tokenizer tok(tiny_tokenizer(dir, 64));
  EXPECT_EQ(tok.pieces(), 64);
  EXPECT_EQ(tok.vocab_size(), 164);
  EXPECT_EQ(tok.sentinel(0), 163);  // <extra_id_0> = S + 99
  EXPECT_EQ(tok.sentinel(99), 64);
  EXPECT_EQ(padded_vocab_size(32100), 32128);
  const std::string text = "The model learns attention weights.";
  const auto ids = tok.encode(text);
  ASSERT_FALSE(ids.empty());
  for (int32_t id : ids) EXPECT_TRUE(id > 1 && id < 64) << id;
  EXPECT_EQ(tok.decode(ids), text);
  auto with_sentinel = ids;
  with_sentinel.insert(with_sentinel.begin() + 1, tok.sentinel(0));
  with_sentinel.push_back(Tokenizer::kEos);
  EXPECT_NE(tok.decode(with_sentinel).find("<extra_id_0>"), std::string::npos);
}

TEST(Tokenizer, BadModelFilesAreInputErrors) {
  TempDir dir;
  EXPECT_THROW(Tokenizer(dir.file("missing.model")), InputError);
  try {
    Tokenizer t(dir.write("junk.model", "not a model"));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(dir.file("junk.model") + ": not a SentencePiece model", 0), 0u)
        << e.what();
  }
}

TEST(Prepare, ShardsRoundTripAndReRunsDoNothing) {
  TempDir dir;
  const std::string model = tiny_tokenizer(dir);
  const std::string corpus = dir.write("corpus.txt", synthetic_corpus(300));
  PrepareOptions o;
  o.inputs = {corpus};
  o.format = CorpusFormat::text;
  o.tokenizer = model;
  o.out_dir = dir.file("prep");
  o.heldout_fraction = 0.1;
  o.shard_tokens = 4096;  // several shards
  const PrepareResult r = run_prepare(o);
  EXPECT_FALSE(r.up_to_date);
  EXPECT_EQ(r.documents[0] + r.documents[1], 300);
  EXPECT_GT(r.documents[1], 10);  // ~10% held out
  EXPECT_LT(r.documents[1], 60);
  // The shards hold exactly the tokenizer's ids, document by document, in order.
  const Tokenizer tok(model);
  const TokenCorpus train = load_split(o.out_dir, "train"), held = load_split(o.out_dir, "heldout");
  EXPECT_EQ(train.documents() + held.documents(), 300);
  EXPECT_EQ(train.vocab_size, tok.vocab_size());
  std::vector<std::string> docs;
  CorpusStats s;
  read_corpus({corpus}, CorpusFormat::text, [&](std::string&& d) { docs.push_back(d); }, s);
  int64_t ti = 0, hi = 0;
  for (const auto& d : docs) {
    const auto ids = tok.encode(d);
    const TokenCorpus& c = (train.documents() > ti &&
                            std::vector<int32_t>(train.tokens.begin() + train.offsets[ti],
                                                 train.tokens.begin() + train.offsets[ti + 1]) == ids)
                               ? train : held;
    int64_t& i = &c == &train ? ti : hi;
    ASSERT_LT(i, c.documents());
    EXPECT_EQ(std::vector<int32_t>(c.tokens.begin() + c.offsets[i], c.tokens.begin() + c.offsets[i + 1]), ids);
    ++i;
  }
  EXPECT_EQ(ti, train.documents());
  EXPECT_EQ(hi, held.documents());
  // Same inputs: nothing to do. A changed input: refused, and the shards stay as they were.
  EXPECT_TRUE(run_prepare(o).up_to_date);
  const std::string manifest = read_file(o.out_dir + "/manifest.json");
  dir.write("corpus.txt", synthetic_corpus(301));
  try {
    run_prepare(o);
    FAIL() << "changed inputs rebuilt over existing shards";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("holds shards prepared from other inputs"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(read_file(o.out_dir + "/manifest.json"), manifest);
  EXPECT_EQ(load_split(o.out_dir, "train").documents(), train.documents());
  // Into a fresh directory, the changed corpus is prepared.
  o.out_dir = dir.file("prep2");
  const PrepareResult r2 = run_prepare(o);
  EXPECT_EQ(r2.documents[0] + r2.documents[1], 301);
  // Shards written inside the folder of the inputs are not inputs of the next run (its --out
  // named another way, through a link too): it finds nothing to do, where it used to read them
  // as text and refuse the folder as made from other inputs. Nor is the tokenizer there, or
  // the .vocab beside it: their lines were documents.
  TempDir in;
  in.write("corpus.txt", synthetic_corpus(300));
  for (const char* f : {"tiny.model", "tiny.vocab"}) fs::copy_file(dir.file(f), in.file(f));
  o.inputs = {in.path.string()}, o.out_dir = in.file("prep"), o.tokenizer = in.file("tiny.model");
  const PrepareResult own = run_prepare(o);
  EXPECT_FALSE(own.up_to_date);
  EXPECT_EQ(own.documents[0] + own.documents[1], 300);
  EXPECT_EQ(own.stats.bad_lines, 0);
  fs::create_directory_symlink(in.path, dir.file("link"));
  o.out_dir = dir.file("link") + "/./prep/";
  EXPECT_TRUE(run_prepare(o).up_to_date);
  // One prepare at a time writes a folder: another's shards would mix with its own under one
  // manifest. (The lock is this process's here; a flock from another open() conflicts as well.)
  o.out_dir = dir.file("prep3");
  fs::create_directories(o.out_dir);
  const int lock = try_lock_directory(o.out_dir);
  ASSERT_GE(lock, 0);
  EXPECT_EQ(error_of([&] { run_prepare(o); }), "--out " + o.out_dir + ": another thx prepare (pid " +
                                                   std::to_string(::getpid()) + ") is writing this folder; wait for "
                                                   "it to end");
  ::close(lock);
  EXPECT_FALSE(run_prepare(o).up_to_date);
}

TEST(Prepare, HeldOutByFilesAndDamagedShards) {
  TempDir dir;
  const std::string model = tiny_tokenizer(dir);
  PrepareOptions o;
  o.inputs = {dir.write("a.txt", synthetic_corpus(20))};
  o.heldout_files = {dir.write("b.txt", synthetic_corpus(5))};
  o.format = CorpusFormat::text;
  o.tokenizer = model;
  o.out_dir = dir.file("prep");
  const PrepareResult r = run_prepare(o);
  EXPECT_EQ(r.documents[0], 20);
  EXPECT_EQ(r.documents[1], 5);
  // A truncated shard is one clear error naming it.
  const std::string shard = dir.file("prep/train-00000.h5");
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) / 2);
  try {
    load_split(o.out_dir, "train");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(shard + ": ", 0), 0u) << e.what();
  }
  EXPECT_THROW(load_split(dir.file("nowhere"), "train"), InputError);
}

TEST(Stream, DeterministicWhateverTheBatchSizeAndResumable) {
  TempDir dir;
  PrepareOptions o;
  o.inputs = {dir.write("a.txt", synthetic_corpus(50))};
  o.format = CorpusFormat::text;
  o.tokenizer = tiny_tokenizer(dir);
  o.out_dir = dir.file("prep");
  o.heldout_fraction = 0;
  run_prepare(o);
  const TokenCorpus c = load_split(o.out_dir, "train");
  SpanCorruptionStream a(c, 64, 16, 0.15, 3.0, 7, true), b(c, 64, 16, 0.15, 3.0, 7, true);
  const Batch a8 = a.next(8);
  const Batch b4 = b.next(4), b4b = b.next(4);
  EXPECT_TRUE(torch::equal(a8.inputs, torch::cat({b4.inputs, b4b.inputs})));
  EXPECT_TRUE(torch::equal(a8.targets, torch::cat({b4.targets, b4b.targets})));
  // Resume from a saved state: the continuation is identical.
  const StreamState saved = a.state();
  const Batch next1 = a.next(5);
  SpanCorruptionStream r(c, 64, 16, 0.15, 3.0, 7, true);
  r.set_state(saved);
  EXPECT_TRUE(torch::equal(r.next(5).inputs, next1.inputs));
  // Another seed: other examples. Decoder inputs are targets shifted right.
  SpanCorruptionStream other(c, 64, 16, 0.15, 3.0, 8, true);
  EXPECT_FALSE(torch::equal(other.next(8).inputs, a8.inputs));
  EXPECT_TRUE(torch::equal(a8.decoder_inputs.narrow(1, 1, 15), a8.targets.narrow(1, 0, 15)));
  EXPECT_EQ(a8.decoder_inputs.select(1, 0).abs().sum().item<int64_t>(), 0);
  // Every example fills its inputs exactly (full raw chunks) and ends in EOS.
  const SpanLengths L = a.lengths();
  for (int64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(a8.inputs[i][L.inputs - 1].item<int64_t>(), 1);
    EXPECT_EQ((a8.targets[i] > 0).sum().item<int64_t>(), L.targets);
    EXPECT_LT(a8.inputs[i].max().item<int64_t>(), c.vocab_size);
  }
  EXPECT_THROW(SpanCorruptionStream(c, 512, 100, 0.15, 3.0, 1, true), InputError);  // needs 114
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
