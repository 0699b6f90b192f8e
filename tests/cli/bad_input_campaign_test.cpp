// The bad-input campaign (issue 16), as a user meets it: each malformed input is run through
// the thx binary in a directory of its own, beside a workspace of good inputs (tokenizers,
// prepared shards, pretrained runs, task data), and must give
//   - exit code 2,
//   - one line "thx: error: ..." naming the file (and line), key or flag: the last line of the
//     output, after at most one progress line (not buried under a printed config),
//   - no damage: every file of the workspace and the case's directory has the same bytes after
//     the run, and no file or directory appeared or disappeared.
// The cases are grouped by what they need (each TEST builds its own workspace, so ctest runs the
// groups in parallel); every group checks its count, and docs/reliability.md gives the total.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "cli/forked_cli.h"
#include "common/fs.h"
#include "eval/eval_fixtures.h"
#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {
namespace fs = std::filesystem;

struct Case {
  std::string name;
  std::vector<std::pair<std::string, std::string>> files;  // written into the case's directory
  std::string args;                                        // thx's arguments
  std::string expect;                                      // in the error line
};

// Every file below `root`: relative path -> size and FNV-1a of its bytes (directories: "dir").
// A run directory's .lock is left out: it holds the pid of the last process that took it.
std::map<std::string, std::string> snapshot(const fs::path& root) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    const std::string rel = fs::relative(e.path(), root).string();
    if (e.path().filename() == ".lock") continue;
    if (e.is_directory()) out[rel] = "dir";
    else out[rel] = std::to_string(fs::file_size(e.path())) + ":" + std::to_string(fnv1a(read_file(e.path().string())));
  }
  return out;
}

std::string replace_all(std::string s, const std::map<std::string, std::string>& vars) {
  for (const auto& [k, v] : vars)
    for (size_t at = s.find(k); at != std::string::npos; at = s.find(k, at + v.size())) s.replace(at, k.size(), v);
  return s;
}

// Runs every case; returns how many passed all three checks.
int run_cases(const std::vector<Case>& cases, std::map<std::string, std::string> vars,
              const std::vector<fs::path>& workspace) {
  int good = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir here;
    vars["{C}"] = here.path.string();
    for (const auto& [name, text] : c.files) {
      fs::create_directories(fs::path(here.file(name)).parent_path());
      std::ofstream(here.file(name), std::ios::binary) << replace_all(text, vars);
    }
    std::vector<std::map<std::string, std::string>> before;
    for (const auto& w : workspace) before.push_back(snapshot(w));
    const auto here_before = snapshot(here.path);
    const std::string args = replace_all(c.args, vars);
    const RunResult r = fork_thx("--threads 1 " + args);  // (cli/forked_cli.h)
    const std::string expect = replace_all(c.expect, vars);
    bool ok = true;
    ok &= r.code == 2;
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    // The error is the last line and the only one; at most one progress line comes before it.
    const size_t error_at = r.out.find("thx: error: ");
    const bool one_error = error_at != std::string::npos && error_at == r.out.rfind("thx: error: ") &&
                           r.out.find('\n', error_at) == r.out.size() - 1 && lines(r.out) <= 2;
    ok &= one_error;
    EXPECT_TRUE(one_error) << args << "\n" << r.out;
    ok &= r.out.find(expect) != std::string::npos;
    EXPECT_NE(r.out.find(expect), std::string::npos) << "expected '" << expect << "' in: " << r.out;
    for (size_t i = 0; i < workspace.size(); ++i) {
      const bool same = snapshot(workspace[i]) == before[i];
      ok &= same;
      EXPECT_TRUE(same) << args << ": changed " << workspace[i];
    }
    const bool same = snapshot(here.path) == here_before;
    ok &= same;
    EXPECT_TRUE(same) << args << ": changed its own directory";
    good += ok;
  }
  return good;
}

const std::string kTinyModel =
    "model: {d_model: 32, d_ff: 64, encoder_layers: 1, decoder_layers: 1}\n"
    "attention: {variant: talking_heads, h: 4}\n"
    "data: {prepared: {T5}/prep, inputs_length: 32, targets_length: 8}\n"
    "train: {steps: 2, batch_size: 8, log_every: 1}\n"
    "checkpoint: {every: 1, keep: 3}\n"
    "eval: {every: 2, examples: 8}\n";

// ---- configs, --set values, flags, resume --------------------------------------------------

