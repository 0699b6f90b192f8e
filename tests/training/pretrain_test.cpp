// Checkpoints, the run directory, step-probe files and failure handling of pretraining.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <csignal>
#include <regex>
#include <thread>

#include "common/error.h"
#include "common/fs.h"
#include "common/h5.h"
#include "common/log.h"
#include "common/runtime.h"
#include "data/prepare.h"
#include "training/checkpoint.h"
#include "training/spec.h"
#include "training/training_fixtures.h"
#include "common/config_tree.h"

namespace thx::test {
namespace fs = std::filesystem;

TEST(Checkpoint, RoundTripPruneAndCorruption) {
  TempDir dir;
  Checkpoint c;
  c.params["encoder/layers/0/self_attention/P_q"] = torch::randn({4, 2, 3});
  c.optimizer["encoder/layers/0/self_attention/P_q/v"] = torch::rand({4, 2, 3});
  c.step = 7, c.optimizer_step = 7, c.stream = {1, 2, 3, 4};
  c.rng = at::detail::getDefaultCPUGenerator().get_state();
  c.config = "a: 1\n";
  for (int64_t s : {5, 10, 15}) save_checkpoint(checkpoint_path(dir.path.string(), s), c);
  EXPECT_EQ(list_checkpoints(dir.path.string()).size(), 3u);
  prune_checkpoints(dir.path.string(), 2);
  const auto left = list_checkpoints(dir.path.string());
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(fs::path(left[0]).filename(), "step-00000010.h5");
  const Checkpoint r = load_checkpoint(left[1]);
  EXPECT_TRUE(torch::equal(r.params.at("encoder/layers/0/self_attention/P_q"),
                           c.params.at("encoder/layers/0/self_attention/P_q")));
  EXPECT_EQ(r.stream.example, 4);
  EXPECT_EQ(r.config, "a: 1\n");
  EXPECT_TRUE(torch::equal(r.rng, c.rng));
  fs::resize_file(left[1], fs::file_size(left[1]) / 3);
  try {
    load_checkpoint(left[1]);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(left[1] + ": ", 0), 0u) << e.what();
  }
}

// What a checkpoint's folder may hold besides checkpoints is never one: a file an interrupted
// save left (H5Writer's "<name>.tmp-<pid>", common/h5.h), copies and other names. A data-parallel
// run's world size comes back (a resume on another number of ranks says so), and a file
// without parameters is refused, naming it.
TEST(Checkpoint, OnlyWholeCheckpointsAreListedAndTheirStateComesBack) {
  TempDir dir;
  Checkpoint c;
  c.params["shared"] = torch::randn({3, 2});
  c.world_size = 4;
  const std::string path = checkpoint_path(dir.path.string(), 20);
  save_checkpoint(path, c);
  for (const char* other : {"step-00000030.h5.tmp-4242", "step-00000040.h5.bak", "step-50.h5", "step-00000060.hdf5"})
    fs::copy_file(path, dir.file(other));
  EXPECT_EQ(list_checkpoints(dir.path.string()), std::vector<std::string>{path});
  EXPECT_EQ(load_checkpoint(path).world_size, 4);
  Checkpoint empty;
  const std::string none = dir.file("none.h5");
  save_checkpoint(none, empty);
  EXPECT_EQ(error_of([&] { load_checkpoint(none); }), none + ": missing group /params");
}

