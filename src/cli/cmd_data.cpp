// thx spm-train and thx prepare: the tokenizer and the tokenized corpus shards.
#include "cli/command.h"
#include "data/prepare.h"
#include "data/tokenizer.h"

namespace thx {
namespace {

const char* kFormats = "auto | text | text_files | wikiextractor | jsonl | books";

struct SpmTrainCommand : Command {
  SpmTrainOptions o;
  std::string format = "auto";
  int64_t seed = 0;
  std::string convention = "t5";

  explicit SpmTrainCommand(CLI::App& parent) {
    app = parent.add_subcommand("spm-train",
                                "Train a unigram SentencePiece model from corpus files, with T5's ids "
                                "(pad 0, eos 1, unk 2; 100 sentinels follow) or ALBERT's (pad 0, "
                                "unk 1, [CLS] 2, [SEP] 3, [MASK] 4)");
    app->add_option("--input", o.inputs, "corpus file, directory or glob; repeatable")
        ->required()->type_name("PATH");
    app->add_option("--format", format, kFormats)->capture_default_str();
    app->add_option("--out", o.model_prefix, "output prefix: writes PREFIX.model and PREFIX.vocab")
        ->required()->type_name("PREFIX");
    app->add_option("--pieces", o.pieces, "SentencePiece pieces S, pad/eos/unk included")
        ->capture_default_str()->check(CLI::PositiveNumber);
    app->add_option("--max-sentences", o.max_sentences, "lines sampled from the corpus")
        ->capture_default_str()->check(CLI::PositiveNumber);
    app->add_option("--character-coverage", o.character_coverage)->capture_default_str()
        ->check(CLI::Range(0.5, 1.0));
    app->add_option("--seed", seed, "seed of the line sample")->capture_default_str();
    app->add_option("--convention", convention, "t5 (T5 pretraining) | albert (BERT/ALBERT)")
        ->capture_default_str();
  }
  int run() override {
    o.convention = parse_convention(convention, "--convention");
    o.format = parse_corpus_format(format, "--format");
    o.seed = uint64_t(seed);
    o.threads = torch::get_num_threads();
    train_sentencepiece(o);
    return 0;
  }
};

struct PrepareCommand : Command {
  PrepareOptions o;
  std::string format = "auto";

  explicit PrepareCommand(CLI::App& parent) {
    app = parent.add_subcommand("prepare",
                                "Tokenize a corpus once into compressed HDF5 shards with a "
                                "deterministic held-out split; a re-run with unchanged inputs "
                                "does nothing, and shards of other inputs are never replaced");
    app->add_option("--input", o.inputs,
                    "corpus file, directory or glob; repeatable; FORMAT:PATH gives this input "
                    "its own format (books:DIR)")
        ->required()->type_name("PATH");
    app->add_option("--format", format, kFormats)->capture_default_str();
    app->add_option("--tokenizer", o.tokenizer, "SentencePiece .model")->required()->type_name("FILE");
    app->add_option("--out", o.out_dir, "output directory")->required()->type_name("DIR");
    app->add_option("--heldout-fraction", o.heldout_fraction,
                    "fraction of documents held out, chosen by a hash of their text")
        ->capture_default_str();
    app->add_option("--heldout", o.heldout_files,
                    "hold out these files instead (file, directory or glob; repeatable)")
        ->type_name("PATH");
    app->add_option("--shard-tokens", o.shard_tokens, "tokens per shard")->capture_default_str();
  }
  int run() override {
    o.format = parse_corpus_format(format, "--format");
    run_prepare(o);
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> make_spm_train_command(CLI::App& parent) {
  return std::make_unique<SpmTrainCommand>(parent);
}
std::unique_ptr<Command> make_prepare_command(CLI::App& parent) {
  return std::make_unique<PrepareCommand>(parent);
}

}  // namespace thx