TEST(BadInputCampaign, ConfigsFlagsAndResume) {
  TempDir t5;
  prepared_corpus(t5);
  const std::string cfg = t5.write("run.yaml", replace_all(kTinyModel, {{"{T5}", t5.path.string()}}));
  ASSERT_EQ(run_thx("--threads 1 pretrain --config " + cfg + " --run-dir " + t5.file("run")).code, 0);
  // A run of another shape, for "a checkpoint of another model".
  ASSERT_EQ(run_thx("--threads 1 pretrain --config " + cfg + " --set model.d_model=16 --run-dir " + t5.file("other")).code, 0);
  const std::string P = "pretrain --run-dir {C}/r --config ";
  const std::vector<Case> cases = {
      {"malformed YAML", {{"c.yaml", "model: {d_model: 32\n"}}, P + "{C}/c.yaml", "{C}/c.yaml"},
      {"unknown top-level key", {{"c.yaml", "modle: {}\n"}}, P + "{C}/c.yaml", "{C}/c.yaml:1: modle: unknown key"},
      {"unknown nested key", {{"c.yaml", "model: {d_modle: 3}\n"}}, P + "{C}/c.yaml", "model.d_modle: unknown key"},
      {"a string for a number", {{"c.yaml", "model: {d_model: abc}\n"}}, P + "{C}/c.yaml", "model.d_model"},
      {"a negative size", {{"c.yaml", "model: {d_model: -1}\n"}}, P + "{C}/c.yaml", "model.d_model"},
      {"zero heads", {{"c.yaml", "attention: {h: 0}\n"}}, P + "{T5}/run.yaml --set attention.h=0", "attention.h"},
      {"heads that do not divide d_model", {}, P + "{T5}/run.yaml --set attention.h=5", "attention"},
      {"an unknown variant", {}, P + "{T5}/run.yaml --set attention.variant=foo", "multi_head"},
      {"a YAML complex key", {{"c.yaml", "? [a, b]\n: 1\n"}}, P + "{C}/c.yaml", "{C}/c.yaml:1"},
      {"a list at the top", {{"c.yaml", "- 1\n- 2\n"}}, P + "{C}/c.yaml", "{C}/c.yaml"},
      {"a scalar at the top", {{"c.yaml", "hello\n"}}, P + "{C}/c.yaml", "{C}/c.yaml"},
      {"a tab in the indentation", {{"c.yaml", "model:\n\td_model: 3\n"}}, P + "{C}/c.yaml", "{C}/c.yaml"},
      {"binary bytes", {{"c.yaml", std::string("\x00\x01\xff\xfe{[", 6)}}, P + "{C}/c.yaml", "{C}/c.yaml"},
      {"a missing config", {}, P + "{C}/nope.yaml", "{C}/nope.yaml"},
      {"a directory as the config", {}, P + "{C}", "is a directory"},
      {"--set without '='", {}, P + "{T5}/run.yaml --set train.steps", "--set train.steps"},
      {"--set of an unknown key", {}, P + "{T5}/run.yaml --set train.stpes=3", "train.stpes"},
      {"--set of a bad value", {}, P + "{T5}/run.yaml --set train.steps=abc", "train.steps"},
      {"--set of unbalanced YAML", {}, P + "{T5}/run.yaml --set attention.dynamic=[X_l", "attention.dynamic"},
      {"an absurd feed-forward size", {}, P + "{T5}/run.yaml --set model.d_ff=1000000000000", "model.d_ff"},
      {"an absurd vocabulary", {}, P + "{T5}/run.yaml --set model.vocab_size=100000000000", "model.vocab_size"},
      {"an absurd batch", {}, P + "{T5}/run.yaml --set train.batch_size=4000000000000", "train.batch_size"},
      {"a batch that grad_accum does not divide", {}, P + "{T5}/run.yaml --set train.grad_accum=3", "train.batch_size"},
      {"no held-out examples", {}, P + "{T5}/run.yaml --set eval.examples=0", "eval.examples"},
      {"an unknown optimizer", {}, P + "{T5}/run.yaml --set optimizer.name=sgd", "optimizer.name"},
      {"keep no checkpoints", {}, P + "{T5}/run.yaml --set checkpoint.keep=0", "checkpoint.keep"},
      {"no prepared data", {}, P + "{T5}/run.yaml --set data.prepared={C}/none", "{C}/none"},
      // Checks after the config is read (the data's vocabulary, the memory) name the file and line too.
      {"a vocabulary smaller than the data's", {{"c.yaml", "model:\n  vocab_size: 100\n"}}, P + "{T5}/run.yaml --config {C}/c.yaml", "{C}/c.yaml:2: model.vocab_size: 100 is smaller than the vocabulary of data.prepared {T5}/prep ("},
      {"a feed-forward size past the memory", {{"c.yaml", "model:\n  d_ff: 1000000000\n"}}, P + "{T5}/run.yaml --config {C}/c.yaml", "{C}/c.yaml:2: model.d_ff 1000000000: training needs at least"},
      {"a step-probe's vocabulary smaller than the data's", {}, "step-probe --config {T5}/run.yaml --set model.vocab_size=100 --out {C}/p.h5", "--set model.vocab_size=100: model.vocab_size: 100 is smaller"},
      {"--run-dir names a file", {{"f", "x"}}, "pretrain --config {T5}/run.yaml --run-dir {C}/f", "{C}/f: exists and is not a directory"},
      {"--resume with a changed model", {}, "pretrain --config {T5}/run.yaml --run-dir {T5}/run --resume --set model.d_ff=128", "model.d_ff (64 -> 128)"},
      {"--resume with a changed learning rate", {}, "pretrain --config {T5}/run.yaml --run-dir {T5}/run --resume --set optimizer.learning_rate=0.5", "optimizer.learning_rate"},
      {"--allow-config-change without --resume", {}, P + "{T5}/run.yaml --allow-config-change train.steps", "--allow-config-change"},
      {"--allow-config-change of an unknown key", {}, "pretrain --config {T5}/run.yaml --run-dir {T5}/run --resume --allow-config-change train.stpes", "train.stpes"},
      {"a run directory of another model", {}, "pretrain --config {T5}/run.yaml --run-dir {T5}/other --resume --allow-config-change model", "(was the model configured differently?)"},
      {"no --run-dir", {}, "pretrain --config {T5}/run.yaml", "--run-dir"},
      {"an unknown flag", {}, "pretrain --bogus", "--bogus"},
      {"a negative thread count", {}, "--threads -2 costs", "--threads"},
      {"an unknown subcommand", {}, "pretrian", "thx: error: 'pretrian' is not a subcommand; one of: costs,"},
      {"an unknown cost format", {}, "costs --format xml", "--format"},
      {"absurd probe lengths", {}, "attention-probe --n 2000000 --m 2000000 --out {C}/p.h5", "--n 2000000"},
      {"an unknown probe key", {}, "attention-probe --set attention.hh=3 --out {C}/p.h5", "attention.hh"},
      {"step-probe of a config without data", {}, "step-probe --config {T5}/run.yaml --set data.prepared={C}/none --out {C}/p.h5", "{C}/none"},
  };
  const int good = run_cases(cases, {{"{T5}", t5.path.string()}}, {t5.path});
  EXPECT_EQ(good, int(cases.size()));
  std::printf("bad inputs (configs, flags, resume): %d of %zu one line, exit 2, nothing changed\n", good, cases.size());
}