TEST(Pretrain, RunDirectoryStepProbeAndProtection) {
  TempDir dir;
  const PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 10);
  const std::string run = dir.file("run");
  const PretrainResult r = run_pretrain(c, run, false);
  EXPECT_EQ(r.step, 10);
  EXPECT_GT(r.ln_ppl, 0);
  EXPECT_TRUE(fs::exists(run + "/config.yaml"));
  EXPECT_TRUE(fs::exists(run + "/train.log"));
  // The log gives the memory check's bound as the run is configured, against the memory checked.
  const int64_t vocab = load_split(c.data.prepared, "train").vocab_size;
  const MemoryBound bound = training_memory_lower_bound(c.spec, vocab, 8, 32, 8, {}, false, run_device(), false, false,
                                                        step_memory(c));
  const std::string log = read_file(run + "/train.log");
  EXPECT_NE(log.find(fmt::format("memory: at least {} a process while it trains ({}; micro-batches of 8 "
                                 "examples), of {} ",
                                 format_gb(bound.total()), memory_parts(bound), memory_owner(run_device()))),
            std::string::npos)
      << log;
  EXPECT_EQ(list_checkpoints(run + "/checkpoints").size(), 2u);  // keep: 2
  std::ifstream m(run + "/metrics.jsonl");
  int lines = 0, evals = 0;
  for (std::string l; std::getline(m, l); ++lines) evals += l.find("ln_ppl") != std::string::npos;
  EXPECT_EQ(lines, 4);  // steps 5 and 10, each logged and evaluated
  EXPECT_EQ(evals, 2);
  // Without --resume, an existing run is never overwritten.
  EXPECT_THROW(run_pretrain(c, run, false), InputError);
  // step-probe: the documented layout, and params_after = the optimizer applied to grads.
  const std::string probe = dir.file("probe.h5");
  run_step_probe(c, probe);
  H5Reader h(probe);
  EXPECT_EQ(h.read("/batch/inputs").scalar_type(), torch::kInt32);
  EXPECT_EQ(h.read("/batch/inputs").sizes().vec(), (std::vector<int64_t>{8, 32}));
  const std::string q = "encoder/layers/0/self_attention/P_q";
  EXPECT_EQ(h.read("/params_before/" + q).sizes().vec(), (std::vector<int64_t>{32, 8, 4}));
  EXPECT_TRUE(h.has("/grads/" + q));
  EXPECT_FALSE(torch::equal(h.read("/params_before/" + q), h.read("/params_after/" + q)));
  EXPECT_TRUE(h.has("/optimizer/shared/v"));  // [128, 32]: 32 < 128, not factored
  EXPECT_TRUE(h.has("/optimizer/encoder/layers/0/self_attention/P_l/v"));
  EXPECT_GT(h.read_scalar("/loss"), h.read_scalar("/nll"));  // the z-loss is positive
}

TEST(Pretrain, NonFiniteLossStopsAndKeepsTheGoodCheckpoint) {
  TempDir dir;
  PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 10);
  const std::string run = dir.file("run");
  c.train.steps = 5;
  run_pretrain(c, run, false);  // a good checkpoint at step 5
  const std::string good = list_checkpoints(run + "/checkpoints").back();
  const auto before = fs::file_size(good);
  c.train.steps = 10;
  c.optimizer.learning_rate = 1e30;  // diverges at once
  c.optimizer.schedule = "constant";
  try {
    run_pretrain(c, run, true);
    FAIL() << "no error";
  } catch (const RunError& e) {
    EXPECT_TRUE(std::regex_search(std::string(e.what()),
                                  std::regex("^step [0-9]+: the loss is (NaN|\\+inf|-inf); training stopped")))
        << e.what();
  }
  EXPECT_EQ(list_checkpoints(run + "/checkpoints").back(), good);
  EXPECT_EQ(fs::file_size(good), before);
}

TEST(Pretrain, SigtermSavesACheckpointAndResumeContinues) {
  TempDir dir;
  PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 100000);
  c.checkpoint.every = 100000, c.eval.every = 100000;  // only the signal makes a checkpoint
  const std::string run = dir.file("run");
  // A watcher sends SIGTERM once the first progress line is in metrics.jsonl.
  std::thread watcher([&] {
    for (int i = 0; i < 6000; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::error_code ec;
      if (fs::file_size(run + "/metrics.jsonl", ec) > 0 && !ec) break;
    }
    std::raise(SIGTERM);
  });
  const PretrainResult r = run_pretrain(c, run, false);
  watcher.join();
  EXPECT_TRUE(r.interrupted);
  ASSERT_GE(r.step, 5);
  ASSERT_LT(r.step, c.train.steps);
  const auto saved = list_checkpoints(run + "/checkpoints");
  ASSERT_EQ(saved.size(), 1u);
  EXPECT_EQ(saved.back(), checkpoint_path(run + "/checkpoints", r.step));
  EXPECT_EQ(load_checkpoint(saved.back()).step, r.step);
  // --resume picks it up and runs to the (now shorter) end.
  c.train.steps = r.step + 3;
  const PretrainResult r2 = run_pretrain(c, run, true);
  EXPECT_FALSE(r2.interrupted);
  EXPECT_EQ(r2.step, r.step + 3);
}

