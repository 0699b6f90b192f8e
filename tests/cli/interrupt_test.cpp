// An interrupted run is not a result: SIGINT or SIGTERM to `thx pretrain` or `thx sweep` saves a
// checkpoint, prints no result line (no held-out number that was never measured), says how to
// continue, and exits 128 + N (130, 143) as shells report a signal, so that `thx pretrain ... &&
// thx finetune ...` stops there; a held-out evaluation stops within a batch; a resumed run records
// each step once; predict's span filling stops within a decoding step, writing nothing; a prepare
// stops within a document and keeps nothing; a fine-tuned model's predictions and evaluation
// stop within a batch; before any of them can stop cleanly (the setup), a signal ends the command
// at once with one line. The binary is run and signalled as a user's shell would.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/fs.h"
#include "eval/eval_fixtures.h"
#include "training/checkpoint.h"
#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {
namespace fs = std::filesystem;

struct Stopped {
  int status = 0;
  std::string out, err;  // stdout, stderr
};

std::string slurp(const std::string& path) {
  std::ostringstream s;
  s << std::ifstream(path).rdbuf();
  return s.str();
}

// Starts thx with `args` (stdout and stderr to files in `dir`), sends `sig` once `ready()` (within
// a minute), and waits for it to end; `seconds`: from the signal to the end.
Stopped signal_when(const TempDir& dir, const std::string& args, const std::function<bool()>& ready, int sig,
                    double* seconds = nullptr) {
  const std::string out = dir.file("stdout.txt"), err = dir.file("stderr.txt");
  const std::string cmd = "exec " + std::string(THX_BINARY) + " " + args + " >" + out + " 2>" + err;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 0), setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);  // no re-exec
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 12000 && !ready(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto t0 = std::chrono::steady_clock::now();
  kill(pid, sig);
  Stopped s;
  waitpid(pid, &s.status, 0);
  if (seconds) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.out = slurp(out), s.err = slurp(err);
  return s;
}

Stopped signal_when_exists(const TempDir& dir, const std::string& args, const std::string& path, int sig) {
  return signal_when(dir, args, [&] { return fs::exists(path); }, sig);
}

TEST(Interrupt, APretrainRunExitsWithItsSignalAndPrintsNoResult) {
  TempDir dir;
  PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 100000);  // far longer than the test waits
  c.eval.every = 100000;
  finish(c);
  const std::string cfg = dir.write("run.yaml", c.yaml);
  for (const int sig : {SIGINT, SIGTERM}) {
    const std::string name = sig == SIGINT ? "int" : "term";
    SCOPED_TRACE(name);
    const std::string run = dir.file(name);
    const Stopped s = signal_when_exists(dir, "--threads 1 pretrain --config " + cfg + " --run-dir " + run,
                                         checkpoint_path(run + "/checkpoints", 5), sig);
    ASSERT_TRUE(WIFEXITED(s.status)) << s.err;
    EXPECT_EQ(WEXITSTATUS(s.status), 128 + sig) << s.err;
    EXPECT_EQ(s.out, "") << "a result line for a run that did not finish";
    const std::string said = run + ": interrupted by " + (sig == SIGINT ? "SIGINT" : "SIGTERM") + " at step ";
    EXPECT_NE(s.err.find(said), std::string::npos) << s.err;
    EXPECT_NE(s.err.find("of 100000, checkpoint saved; no result yet; continue with the same command and --resume"),
              std::string::npos) << s.err;
    EXPECT_FALSE(list_checkpoints(run + "/checkpoints").empty());
    const bool gpu = s.err.find("), on cuda:") != std::string::npos;  // (a GPU machine: the run's device)
    EXPECT_TRUE(gpu || s.err.find("), 1 thread\n") != std::string::npos) << "not \"1 threads\":\n" << s.err;
  }
}