// ---- corpora, tokenizers, prepared data -----------------------------------------------------

TEST(BadInputCampaign, CorporaTokenizersAndPreparedData) {
  TempDir t5;
  prepared_corpus(t5);
  t5.write("run.yaml", replace_all(kTinyModel, {{"{T5}", t5.path.string()}}));
  const std::string manifest = read_file(t5.file("prep/manifest.json"));
  const std::string shard = read_file(t5.file("prep/train-00000.h5"));
  std::string flipped = shard;
  flipped[flipped.size() / 2] ^= 0x10;
  const std::string PR = "prepare --tokenizer {T5}/tiny.model --out {C}/out --input ";
  const std::string TRAIN = "pretrain --config {T5}/run.yaml --run-dir {C}/r --set data.prepared={C}/p";
  auto prepared = [&](const std::string& m) {  // a copy of the prepared data with this manifest
    return std::vector<std::pair<std::string, std::string>>{{"p/manifest.json", m}, {"p/train-00000.h5", shard},
                                                            {"p/heldout-00000.h5", read_file(t5.file("prep/heldout-00000.h5"))}};
  };
  const std::vector<Case> cases = {
      {"an empty corpus", {{"e.txt", ""}}, PR + "{C}/e.txt", "no usable document"},
      {"a corpus of blank lines", {{"e.txt", "\n\n\n\n"}}, PR + "{C}/e.txt", "no usable document"},
      {"JSONL whose every line is malformed", {{"c.jsonl", "{\"text\": \nnot json\n{\"txt\": \"a\"}\n"}}, PR + "{C}/c.jsonl --format jsonl", "no usable document"},
      {"a missing input", {}, PR + "{C}/nothing.txt", "{C}/nothing.txt"},
      {"a glob that matches nothing", {}, PR + "'{C}/*.none'", "{C}/*.none"},
      {"an unknown format", {{"a.txt", "text\n"}}, PR + "{C}/a.txt --format docx", "--format"},
      {"an unknown format prefix", {{"a.txt", "text\n"}}, PR + "pdf:{C}/a.txt", "pdf"},
      {"a missing tokenizer", {{"a.txt", "some text\n"}}, "prepare --tokenizer {C}/none.model --out {C}/out --input {C}/a.txt", "{C}/none.model"},
      {"a tokenizer that is not one", {{"a.txt", "some text\n"}, {"bad.model", "not a sentencepiece model"}}, "prepare --tokenizer {C}/bad.model --out {C}/out --input {C}/a.txt", "{C}/bad.model"},
      {"an empty tokenizer file", {{"a.txt", "some text\n"}, {"bad.model", ""}}, "prepare --tokenizer {C}/bad.model --out {C}/out --input {C}/a.txt", "{C}/bad.model"},
      {"a held-out fraction above 1", {{"a.txt", "text\n"}}, PR + "{C}/a.txt --heldout-fraction 1.5", "--heldout-fraction"},
      {"tiny shards", {{"a.txt", "text\n"}}, PR + "{C}/a.txt --shard-tokens 10", "--shard-tokens"},
      {"--out names a file", {{"a.txt", "text\n"}, {"f", "x"}}, "prepare --tokenizer {T5}/tiny.model --out {C}/f --input {C}/a.txt", "{C}/f: exists and is not a directory"},
      {"prepared data from other inputs", {{"a.txt", "other text\n\nmore\n"}}, "prepare --tokenizer {T5}/tiny.model --out {T5}/prep --input {C}/a.txt", "{T5}/prep"},
      {"spm-train without input", {}, "spm-train --input {C}/none.txt --out {C}/m", "{C}/none.txt"},
      {"spm-train of an empty corpus", {{"e.txt", ""}}, "spm-train --input {C}/e.txt --out {C}/m", "{C}/e.txt"},
      {"spm-train of no pieces", {{"a.txt", "text\n"}}, "spm-train --input {C}/a.txt --pieces 0 --out {C}/m", "--pieces"},
      {"a manifest that is not JSON", prepared("{\"splits\": "), TRAIN, "{C}/p/manifest.json"},
      {"a manifest without splits", prepared("{}"), TRAIN, "{C}/p/manifest.json: no split"},
      {"a manifest with a number for a shard", prepared(R"({"tokenizer": {"vocab_size": 164}, "splits": {"train": {"shards": [3]}, "heldout": {"shards": ["heldout-00000.h5"]}}})"), TRAIN, "{C}/p/manifest.json"},
      {"a manifest with a string for the vocabulary", prepared(R"({"tokenizer": {"vocab_size": "many"}, "splits": {"train": {"shards": ["train-00000.h5"]}, "heldout": {"shards": ["heldout-00000.h5"]}}})"), TRAIN, "{C}/p/manifest.json"},
      {"a manifest naming a missing shard", prepared(R"({"tokenizer": {"vocab_size": 164}, "splits": {"train": {"shards": ["train-00009.h5"]}, "heldout": {"shards": ["heldout-00000.h5"]}}})"), TRAIN, "{C}/p/train-00009.h5"},
      {"a manifest naming a path outside", prepared(R"({"tokenizer": {"vocab_size": 164}, "splits": {"train": {"shards": ["../../etc/passwd"]}, "heldout": {"shards": ["heldout-00000.h5"]}}})"), TRAIN, "../../etc/passwd"},
      {"a truncated shard", {{"p/manifest.json", manifest}, {"p/train-00000.h5", shard.substr(0, shard.size() / 2)}, {"p/heldout-00000.h5", read_file(t5.file("prep/heldout-00000.h5"))}}, TRAIN, "{C}/p/train-00000.h5: truncated"},
      {"a shard with a flipped bit", {{"p/manifest.json", manifest}, {"p/train-00000.h5", flipped}, {"p/heldout-00000.h5", read_file(t5.file("prep/heldout-00000.h5"))}}, TRAIN, "{C}/p/train-00000.h5: checksum mismatch"},
      {"a shard that is not HDF5", {{"p/manifest.json", manifest}, {"p/train-00000.h5", "hello"}, {"p/heldout-00000.h5", read_file(t5.file("prep/heldout-00000.h5"))}}, TRAIN, "{C}/p/train-00000.h5"},
  };
  const int good = run_cases(cases, {{"{T5}", t5.path.string()}}, {t5.path});
  EXPECT_EQ(good, int(cases.size()));
  std::printf("bad inputs (corpora, tokenizers, prepared data): %d of %zu one line, exit 2, nothing changed\n", good,
              cases.size());
}