// ALBERT pretraining end to end: MLM and SOP metrics in metrics.jsonl, each shared parameter
// once in the checkpoint, and --resume bit-exact (parameters, LAMB state, data position).
// Figure 1 from an ALBERT checkpoint (dir's "straight" run): the shared group is one layer; with
// h_k != h != h_v the matrices are rectangular and the summary gives singular values.
void figure1_from_albert(const TempDir& dir, const std::string& prep) {
  const std::string scripts = std::string(THX_SOURCE_DIR) + "/scripts/";
  auto figure = [&](const std::string& ckpt, const std::string& name) {
    const std::string png = dir.file(name + ".png"), txt = dir.file(name + ".txt");
    EXPECT_EQ(std::system(("/usr/bin/python3 " + scripts + "plot_figure1.py " + ckpt + " --out " + png +
                           " --summary " + txt + " > /dev/null").c_str()), 0);
    const std::string bytes = fs::exists(png) ? read_file(png) : "";
    EXPECT_TRUE(bytes.size() > 1000 && bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
    return fs::exists(txt) ? read_file(txt) : "";
  };
  const std::string square = figure(list_checkpoints(dir.file("straight") + "/checkpoints").back(), "square");
  EXPECT_NE(square.find("encoder/groups/0/attention\n  P_l 4x4: det "), std::string::npos) << square;
  PretrainConfig rect = tiny_albert_pretrain(prep, 2);
  rect.attention.encoder_self.h_k = 2, rect.attention.encoder_self.h_v = 8;
  run_pretrain(finish(rect), dir.file("rect"), false);
  const std::string r = figure(list_checkpoints(dir.file("rect") + "/checkpoints").back(), "rect");
  EXPECT_NE(r.find("P_l 2x4: singular values "), std::string::npos) << r;
  EXPECT_NE(r.find("P_w 4x8: singular values "), std::string::npos) << r;
  EXPECT_NE(r.find("P_l x P_w 2x8: singular values "), std::string::npos) << r;
}

TEST(Pretrain, AlbertMetricsCheckpointsAndExactResume) {
  TempDir dir;
  const std::string prep = prepared_corpus(dir, 120, TokenizerConvention::albert);
  PretrainConfig c = tiny_albert_pretrain(prep, 10);
  bitwise_runs(c);
  testing::internal::CaptureStderr();  // the start-up lines come before the run's log file opens
  const PretrainResult straight = run_pretrain(c, dir.file("straight"), false);
  const std::string log = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(straight.mlm_accuracy && straight.sentence_accuracy);
  EXPECT_GE(*straight.mlm_accuracy, 0.0);
  std::ifstream m(dir.file("straight") + "/metrics.jsonl");
  std::string text((std::istreambuf_iterator<char>(m)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"mlm_accuracy\""), std::string::npos);
  EXPECT_NE(text.find("\"sop_accuracy\""), std::string::npos);
  const Checkpoint a = load_checkpoint(list_checkpoints(dir.file("straight") + "/checkpoints").back());
  EXPECT_TRUE(a.params.count("encoder/groups/0/attention/P_l"));
  for (const auto& [k, v] : a.params) EXPECT_EQ(k.find("encoder/layers/"), std::string::npos) << k;
  EXPECT_TRUE(a.optimizer.count("encoder/groups/0/attention/P_l/m"));
  // The log splits the total as the published BERT/ALBERT totals count it: the encoder with
  // the word embedding at its unpadded rows; the MLM and sentence heads; the padding rows.
  int64_t encoder = 0, heads = 0, padding = 0, total = 0;
  for (const auto& [k, v] : a.params) {
    total += v.numel();
    if (k.rfind("mlm/", 0) == 0 || k.rfind("sentence/", 0) == 0) heads += v.numel();
    else encoder += v.numel();
  }
  const auto at_v = log.find("embeddings at V = ");
  ASSERT_NE(at_v, std::string::npos) << log;
  const int64_t vocab = std::atoll(log.c_str() + at_v + 18), word_rows = a.params.at("embeddings/word").size(0);
  ASSERT_TRUE(vocab > word_rows - 128 && vocab <= word_rows && word_rows % 128 == 0) << vocab << " " << word_rows;
  padding = (word_rows - vocab) * a.params.at("embeddings/word").size(1), encoder -= padding;
  ASSERT_GT(heads, 0);
  EXPECT_NE(log.find(fmt::format("ALBERT {} parameters;", total)), std::string::npos) << log;
  EXPECT_NE(log.find(fmt::format("of which the encoder {} (embeddings at V = {}, layers and pooler: what the "
                                 "published BERT-base 109,482,240 and ALBERT-base 11,683,584 count), the "
                                 "pretraining heads {} and the word embedding's padding to a multiple of 128 {}",
                                 encoder, vocab, heads, padding)), std::string::npos) << log;
  // Resume from the step-5 checkpoint of a copy (the step-10 one removed): the same bits.
  fs::copy(dir.file("straight"), dir.file("resumed"), fs::copy_options::recursive);
  fs::remove(checkpoint_path(dir.file("resumed") + "/checkpoints", 10));
  run_pretrain(c, dir.file("resumed"), true);
  const Checkpoint b = load_checkpoint(list_checkpoints(dir.file("resumed") + "/checkpoints").back());
  ASSERT_EQ(a.params.size(), b.params.size());
  for (const auto& [k, v] : a.params) EXPECT_TRUE(torch::equal(v, b.params.at(k))) << k;
  for (const auto& [k, v] : a.optimizer) EXPECT_TRUE(torch::equal(v, b.optimizer.at(k))) << k;
  EXPECT_EQ(a.stream.example, b.stream.example);
  // step-probe writes the MLM batch and the shared parameters once.
  const std::string probe = dir.file("probe.h5");
  run_step_probe(c, probe);
  H5Reader h(probe);
  for (const char* k : {"/batch/inputs", "/batch/token_types", "/batch/positions", "/batch/targets", "/batch/labels"})
    EXPECT_TRUE(h.has(k)) << k;
  EXPECT_EQ(h.read("/batch/positions").sizes().vec(), (std::vector<int64_t>{8, 5}));
  EXPECT_TRUE(h.has("/grads/encoder/groups/0/attention/P_l"));
  EXPECT_TRUE(h.has("/optimizer/encoder/groups/0/attention/P_l/m"));
  // Figure 1's script on its checkpoints, where Debian's python3 is (not on a GPU machine).
  const std::string no_python = absent_on_gpu_machine("/usr/bin/python3 -c 'import h5py, matplotlib, numpy'",
                                                      "Debian's python3 with h5py, matplotlib and numpy");
  if (no_python.empty()) figure1_from_albert(dir, prep);
  else std::printf("(Figure 1's script not run: %s)\n", no_python.c_str());
  // ALBERT-convention shards are refused for T5 (no sentinels, no EOS), with the reason.
  try {
    run_pretrain(tiny_pretrain(prep, 2), dir.file("t5-on-albert"), false);
    FAIL();
  } catch (const ConfigError& e) {  // (the command names the file and line of data.prepared)
    EXPECT_EQ(e.key, "data.prepared");
    EXPECT_NE(std::string(e.what()).find("tokenized with albert ids; T5 needs T5's"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir.file("t5-on-albert")));
  // T5-convention shards are refused for ALBERT with the reason.
  TempDir t5_dir;
  PretrainConfig t5_data = tiny_albert_pretrain(prepared_corpus(t5_dir, 60), 2);
  try {
    run_pretrain(t5_data, dir.file("wrong"), false);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key, "data.prepared");
    EXPECT_NE(std::string(e.what()).find("tokenized with t5 ids"), std::string::npos) << e.what();
  }
}



// The held-out evaluation is chunked (eval.batch_size; 0, the default: the training micro-batch
// of one rank, so that it never needs more memory than a training step) without changing its
// numbers: the examples are drawn one by one, and the sums only change order.
TEST(Pretrain, HeldOutMetricsDoNotDependOnTheEvaluationBatch) {
  TempDir dir, albert_dir;
  PretrainConfig t5 = tiny_pretrain(prepared_corpus(dir), 2);
  PretrainConfig albert = tiny_albert_pretrain(prepared_corpus(albert_dir, 120, TokenizerConvention::albert), 2);
  for (PretrainConfig* c : {&t5, &albert}) {
    c->eval.examples = 11, c->train.grad_accum = 2;  // the micro-batch: 8 / 2 = 4 rows
    std::vector<PretrainResult> r;
    for (const int64_t rows : {int64_t(11), int64_t(3), int64_t(0)}) {
      c->eval.batch_size = rows;
      bitwise_runs(*c);  // (the three runs must train alike to the bit)
      r.push_back(run_pretrain(*c, dir.file(fmt::format("{}-{}", c->model.type, rows)), false));
    }
    EXPECT_EQ(eval_batch_rows(c->eval, c->train, 1), 4);
    EXPECT_EQ(eval_batch_rows(c->eval, c->train, 2), 2);
    for (size_t i = 1; i < r.size(); ++i) {
      EXPECT_NEAR(r[i].ln_ppl, r[0].ln_ppl, 1e-6 * r[0].ln_ppl) << c->model.type;
      EXPECT_EQ(r[i].mlm_accuracy, r[0].mlm_accuracy) << c->model.type;
      EXPECT_EQ(r[i].sentence_accuracy, r[0].sentence_accuracy) << c->model.type;
    }
  }
}

// A run's recorded held-out numbers are what evaluate_pretrained (`thx eval --checkpoint` without
// --config) recomputes from its checkpoints: T5's ln(PPL); ALBERT's MLM ln(PPL) and accuracies;
// a bf16 run's, whose evaluation takes the training precision (eval.precision ""), in bf16 too
// (an fp32 evaluation of its parameters differs in the low bits). The command prints the run's
// own result line.
TEST(Pretrain, AHeldOutEvaluationIsRecomputedFromItsCheckpoint) {
  TempDir dir, albert_dir;
  PretrainConfig t5 = tiny_pretrain(prepared_corpus(dir), 4);
  PretrainConfig albert = tiny_albert_pretrain(prepared_corpus(albert_dir, 120, TokenizerConvention::albert), 4);
  PretrainConfig bf16 = t5;
  bf16.train.precision = "bf16";
  ASSERT_EQ(bf16.eval.precision, "");
  for (PretrainConfig* c : {&t5, &albert, &bf16}) {
    const std::string name = c->model.type + "-" + c->train.precision;
    SCOPED_TRACE(name);
    c->eval.every = 2, c->checkpoint.every = 2, c->checkpoint.keep = 2;
    finish(*c);
    bitwise_runs(*c);  // (recomputed to the bit: a GPU's run is deterministic)
    const std::string run = dir.file(name);
    const PretrainResult last = run_pretrain(*c, run, false);
    const auto recorded = eval_records(run + "/metrics.jsonl");
    ASSERT_EQ(recorded.size(), 2u);
    for (const auto& rec : recorded) {
      const int64_t step = rec["step"];
      const std::string file = checkpoint_path(run + "/checkpoints", step);
      const Checkpoint ck = load_checkpoint(file);
      const PretrainResult r = evaluate_pretrained(*c, ck.params, ck.step, file);
      EXPECT_EQ(r.step, step);
      EXPECT_EQ(r.ln_ppl, rec["ln_ppl"].get<double>()) << step;
      if (c->model.encoder_only()) {
        EXPECT_EQ(r.mlm_accuracy, rec["mlm_accuracy"].get<double>()) << step;
        EXPECT_EQ(r.sentence_accuracy, rec["sop_accuracy"].get<double>()) << step;
      }
    }
    const RunResult cli = run_thx("--threads 1 eval --checkpoint " + run);
    ASSERT_EQ(cli.code, 0) << cli.out;
    const std::string line = result_line(*c, checkpoint_path(run + "/checkpoints", 4), last);
    EXPECT_NE(cli.out.find(line + " (" + std::to_string(c->eval.examples) + " examples of the held-out split)\n"),
              std::string::npos) << cli.out << "\nexpected: " << line;
  }
}

// data.max_predictions_per_seq is a BERT/ALBERT setting: a T5 may take inputs shorter than its
// default of 20 (it was refused before), an ALBERT may not.
TEST(PretrainConfig, MaskedPredictionsCapIsCheckedOnlyForEncoders) {
  ConfigTree t5;
  t5.merge_text("data: {prepared: p, inputs_length: 16, targets_length: 6}\n", "t5.yaml");
  EXPECT_EQ(load_pretrain_config(t5).data.inputs_length, 16);
  ConfigTree albert;
  albert.merge_text("model: {type: albert}\ndata: {prepared: p, inputs_length: 16}\n", "albert.yaml");
  try {
    load_pretrain_config(albert);
    FAIL() << "no error";
  } catch (const InputError& e) {  // the value came from the defaults: named as such
    EXPECT_NE(std::string(e.what()).find("data.max_predictions_per_seq: 20 is invalid: more than data.inputs_length 16"),
              std::string::npos) << e.what();
  }
}

}  // namespace thx::test