// A long held-out evaluation (50,000 examples, one a batch: tens of seconds) stops within a
// batch of the signal; the step's checkpoint is saved, no evaluation is recorded for it.
TEST(Interrupt, AnEvaluationStopsWithinABatch) {
  TempDir dir;
  PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 1);
  c.train.log_every = 1, c.checkpoint.every = 1, c.eval.every = 1, c.eval.examples = 50000, c.eval.batch_size = 1;
  finish(c);
  const std::string run = dir.file("run"), err = dir.file("stderr.txt");
  double seconds = 0;
  const Stopped s = signal_when(
      dir, "--threads 1 pretrain --config " + dir.write("run.yaml", c.yaml) + " --run-dir " + run,
      [&] { return slurp(err).find("step 1/1 ") != std::string::npos; }, SIGTERM, &seconds);
  ASSERT_TRUE(WIFEXITED(s.status)) << s.err;
  EXPECT_EQ(WEXITSTATUS(s.status), 143) << s.err;
  EXPECT_LT(seconds, 5.0) << "the evaluation ran on after the signal:\n" << s.err;
  EXPECT_NE(s.err.find("step 1: the evaluation was stopped by SIGTERM; none is recorded for this step"),
            std::string::npos) << s.err;
  EXPECT_EQ(list_checkpoints(run + "/checkpoints"), std::vector<std::string>{checkpoint_path(run + "/checkpoints", 1)});
  EXPECT_EQ(slurp(run + "/metrics.jsonl").find("ln_ppl"), std::string::npos) << "an evaluation recorded";
}

// predict's span filling, told to decode far (a 5-step model does not end its spans), stops on
// SIGINT within a step: it says so, writes nothing, and exits 130 as pretrain does.
TEST(Interrupt, APredictionStopsWithinADecodingStepAndWritesNothing) {
  TempDir dir;
  PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 5);
  finish(c);
  const std::string run = dir.file("run");
  run_pretrain(c, run, false);
  const std::string in = dir.write("in.txt", "heads <extra_id_0> talk\nmore <extra_id_0>\n"), out = dir.file("out.txt");
  const std::string err = dir.file("stderr.txt");
  double seconds = 0;
  const Stopped s = signal_when(dir, "--log-level debug --threads 1 predict --checkpoint " + run + " --input " + in +
                                         " --out " + out + " --max-length 100000000",
                                [&] { return slurp(err).find("decoding 2 lines") != std::string::npos; }, SIGINT,
                                &seconds);
  ASSERT_TRUE(WIFEXITED(s.status)) << s.err;
  EXPECT_EQ(WEXITSTATUS(s.status), 128 + SIGINT) << s.err;
  const size_t said = s.err.find("predict: interrupted by SIGINT while decoding line ");
  EXPECT_NE(said, std::string::npos) << s.err;
  if (said != std::string::npos) EXPECT_NE(s.err.find(" of 2; nothing written\n", said), std::string::npos) << s.err;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_LT(seconds, 30) << "not within a step";
}

// A prepare stopped by SIGINT or SIGTERM while it tokenizes (its first shards written) says so,
// exits 128 + N and keeps nothing: a folder it made is removed; in one that was there, the shards
// it wrote are removed and the rest stays. A shard's temporary file that a killed prepare left
// there (its process gone) is removed by the next prepare.
TEST(Interrupt, APrepareStopsAndKeepsNothing) {
  TempDir dir;
  const std::string args = "--threads 1 prepare --format text --shard-tokens 20000 --tokenizer " + tiny_tokenizer(dir) +
                           " --input " + dir.write("corpus.txt", synthetic_corpus(60000)) + " --out ";  // 20 MB
  const std::string own = dir.file("own");
  Stopped s = signal_when_exists(dir, args + own, own + "/train-00000.h5", SIGINT);
  ASSERT_TRUE(WIFEXITED(s.status)) << s.err;
  EXPECT_EQ(WEXITSTATUS(s.status), 128 + SIGINT) << s.err;
  EXPECT_NE(s.err.find("prepare: interrupted by SIGINT at "), std::string::npos) << s.err;
  EXPECT_NE(s.err.find(" documents read); nothing kept: " + own + " removed\n"), std::string::npos) << s.err;
  EXPECT_FALSE(fs::exists(own));
  const std::string there = dir.file("there");
  fs::create_directories(there);
  dir.write("there/notes.txt", "mine\n");
  const pid_t gone = fork();  // a pid no process has now
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  dir.write("there/train-00000.h5.tmp-" + std::to_string(gone), "a killed prepare's");
  s = signal_when_exists(dir, args + there, there + "/train-00001.h5", SIGTERM);
  ASSERT_TRUE(WIFEXITED(s.status)) << s.err;
  EXPECT_EQ(WEXITSTATUS(s.status), 128 + SIGTERM) << s.err;
  EXPECT_NE(s.err.find(there + ": removed 1 unfinished shard file left by a killed prepare"), std::string::npos)
      << s.err;
  EXPECT_NE(s.err.find("; nothing kept: the shards it wrote removed from " + there + "\n"), std::string::npos) << s.err;
  std::set<std::string> left;  // (.lock: one prepare at a time writes the folder; it stays, as a run directory's)
  for (const auto& e : fs::directory_iterator(there)) left.insert(e.path().filename().string());
  EXPECT_EQ(left, (std::set<std::string>{".lock", "notes.txt"}));
}