// ---- sweeps, tables, claims, scores ---------------------------------------------------------

TEST(BadInputCampaign, SweepsTablesClaimsAndScores) {
  TempDir t5;
  prepared_corpus(t5);
  t5.write("base.yaml", replace_all(kTinyModel, {{"{T5}", t5.path.string()}}));
  const std::string squad =
      R"({"version": "1.1", "data": [{"title": "T", "paragraphs": [{"context": "Denver won in 2016.", "qas": [{"id": "a", "question": "Who?", "answers": [{"text": "Denver", "answer_start": 0}]}]}]}]})";
  t5.write("dev.json", squad);
  t5.write("pred.json", R"({"a": "Denver"})");
  const std::string good_result =
      R"({"name": "r1", "sweep": "s", "budget": "short", "seed": 1, "ln_ppl": 2.5, "d_model": 32, "attention": {"encoder_self": {"variant": "multi_head", "h_k": 4, "h": 4, "h_v": 4, "d_k": 8, "d_v": 8, "dynamic": []}, "decoder_self": {"variant": "multi_head", "h_k": 4, "h": 4, "h_v": 4, "d_k": 8, "d_v": 8, "dynamic": []}, "encoder_decoder": {"variant": "multi_head", "h_k": 4, "h": 4, "h_v": 4, "d_k": 8, "d_v": 8, "dynamic": []}}})";
  auto results = [](const std::string& line) { return std::vector<std::pair<std::string, std::string>>{{"s/results.jsonl", line + "\n"}}; };
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string s = good_result;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  const std::string SW = "sweep --dry-run --out {C}/out --config {C}/s.yaml";
  const std::string SC = "score squad --data {T5}/dev.json --predictions ";
  const std::vector<Case> cases = {
      {"a sweep that is not YAML", {{"s.yaml", "sweep: [\n"}}, SW, "{C}/s.yaml"},
      {"a sweep without a name", {{"s.yaml", "base: {T5}/base.yaml\ngrid: {attention.h: [2]}\n"}}, SW, "sweep"},
      {"a sweep key thx does not know", {{"s.yaml", "sweep: s\nbase: {T5}/base.yaml\ngrdi: {attention.h: [2]}\n"}}, SW, "grdi"},
      {"a grid key the config does not have", {{"s.yaml", "sweep: s\nbase: {T5}/base.yaml\ngrid: {attention.hh: [2]}\n"}}, SW, "attention.hh"},
      {"a grid value of the wrong type", {{"s.yaml", "sweep: s\nbase: {T5}/base.yaml\ngrid: {attention.h: [two]}\n"}}, SW, "attention.h"},
      {"an empty grid list", {{"s.yaml", "sweep: s\nbase: {T5}/base.yaml\ngrid: {attention.h: []}\n"}}, SW, "attention.h"},
      {"a missing base config", {{"s.yaml", "sweep: s\nbase: none.yaml\ngrid: {attention.h: [2]}\n"}}, SW, "none.yaml"},
      {"zip lists of different lengths", {{"s.yaml", "sweep: s\nbase: {T5}/base.yaml\nzip: {attention.h: [2, 4], model.d_ff: [64]}\n"}}, SW, "zip"},
      {"a sweep --out that is a file", {{"s.yaml", "sweep: s\nbase: {T5}/base.yaml\ngrid: {attention.h: [2]}\n"}, {"f", "x"}}, "sweep --dry-run --out {C}/f --config {C}/s.yaml", "{C}/f: exists and is not a directory"},
      {"a sweep of BERT on T5's data", {{"s.yaml", "sweep: s\nbase: {T5}/base.yaml\nvariants: [{name: b, set: {model.type: bert}}]\n"}}, SW, "run 'b': {T5}/base.yaml:3: data.prepared: {T5}/prep: tokenized with t5 ids; BERT and ALBERT need"},
      {"a sweep of an unknown table", {{"s.yaml", "sweep: s\ntable: table99\nbase: {T5}/base.yaml\ngrid: {attention.h: [2]}\n"}}, SW, "table99"},
      {"a sweep of runs the ranks cannot share", {{"s.yaml", "sweep: s\nbase: {T5}/base.yaml\ngrid: {attention.h: [2]}\nset: {train.batch_size: 3}\n"}}, SW + " --ranks-per-run 2", "train.batch_size"},
      {"no results to tabulate", {}, "table --sweep {C}", "{C}/results.jsonl: no results file"},
      {"a table of no sweep", {}, "table", "table: --sweep DIR is required"},
      {"a results line that is not JSON", results("{\"name\": "), "table --sweep {C}/s --layout table1", "{C}/s/results.jsonl:1"},
      {"a results line without a name", results("{\"ln_ppl\": 2}"), "table --sweep {C}/s --layout table1", "{C}/s/results.jsonl:1"},
      {"ln_ppl as a string", results(replaced("\"ln_ppl\": 2.5", "\"ln_ppl\": \"2.5\"")), "table --sweep {C}/s --layout table1", "ln_ppl"},
      {"a name that is a number", results(replaced("\"name\": \"r1\"", "\"name\": 5")), "table --sweep {C}/s --layout table1", "{C}/s/results.jsonl:1"},
      {"heads as strings", results(replaced("\"h\": 4", "\"h\": \"4\"")), "table --sweep {C}/s --layout table1", "attention"},
      {"dynamic projections as numbers", results(replaced("\"dynamic\": []", "\"dynamic\": [1]")), "table --sweep {C}/s --layout table1", "{C}/s/results.jsonl:1"},
      {"parameters per layer type as strings (a row of Table 1 that matches)",
       results(replace_all(good_result, {{"\"d_model\": 32", "\"d_model\": 48"}, {"\"h_k\": 4, \"h\": 4, \"h_v\": 4", "\"h_k\": 6, \"h\": 6, \"h_v\": 6"},
                                         {"\"seed\": 1", "\"seed\": 1, \"params_per_att_layer\": {\"encoder_self\": \"many\"}"}})),
       "table --sweep {C}/s --layout table1", "{C}/s/results.jsonl:1: 'params_per_att_layer'"},
      {"a seed as a string", results(replaced("\"seed\": 1", "\"seed\": \"one\"")), "claims --sweep {C}/s", "seed"},
      {"downstream metrics as strings", results(replaced("\"seed\": 1", "\"seed\": 1, \"downstream\": {\"sst2\": {\"accuracy\": \"90\"}}")), "claims --sweep {C}/s", "downstream"},
      {"an unknown table layout", results(good_result), "table --sweep {C}/s --layout table99", "table99"},
      {"SQuAD data that is not JSON", {{"d.json", "{\"data\": ["}}, "score squad --data {C}/d.json --predictions {T5}/pred.json", "{C}/d.json"},
      {"SQuAD data whose articles are numbers", {{"d.json", "{\"data\": [1, 2]}"}}, "score squad --data {C}/d.json --predictions {T5}/pred.json", "{C}/d.json"},
      {"SQuAD questions that are strings", {{"d.json", R"({"data": [{"paragraphs": [{"context": "c", "qas": ["q"]}]}]})"}}, "score squad --data {C}/d.json --predictions {T5}/pred.json", "{C}/d.json"},
      {"SQuAD answers that are numbers", {{"d.json", R"({"data": [{"paragraphs": [{"context": "c", "qas": [{"id": "a", "question": "q", "answers": [7]}]}]}]})"}}, "score squad --data {C}/d.json --predictions {T5}/pred.json", "{C}/d.json"},
      {"predictions that are a list", {{"p.json", "[\"Denver\"]"}}, SC + "{C}/p.json", "{C}/p.json"},
      {"a prediction that is a number", {{"p.json", "{\"a\": 3}"}}, SC + "{C}/p.json", "{C}/p.json"},
      {"predictions that are not JSON", {{"p.json", "{\"a\": "}}, SC + "{C}/p.json", "{C}/p.json"},
      {"no-answer probabilities as strings", {{"n.json", "{\"a\": \"high\"}"}}, SC + "{T5}/pred.json --na-probs {C}/n.json", "{C}/n.json"},
      {"missing predictions", {}, SC + "{C}/none.json", "{C}/none.json"},
      {"an unknown score kind", {}, "score glue --data {T5}/dev.json --predictions {T5}/pred.json", "score: 'glue' is not a subcommand; one of: squad"},
  };
  const int good = run_cases(cases, {{"{T5}", t5.path.string()}}, {t5.path});
  EXPECT_EQ(good, int(cases.size()));
  std::printf("bad inputs (sweeps, tables, claims, scores): %d of %zu one line, exit 2, nothing changed\n", good,
              cases.size());
}

