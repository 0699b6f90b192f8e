// thx prepare: a corpus tokenized once into HDF5 shards with a held-out split (data/prepare.h).
#include "cli/command.h"
#include "data/prepare.h"

namespace thx {
namespace {

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
    app->add_option("--format", format, corpus_format_help())->capture_default_str();
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

std::unique_ptr<Command> make_prepare_command(CLI::App& parent) {
  return std::make_unique<PrepareCommand>(parent);
}

}  // namespace thx