// A fine-tuned model's predictions and evaluation stop within a batch on SIGINT or SIGTERM: each
// says so, writes nothing and exits 128 + N; eval removes the folder it made for its results.
TEST(Interrupt, PredictionsAndEvaluationOfAFineTunedModelStopWithinABatch) {
  FinetuneFixture ft;
  make_finetune_fixture(ft, true);  // a pretrained tiny ALBERT, its tokenizer, a tiny SST-2
  const std::string tuned = ft.dir.file("ft");
  ASSERT_EQ(run_thx("--threads 1 finetune --config " + ft.config + " --set finetune.steps=2 --set "
                    "finetune.eval_every=2 --set checkpoint.every=2 --out " + tuned).code, 0);
  std::string lines, rows = "sentence\tlabel\n";
  for (int i = 0; i < 100000; ++i) lines += "a good film\n", rows += "a good film\t1\n";
  const std::string in = ft.dir.write("in.txt", lines), out = ft.dir.file("out.txt"), err = ft.dir.file("stderr.txt");
  Stopped s = signal_when(ft.dir, "--log-level debug --threads 1 predict --config " + ft.config + " --task sst2 "
                                  "--checkpoint " + tuned + " --input " + in + " --out " + out,
                          [&] { return slurp(err).find("predicting 100000 lines") != std::string::npos; }, SIGINT);
  ASSERT_TRUE(WIFEXITED(s.status)) << s.err;
  EXPECT_EQ(WEXITSTATUS(s.status), 128 + SIGINT) << s.err;
  EXPECT_NE(s.err.find("predict: interrupted by SIGINT while predicting 100000 lines of " + in + "; nothing written\n"),
            std::string::npos) << s.err;
  EXPECT_FALSE(fs::exists(out));
  fs::create_directories(ft.dir.file("big/glue/SST-2"));
  ft.dir.write("big/glue/SST-2/train.tsv", rows), ft.dir.write("big/glue/SST-2/dev.tsv", rows);
  const std::string results = ft.dir.file("results");
  s = signal_when(ft.dir, "--log-level debug --threads 1 eval --config " + ft.config + " --set finetune.data=" +
                              ft.dir.file("big") + " --set finetune.eval_examples=0 --checkpoint " + tuned +
                              " --out " + results,  // (every dev row: the recipe evaluates 32)
                  [&] { return slurp(err).find("evaluating sst2 into") != std::string::npos; }, SIGTERM);
  ASSERT_TRUE(WIFEXITED(s.status)) << s.err;
  EXPECT_EQ(WEXITSTATUS(s.status), 128 + SIGTERM) << s.err;
  EXPECT_NE(s.err.find("eval: interrupted by SIGTERM while evaluating sst2; nothing written\n"), std::string::npos)
      << s.err;
  EXPECT_FALSE(fs::exists(results));
}