// ---- fine-tuning and evaluation -------------------------------------------------------------

TEST(BadInputCampaign, FineTuningAndEvaluation) {
  FinetuneFixture albert;
  make_finetune_fixture(albert, true);  // a pretrained tiny ALBERT, its tokenizer, a tiny SST-2
  TempDir t5;
  prepared_corpus(t5);
  ASSERT_EQ(run_thx("--threads 1 pretrain --config " + t5.write("run.yaml", replace_all(kTinyModel, {{"{T5}", t5.path.string()}})) +
                    " --run-dir " + t5.file("run")).code, 0);
  // A fine-tuned ALBERT for thx eval.
  const RunResult ft = run_thx("--threads 1 finetune --config " + albert.config + " --set finetune.steps=2 --set "
                               "finetune.eval_every=2 --set checkpoint.every=2 --out " + albert.dir.file("ft"));
  ASSERT_EQ(ft.code, 0) << ft.out;
  EXPECT_NE(ft.out.find("; results in " + albert.dir.file("ft/sst2.json") + "\n"), std::string::npos) << ft.out;
  // Its memory check's bound, AdamW's state among its parts, as the line states it.
  const std::regex memory(R"(\[finetune\] memory: at least [0-9.]+ [GM]B a process while it trains )"
                          R"(\(parameters [0-9.]+ [GM]B, the optimizer's state [0-9.]+ [GM]B, .*; )"
                          R"(micro-batches of 8 examples\), of )");
  EXPECT_TRUE(std::regex_search(ft.out, memory)) << ft.out;
  const std::string A = albert.dir.path.string();
  // Task data in its own root {C}/data, the rest of the fixture as is.
  const std::string FT = "finetune --config " + albert.config + " --set finetune.data={C}/data --out {C}/out ";
  const std::string sst_ok = read_file(albert.dir.file("data/glue/SST-2/dev.tsv"));
  auto sst = [&](const std::string& train) {
    return std::vector<std::pair<std::string, std::string>>{{"data/glue/SST-2/train.tsv", train}, {"data/glue/SST-2/dev.tsv", sst_ok}};
  };
  const std::string squad_ok =
      R"({"data": [{"paragraphs": [{"context": "Denver won in 2016.", "qas": [{"id": "a", "question": "Who?", "answers": [{"text": "Denver", "answer_start": 0}]}]}]}]})";
  auto squad = [&](const std::string& train) {
    return std::vector<std::pair<std::string, std::string>>{{"data/squad/v1.1/train-v1.1.json", train},
                                                            {"data/squad/v1.1/dev-v1.1.json", squad_ok}};
  };
  const std::string race_ok = R"({"article": "A.", "questions": ["Q?"], "options": [["a", "b", "c", "d"]], "answers": ["A"], "id": "1"})";
  auto race = [&](const std::string& train) {
    return std::vector<std::pair<std::string, std::string>>{{"data/race/train/high/1.txt", train}, {"data/race/dev/high/1.txt", race_ok}};
  };
  auto cb = [&](const std::string& train) {
    return std::vector<std::pair<std::string, std::string>>{
        {"data/superglue/CB/train.jsonl", train},
        {"data/superglue/CB/val.jsonl", R"({"premise": "P", "hypothesis": "H", "label": "neutral", "idx": 0})" "\n"}};
  };
  const std::vector<Case> cases = {
      {"a GLUE row with an unknown label", sst("sentence\tlabel\ngood\t1\nbad\tmaybe\n"), FT, "{C}/data/glue/SST-2/train.tsv:3"},
      {"a GLUE row with a missing field", sst("sentence\tlabel\ngood\t1\nbad\n"), FT, "{C}/data/glue/SST-2/train.tsv:3"},
      {"a GLUE header without the label column", sst("sentence\tlabl\ngood\t1\n"), FT, "{C}/data/glue/SST-2/train.tsv:1: the header has no 'label' column"},
      {"an empty GLUE file", sst(""), FT, "{C}/data/glue/SST-2/train.tsv"},
      {"a missing task split", {{"data/glue/SST-2/dev.tsv", sst_ok}}, FT, "{C}/data/glue/SST-2/train.tsv"},
      {"a STS-B score that is not a number", {{"data/glue/STS-B/train.tsv", "sentence1\tsentence2\tscore\na\tb\thigh\n"}, {"data/glue/STS-B/dev.tsv", "sentence1\tsentence2\tscore\na\tb\t1.0\n"}}, FT + "--set finetune.tasks=[stsb]", "{C}/data/glue/STS-B/train.tsv:2"},
      {"a SuperGLUE line that is not JSON", cb("{\"premise\": \n"), FT + "--set finetune.tasks=[cb]", "{C}/data/superglue/CB/train.jsonl:1"},
      {"a SuperGLUE label out of the set", cb(R"({"premise": "P", "hypothesis": "H", "label": "maybe", "idx": 0})" "\n"), FT + "--set finetune.tasks=[cb]", "{C}/data/superglue/CB/train.jsonl:1"},
      {"a SuperGLUE field of the wrong type", cb(R"({"premise": 3, "hypothesis": "H", "label": "neutral", "idx": 0})" "\n"), FT + "--set finetune.tasks=[cb]", "{C}/data/superglue/CB/train.jsonl:1"},
      {"a SQuAD file that is not JSON", squad("{\"data\": [}"), FT + "--set finetune.tasks=[squad11]", "{C}/data/squad/v1.1/train-v1.1.json"},
      {"SQuAD without data", squad("{\"version\": \"1.1\"}"), FT + "--set finetune.tasks=[squad11]", "{C}/data/squad/v1.1/train-v1.1.json"},
      {"a SQuAD question without an id", squad(R"({"data": [{"paragraphs": [{"context": "Denver won.", "qas": [{"question": "Who?", "answers": [{"text": "Denver", "answer_start": 0}]}]}]}]})"), FT + "--set finetune.tasks=[squad11]", "{C}/data/squad/v1.1/train-v1.1.json:1"},
      {"a SQuAD answer_start that is a string", squad(R"({"data": [{"paragraphs": [{"context": "Denver won.", "qas": [{"id": "a", "question": "Who?", "answers": [{"text": "Denver", "answer_start": "0"}]}]}]}]})"), FT + "--set finetune.tasks=[squad11]", "answer_start"},
      {"SQuAD answers none of which is at its answer_start", squad(R"({"data": [{"paragraphs": [{"context": "Denver won.", "qas": [{"id": "a", "question": "Who?", "answers": [{"text": "Denver", "answer_start": 4}]}]}]}]})"), FT + "--set finetune.tasks=[squad11]", "none of its 1 training answers"},
      {"a RACE file with three options", race(R"({"article": "A.", "questions": ["Q?"], "options": [["a", "b", "c"]], "answers": ["A"], "id": "1"})"), FT + "--set finetune.tasks=[race]", "{C}/data/race/train/high/1.txt"},
      {"a RACE answer that is not A-D", race(R"({"article": "A.", "questions": ["Q?"], "options": [["a", "b", "c", "d"]], "answers": ["E"], "id": "1"})"), FT + "--set finetune.tasks=[race]", "{C}/data/race/train/high/1.txt"},
      {"a RACE file that is not JSON", race("{\"article\": "), FT + "--set finetune.tasks=[race]", "{C}/data/race/train/high/1.txt"},
      {"a RACE option that is a number", race(R"({"article": "A.", "questions": ["Q?"], "options": [["a", 2, "c", "d"]], "answers": ["A"], "id": "1"})"), FT + "--set finetune.tasks=[race]", "{C}/data/race/train/high/1.txt"},
      {"an unknown task", sst("sentence\tlabel\ngood\t1\n"), FT + "--set finetune.tasks=[sst3]", "sst3"},
      {"a missing pretrained checkpoint", sst("sentence\tlabel\ngood\t1\n"), FT + "--set finetune.pretrained={C}/none", "{C}/none"},
      {"a truncated pretrained checkpoint", {{"ck.h5", read_file(list_checkpoints(A + "/pretrained/checkpoints").back()).substr(0, 3000)}}, FT + "--set finetune.pretrained={C}/ck.h5", "{C}/ck.h5: truncated"},
      {"a T5 tokenizer for an ALBERT", sst("sentence\tlabel\ngood\t1\n"), FT + "--set finetune.tokenizer={T5}/tiny.model", "{T5}/tiny.model: a T5-convention tokenizer"},
      {"a missing tokenizer", sst("sentence\tlabel\ngood\t1\n"), FT + "--set finetune.tokenizer={C}/none.model", "--set finetune.tokenizer={C}/none.model: finetune.tokenizer: {C}/none.model: no such tokenizer model"},
      {"a task whose files are not there", {}, FT + "--set finetune.tasks=[rte]", "--set finetune.data={C}/data: finetune.data: {C}/data/glue/RTE/train.tsv: not found (task rte, split train)"},
      {"an ALBERT tokenizer for a T5", sst("sentence\tlabel\ngood\t1\n"), FT + "--set finetune.tokenizer={A}/tiny.model --set finetune.pretrained={T5}/run", "{A}/tiny.model"},
      {"an ALBERT recipe for a T5 checkpoint", sst("sentence\tlabel\ngood\t1\n"), FT + "--set finetune.model_type=albert --set finetune.pretrained={T5}/run", "finetune.model_type: this recipe is for model.type albert, but {T5}/run"},
      {"the shipped T5 recipe for an ALBERT checkpoint", {}, "finetune --config " THX_SOURCE_DIR "/configs/mini/finetune-t5.yaml --set finetune.pretrained=" + A + "/pretrained --out {C}/out", "configs/mini/finetune-t5.yaml:10: finetune.model_type: this recipe is for model.type t5, but " + A + "/pretrained/checkpoints/step-00000005.h5 has model.type albert; use a recipe for albert"},
      {"inputs longer than the ALBERT's position table", sst("sentence\tlabel\ngood\t1\n"), FT + "--set finetune.inputs_length=100000", "--set finetune.inputs_length=100000: finetune.inputs_length 100000: the pretrained albert"},
      {"--out that is a file", {{"f", "x"}}, "finetune --config " + albert.config + " --out {C}/f", "{C}/f: exists and is not a directory"},
      {"--out below a file", {{"f", "x"}}, "finetune --config " + albert.config + " --out {C}/f/x", "--out {C}/f/x: cannot create the directory ({C}/f is not a directory)"},
      {"an evaluation's --out below a file", {{"f", "x"}}, "eval --config " + albert.config + " --checkpoint {A}/ft --out {C}/f/x", "--out {C}/f/x: cannot create the directory ({C}/f is not a directory)"},
      {"--out with results and no --resume", {}, "finetune --config " + albert.config + " --out {A}/ft", "{A}/ft"},
      {"a model type thx does not know", {}, "finetune --config " + albert.config + " --set finetune.model_type=gpt --out {C}/out", "finetune.model_type: 'gpt'; allowed: t5, bert, albert"},
      {"a target with no room beside EOS", {}, "finetune --config " + albert.config + " --set finetune.targets_length=1 --out {C}/out", "finetune.targets_length: 1 must be at least 2 (a target's token and EOS)"},
      {"a fine-tuning key thx does not know", {}, "finetune --config " + albert.config + " --set finetune.stpes=3 --out {C}/out", "finetune.stpes"},
      {"an evaluation with inputs longer than the position table", {}, "eval --config " + albert.config + " --set finetune.inputs_length=100000 --checkpoint {A}/ft --out {C}/ev", "--set finetune.inputs_length=100000: finetune.inputs_length 100000: the pretrained albert"},
      {"fine-tuning into a pretraining run's folder", {}, "finetune --config " + albert.config + " --out {T5}/run", "--out {T5}/run: a pretraining run's folder (it holds config.yaml); choose another"},
      {"pretraining into a fine-tuning run's folder", {}, "pretrain --config {T5}/run.yaml --run-dir {A}/ft", "--run-dir {A}/ft: a fine-tuning run's folder (it holds finetune.yaml); choose another"},
      {"fine-tuning from a fine-tuning run", {}, "finetune --config " + albert.config + " --set finetune.pretrained={A}/ft --out {C}/out", "{A}/ft: a fine-tuning run's folder, not a pretraining one; give the pretraining run or checkpoint it started from, {A}/pretrained"},
      {"fine-tuning from a fine-tuning checkpoint", {}, "finetune --config " + albert.config + " --set finetune.pretrained={A}/ft/checkpoints/sst2/step-00000002.h5 --out {C}/out", "step-00000002.h5: a fine-tuning checkpoint, not a pretraining one; give the pretraining run or checkpoint it started from, {A}/pretrained"},
      {"an evaluation into the fine-tuning run's own folder", {}, "eval --config " + albert.config + " --checkpoint {A}/ft/sst2.h5 --out {A}/ft/", "--out {A}/ft/: a fine-tuning run's folder (it holds finetune.yaml), whose results eval would overwrite; choose another (without --out: {A}/ft/eval)"},
      {"an evaluation of a missing checkpoint", {}, "eval --config " + albert.config + " --checkpoint {C}/none.h5 --out {C}/ev", "{C}/none.h5"},
      {"an evaluation of another model's checkpoint", {}, "eval --config " + albert.config + " --checkpoint {T5}/run/checkpoints/step-00000002.h5 --out {C}/ev", "{T5}/run/checkpoints/step-00000002.h5"},
      {"an evaluation of a truncated checkpoint", {{"ft.h5", read_file(A + "/ft/sst2.h5").substr(0, 2000)}}, "eval --config " + albert.config + " --checkpoint {C}/ft.h5 --out {C}/ev", "{C}/ft.h5: truncated"},
  };
  const int good = run_cases(cases, {{"{T5}", t5.path.string()}, {"{A}", A}}, {t5.path, albert.dir.path});
  EXPECT_EQ(good, int(cases.size()));
  std::printf("bad inputs (fine-tuning, evaluation): %d of %zu one line, exit 2, nothing changed\n", good, cases.size());
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
