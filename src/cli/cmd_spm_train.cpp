// thx spm-train: a SentencePiece model with T5's or ALBERT's ids (data/tokenizer.h).
#include "cli/command.h"
#include "data/prepare.h"
#include "data/tokenizer.h"

namespace thx {
namespace {

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
    app->add_option("--format", format, corpus_format_help())->capture_default_str();
    app->add_option("--out", o.model_prefix, "output prefix: writes PREFIX.model and PREFIX.vocab")
        ->required()->type_name("PREFIX");
    app->add_option("--pieces", o.pieces, "SentencePiece pieces S, pad/eos/unk included")
        ->capture_default_str()->check(thx::positive_number());
    app->add_option("--max-sentences", o.max_sentences, "lines sampled from the corpus")
        ->capture_default_str()->check(thx::positive_number());
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

}  // namespace

std::unique_ptr<Command> make_spm_train_command(CLI::App& parent) {
  return std::make_unique<SpmTrainCommand>(parent);
}

}  // namespace thx