// A run killed outright (SIGKILL: no handler runs, nothing is flushed at exit) leaves a log that
// holds every line the console showed up to the kill, from its first: each line is on disk as
// it is logged, and the lines logged before the run's folder was written open it.
TEST(Interrupt, AKilledRunsLogHoldsEveryLineTheConsoleShowed) {
  TempDir dir;
  PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 100000);
  c.train.log_every = 1, c.eval.every = 100000, c.checkpoint.every = 5;
  finish(c);
  const std::string run = dir.file("run");
  const Stopped s = signal_when_exists(dir, "--threads 1 pretrain --config " + dir.write("run.yaml", c.yaml) +
                                                " --run-dir " + run,
                                       checkpoint_path(run + "/checkpoints", 5), SIGKILL);
  ASSERT_TRUE(WIFSIGNALED(s.status)) << s.err;
  const std::string log = slurp(run + "/train.log");
  int lines = 0;
  std::istringstream err(s.err);
  for (std::string line; std::getline(err, line);) {
    if (line.rfind("[", 0) != 0) continue;  // (the resolved config's lines: in the log, unprefixed)
    const std::string text = line.substr(line.find("] [") + 1);  // "[train] step 5/100000 ..." without the time
    EXPECT_NE(log.find(text + "\n"), std::string::npos) << "not in train.log: " << text << "\n" << log;
    ++lines;
  }
  EXPECT_GE(lines, 7) << s.err;  // the model's line, the memory bound's, steps 1-5
  EXPECT_NE(log.find("] [train] memory: at least "), std::string::npos) << log;
}

// A run killed after its checkpoint at step 5 had recorded steps 6-10 (here: its last
// checkpoint removed); resumed, metrics.jsonl holds each step once, as the resumed run wrote it.
TEST(Interrupt, AResumedRunRecordsEachStepOnce) {
  TempDir dir;
  PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 10);
  c.train.log_every = 1, c.checkpoint.every = 5, c.checkpoint.keep = 2, c.eval.every = 5;
  finish(c);
  const std::string run = dir.file("run");
  const std::string args = "--threads 1 pretrain --config " + dir.write("run.yaml", c.yaml) + " --run-dir " + run;
  ASSERT_EQ(run_thx(args).code, 0);
  fs::remove(checkpoint_path(run + "/checkpoints", 10));
  const RunResult resumed = run_thx(args + " --resume");
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  std::map<std::pair<int64_t, bool>, int> seen;  // (step, evaluation?) -> records
  std::istringstream in(slurp(run + "/metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    ++seen[{j["step"].get<int64_t>(), j.contains("ln_ppl")}];
  }
  for (int64_t step = 1; step <= 10; ++step) EXPECT_EQ((seen[{step, false}]), 1) << "step " << step;
  EXPECT_EQ((seen[{5, true}]), 1);
  EXPECT_EQ((seen[{10, true}]), 1);
  EXPECT_EQ(seen.size(), 12u);
}

TEST(Interrupt, ASweepExitsWithItsSignalAndItsRunsStopAtACheckpoint) {
  TempDir dir;
  const std::string prepared = prepared_corpus(dir);
  dir.write("base.yaml", "model: {d_model: 32, d_ff: 64, encoder_layers: 1, decoder_layers: 1}\n"
                         "attention: {variant: talking_heads, h: 4}\n"
                         "data: {prepared: " + prepared + ", inputs_length: 32, targets_length: 8}\n"
                         "train: {steps: 100000, batch_size: 8, log_every: 5}\n"
                         "checkpoint: {every: 5, keep: 2}\n"
                         "eval: {every: 100000, examples: 8, batch_size: 8}\n");
  const std::string sweep = dir.write("sweep.yaml", "sweep: tiny\ntable: table1\nbase: base.yaml\n"
                                                    "grid: {attention.h: [2, 4]}\n");
  const std::string out = dir.file("out");
  const Stopped s = signal_when_exists(dir, "--threads 1 sweep --config " + sweep + " --out " + out,
                                       checkpoint_path(out + "/h2/checkpoints", 5), SIGINT);
  ASSERT_TRUE(WIFEXITED(s.status)) << s.err;
  EXPECT_EQ(WEXITSTATUS(s.status), 130) << s.err;
  EXPECT_NE(s.err.find("sweep tiny: stopped by SIGINT; run the same command to resume"), std::string::npos) << s.err;
  EXPECT_EQ(s.err.find("failed"), std::string::npos) << "a run stopped at a checkpoint is not a failure:\n" << s.err;
  EXPECT_NE(slurp(out + "/h2/stdout.log").find("interrupted by SIGTERM at step"), std::string::npos);
  EXPECT_FALSE(fs::exists(out + "/results.jsonl") && !slurp(out + "/results.jsonl").empty());
}

// The last line of `err`, its newline included.
std::string last_line(const std::string& err) {
  const size_t at = err.size() < 2 ? std::string::npos : err.rfind('\n', err.size() - 2);
  return at == std::string::npos ? err : err.substr(at + 1);
}

bool ended_by(const Stopped& s, int sig) { return WIFSIGNALED(s.status) && WTERMSIG(s.status) == sig; }

// Before a command's work can stop cleanly (at a step's checkpoint, a document, a batch), SIGINT
// and SIGTERM end it at once, as by default (its parent sees the signal), with one line that says
// so and, where it knows, what is on disk (common/signals.h): a pretraining that waits for its run
// folder's lock has recorded nothing there, and the same command then runs it; a command still
// reading its config says only that it stopped; SentencePiece's training, one library call that
// cannot check for a signal, has not written its model.
TEST(Interrupt, ASignalBeforeTheWorkCanStopEndsItAtOnceWithOneLine) {
  TempDir dir;
  const std::string err = dir.file("stderr.txt");
  const auto said = [&](const std::string& what) {
    return [&, what] { return slurp(err).find(what) != std::string::npos; };
  };
  const std::string cfg = dir.write("run.yaml", tiny_pretrain(prepared_corpus(dir), 2).yaml), run = dir.file("run");
  fs::create_directories(run);
  const int lock = try_lock_directory(run);  // another process training there
  ASSERT_GE(lock, 0);
  const std::string args = "--threads 1 pretrain --config " + cfg + " --run-dir " + run;
  Stopped s = signal_when(dir, args, said("is training here; waiting up to a minute"), SIGTERM);
  ::close(lock);
  EXPECT_TRUE(ended_by(s, SIGTERM)) << s.status << "\n" << s.err;
  EXPECT_EQ(last_line(s.err), "thx pretrain: stopped by SIGTERM while it set up, before it recorded anything in " +
                                  run + "; the same command runs it again\n");
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(run)) left.insert(e.path().filename().string());
  EXPECT_EQ(left, (std::set<std::string>{".lock"}));
  const RunResult again = run_thx(args);
  EXPECT_EQ(again.code, 0) << again.out;

  const std::string pipe = dir.file("config.yaml");  // a config that never comes (as from `<(...)`)
  ASSERT_EQ(::mkfifo(pipe.c_str(), 0644), 0);
  int writer = -1;  // opens once thx opened the pipe to read it, past the command line's parsing
  s = signal_when(dir, "pretrain --config " + pipe + " --run-dir " + dir.file("never"),
                  [&] { return (writer = ::open(pipe.c_str(), O_WRONLY | O_NONBLOCK)) >= 0; }, SIGINT);
  if (writer >= 0) ::close(writer);
  EXPECT_TRUE(ended_by(s, SIGINT)) << s.status << "\n" << s.err;
  EXPECT_EQ(s.err, "thx pretrain: stopped by SIGINT\n");
  EXPECT_FALSE(fs::exists(dir.file("never")));

  std::string corpus;  // random words: SentencePiece takes seconds over 2,000 pieces of them
  std::mt19937 rng(7);
  for (int line = 0; line < 5000; ++line, corpus += '\n')
    for (int w = 0; w < 8; ++w, corpus += ' ')
      for (int c = 3 + int(rng() % 6); c > 0; --c) corpus += char('a' + rng() % 26);
  const std::string prefix = dir.file("spm");
  s = signal_when(dir, "--threads 1 spm-train --format text --pieces 2000 --input " + dir.write("words.txt", corpus) +
                           " --out " + prefix, said("sampled)"), SIGTERM);
  EXPECT_TRUE(ended_by(s, SIGTERM)) << s.status << "\n" << s.err;
  EXPECT_EQ(last_line(s.err), "thx spm-train: stopped by SIGTERM while it read the corpus or trained SentencePiece, "
                              "before it wrote " + prefix + ".model\n");
  EXPECT_FALSE(fs::exists(prefix + ".model"));
  EXPECT_FALSE(fs::exists(prefix + ".vocab"));
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
