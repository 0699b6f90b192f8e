// thx sweep end to end on three tiny runs: results, skipping finished runs, and a sweep
// killed (SIGKILL) three times and restarted at once each time giving exactly the results and
// final parameters of one never stopped; a second sweep on a busy directory names the first.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/fs.h"
#include "common/error.h"
#include "common/host_memory.h"
#include "experiments/results_table.h"
#include "experiments/sweep.h"
#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {
namespace fs = std::filesystem;
using json = nlohmann::json;

// Three runs of `steps` steps each, checkpointed every steps / 4.
std::string tiny_sweep(const TempDir& dir, int steps = 40) {
  const std::string prepared = prepared_corpus(dir);
  dir.write("base.yaml",
            "model: {d_model: 32, d_ff: 64, encoder_layers: 1, decoder_layers: 1}\n"
            "attention: {variant: talking_heads, h: 4}\n"
            "data: {prepared: " + prepared + ", inputs_length: 32, targets_length: 8}\n"
            "train: {steps: " + std::to_string(steps) + ", batch_size: 8, log_every: 5, deterministic: " +
            (deterministic_here() ? "true" : "false") + "}\n"
            "checkpoint: {every: " + std::to_string(steps / 4) + ", keep: 2}\n"
            "eval: {every: " + std::to_string(steps / 2) + ", examples: 8, batch_size: 8}\n");
  return dir.write("sweep.yaml", "sweep: tiny\ntable: table1\nbase: base.yaml\n"
                                 "grid: {attention.h: [2, 4, 8]}\n");
}

std::map<std::string, double> ln_ppl(const std::string& out) {
  std::map<std::string, double> m;
  for (const auto& r : read_results(out)) m[r["name"]] = r["ln_ppl"];
  return m;
}

TEST(SweepRun, KilledMidwayAndRestartedEqualsUninterrupted) {
  TempDir dir;
  // 3 x 120 steps: each kill below lands after a new checkpoint (30 steps) and up to 150 ms
  // more (~30 steps of 5 ms on a fast CPU), so three kills cannot outrun the sweep (with 3 x 40
  // steps and 300 ms they did, on an EPYC twice as fast as the machine the test was written on).
  const std::string sweep = tiny_sweep(dir, 120);
  const std::string straight = dir.file("straight"), killed = dir.file("killed");
  RunResult r = run_thx("--threads 1 sweep --config " + sweep + " --out " + straight);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto want = ln_ppl(straight);
  ASSERT_EQ(want.size(), 3u);
  for (const auto& run : read_results(straight)) {
    EXPECT_EQ(run["steps"], 120);
    EXPECT_EQ(run["sweep"], "tiny");
    for (const char* k : {"best_ln_ppl", "step_time_s", "tokens_per_s", "params_per_att_layer",
                          "multiplies_per_att_layer", "wall_s", "config_hash", "attention"})
      EXPECT_TRUE(run.contains(k)) << k;
  }
  // A second invocation finds everything finished and runs nothing.
  r = run_thx("--threads 1 sweep --config " + sweep + " --out " + straight);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("3 finished, 0 to run"), std::string::npos) << r.out;

  // The same sweep, killed with SIGKILL three times at different moments and restarted at once
  // each time (its runs, told by the kernel, checkpoint and stop while the next sweep starts).
  setenv("OMP_WAIT_POLICY", "PASSIVE", 0), setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);
  auto checkpoints = [&] {  // progress: the steps of every run's newest checkpoint, summed
    size_t n = 0;
    for (const char* run : {"h2", "h4", "h8"}) {
      const auto all = list_checkpoints((fs::path(killed) / run / "checkpoints").string());
      if (!all.empty()) n += std::stoul(fs::path(all.back()).stem().string().substr(5));  // step-NNNNNNNN
    }
    return n;
  };
  std::mt19937 pick(7);
  size_t seen = 0;
  for (int kill_no = 0; kill_no < 3; ++kill_no) {
    const pid_t pid = fork();
    if (pid == 0) {
      const int null = ::open("/dev/null", O_WRONLY);
      dup2(null, 1), dup2(null, 2);
      execl(THX_BINARY, THX_BINARY, "--threads", "1", "sweep", "--config", sweep.c_str(), "--out",
            killed.c_str(), nullptr);
      _exit(127);
    }
    // Killed once a run has checkpointed further than at the last kill, 0-150 ms later.
    bool progressed = false;
    for (int i = 0; i < 2400 && !progressed; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      progressed = checkpoints() > seen;
    }
    ASSERT_TRUE(progressed) << "kill " << kill_no << ": no new checkpoint";
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 150)(pick)));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFSIGNALED(status));
    seen = checkpoints();
  }
  // It was stopped before the end (when every kill came before a run finished, as under the
  // sanitizers, there is no results file yet).
  const bool any_finished = fs::exists(fs::path(killed) / "results.jsonl");
  EXPECT_LT(any_finished ? read_results(killed).size() : 0u, 3u);
  r = run_thx("--threads 1 sweep --config " + sweep + " --out " + killed);
  ASSERT_EQ(r.code, 0) << r.out;
  ASSERT_EQ(read_results(killed).size(), 3u);

  // The plots of the finished sweep: loss curves, and Figure 1 from a talking-heads checkpoint.
  auto png = [](const std::string& path) {
    const std::string bytes = fs::exists(path) ? read_file(path) : "";
    return bytes.size() > 1000 && bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0;
  };
  const std::string scripts = std::string(THX_SOURCE_DIR) + "/scripts/";
  const std::string curves = dir.file("curves.png"), fig1 = dir.file("fig1.png");
  const RunResult all = run_command("/usr/bin/python3 " + scripts + "plot_curves.py " + straight + " --out " +
                                    curves + " 2>&1");
  EXPECT_EQ(all.code, 0) << all.out;
  EXPECT_NE(all.out.find("(3 runs)"), std::string::npos) << all.out;
  EXPECT_TRUE(png(curves));
  // Two sweeps overlaid (as the fp32 and bf16 runs of one grid): one line style per sweep.
  const RunResult both = run_command("/usr/bin/python3 " + scripts + "plot_curves.py " + straight + " " + killed +
                                     " --out " + dir.file("both.png") + " 2>&1");
  EXPECT_EQ(both.code, 0) << both.out;
  EXPECT_NE(both.out.find("(6 runs, 2 sweeps)"), std::string::npos) << both.out;
  EXPECT_TRUE(png(dir.file("both.png")));
  // --runs keeps part of a sweep; a bad pattern, or one that keeps nothing, is exit 2.
  auto curves_part = [&](const std::string& pattern) {
    return run_command("/usr/bin/python3 " + scripts + "plot_curves.py " + straight + " --runs '" + pattern +
                       "' --out " + dir.file("part.png") + " 2>&1");
  };
  const RunResult part = curves_part("^h4$");
  EXPECT_EQ(part.code, 0) << part.out;
  EXPECT_NE(part.out.find("(1 runs)"), std::string::npos) << part.out;  // of h2, h4, h8
  EXPECT_TRUE(png(dir.file("part.png")));
  // One run's own directory, as one `thx pretrain --run-dir` writes it.
  const RunResult one = run_command("/usr/bin/python3 " + scripts + "plot_curves.py " + straight + "/h4 --out " +
                                    dir.file("one.png") + " 2>&1");
  EXPECT_EQ(one.code, 0) << one.out;
  EXPECT_NE(one.out.find("(1 runs)"), std::string::npos) << one.out;
  EXPECT_TRUE(png(dir.file("one.png")));
  EXPECT_TRUE(refused(curves_part("("), "plot_curves.py: ", "--runs (: not a regular expression"));
  EXPECT_TRUE(refused(curves_part("^nothing$"), "plot_curves.py: ", "no run matching --runs ^nothing$"));
  const std::string ckpt = straight + "/h4/checkpoints/step-00000120.h5";
  EXPECT_EQ(std::system(("/usr/bin/python3 " + scripts + "plot_figure1.py " + ckpt + " --out " + fig1 +
                         " --summary " + dir.file("fig1.txt") + " > /dev/null").c_str()), 0);
  EXPECT_TRUE(png(fig1));
  const std::string summary = read_file(dir.file("fig1.txt"));
  EXPECT_NE(summary.find("encoder/layers/0/self_attention\n  P_l 4x4: det "), std::string::npos) << summary;
  EXPECT_NE(summary.find("P_l x P_w 4x4: det "), std::string::npos) << summary;
  // A checkpoint without talking-heads layers is one clear error.
  EXPECT_NE(std::system(("/usr/bin/python3 " + scripts + "plot_figure1.py " + dir.file("nope.h5") +
                         " --out " + dir.file("x.png") + " 2> /dev/null").c_str()), 0);

  // The killed sweep's results and every run's final parameters equal the uninterrupted one's, bit for bit.
  EXPECT_EQ(ln_ppl(killed), want);
  for (const char* run : {"h2", "h4", "h8"})
    EXPECT_TRUE(same_params(checkpoint_path(killed + "/" + run + "/checkpoints", 120),
                            checkpoint_path(straight + "/" + run + "/checkpoints", 120), 0))
        << run;
}

TEST(SweepRun, ASecondSweepOnABusyDirectoryNamesTheFirst) {
  TempDir dir;
  const std::string sweep = tiny_sweep(dir), out = dir.file("out");
  setenv("OMP_WAIT_POLICY", "PASSIVE", 0), setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    dup2(null, 1), dup2(null, 2);
    execl(THX_BINARY, THX_BINARY, "--threads", "1", "sweep", "--config", sweep.c_str(), "--out", out.c_str(), nullptr);
    _exit(127);
  }
  const std::string started = out + "/h2/checkpoints";
  for (int i = 0; i < 1200 && !fs::exists(started); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const RunResult r = run_thx("--threads 1 sweep --config " + sweep + " --out " + out);
  kill(pid, SIGTERM);  // its runs checkpoint and stop
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "thx: error: " + out + ": another thx sweep (pid " + std::to_string(pid) +
                       ") is running on this directory; wait for it or stop it (its runs checkpoint and stop on "
                       "SIGTERM)\n");
}

// Runs whose prepared data is not there: the dry run names the directory, the runs and the
// command that makes it; the sweep itself starts nothing and says the same in one line.
TEST(SweepRun, MissingDataIsNamedWithTheCommandThatPreparesIt) {
  TempDir dir;
  const std::string data = dir.file("data/prepared/enwiki");
  dir.write("base.yaml", "model: {d_model: 32, d_ff: 64, encoder_layers: 1, decoder_layers: 1}\n"
                         "attention: {variant: talking_heads, h: 4}\n"
                         "data: {prepared: " + data + ", inputs_length: 32, targets_length: 8}\n"
                         "train: {steps: 10, batch_size: 8}\n");
  const std::string sweep = dir.write("sweep.yaml", "sweep: tiny\nbase: base.yaml\ngrid: {attention.h: [2, 4, 8]}\n");
  const std::string line = data + ": data.prepared of 3 of the 3 runs (h2 and 2 more) does not exist (no "
                           "manifest.json); prepare it with: scripts/prepare_data.sh enwiki";
  RunResult r = run_thx("sweep --dry-run --config " + sweep + " --out " + dir.file("out"));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\nMissing data: " + line + "; those runs cannot start until it is there.\n"),
            std::string::npos) << r.out;
  r = run_thx("sweep --config " + sweep + " --out " + dir.file("out"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "thx: error: " + sweep + ": " + line + "\n");
  EXPECT_FALSE(fs::exists(dir.file("out")));
}

TEST(SweepRun, AFailedRunIsReportedAndTheOthersFinish) {
  TempDir dir;
  tiny_sweep(dir);
  // h = 3 does not divide d_model 32: that run fails when its config is read, which the
  // sweep does before it starts anything, naming the run and the sweep file's line that set h.
  const std::string bad = dir.write("bad.yaml", "sweep: bad\nbase: base.yaml\ngrid: {attention.h: [2, 3]}\n");
  RunResult r = run_thx("--threads 1 sweep --config " + bad + " --out " + dir.file("bad"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("thx: error: run 'h3': " + bad + ":3: attention.h: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("attention.h: 3 heads leave attention.d_k unset with no whole default (d_model / h_k = 32 / 3)"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir.file("bad")));
  // An unknown key on an axis: its sweep-file line and the keys allowed there.
  const std::string hh = dir.write("hh.yaml", "sweep: hh\nbase: base.yaml\ngrid: {attention.hh: [2]}\n");
  r = run_thx("sweep --dry-run --config " + hh);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "thx: error: run 'hh2': " + hh + ":3: attention.hh: unknown key; allowed keys under "
                   "attention: variant, h_k, h, h_v, d_k, d_v, dynamic, dropout\n");
  // What a run checks of its data once it has read it, the sweep checks before it starts any:
  // the vocabulary of a variant, with the sweep file's line.
  const std::string small = dir.write("small.yaml", "sweep: small\nbase: base.yaml\nvariants:\n"
                                                    "  - {name: v100, set: {model.vocab_size: 100}}\n");
  r = run_thx("--threads 1 sweep --config " + small + " --out " + dir.file("small"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("thx: error: run 'v100': " + small + ":4: model.vocab_size: 100 is smaller than the "
                       "vocabulary of data.prepared "), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir.file("small")));
  // A run that stops at its start (its memory bound past the machine's) names the line of its
  // own run.yaml and, the one to change, the sweep file's; the time left counts it no more.
  const std::string wide = dir.write("wide.yaml", "sweep: wide\nbase: base.yaml\nvariants:\n"
                                                  "  - {name: ff, set: {model.d_ff: 1000000000}}\n"
                                                  "  - {name: h2, set: {attention.h: 2}}\n  - {name: h4, set: {}}\n");
  r = run_thx("--threads 1 sweep --config " + wide + " --out " + dir.file("wide"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("ff failed (exit code 2): thx: error: " + dir.file("wide") + "/ff/run.yaml:"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(" (from " + wide + ":4): model.d_ff 1000000000: training needs at least "), std::string::npos)
      << r.out;
  const size_t eta = r.out.find("[1/3] finished h2: ");
  ASSERT_NE(eta, std::string::npos) << r.out;
  const std::string line = r.out.substr(eta, r.out.find('\n', eta) - eta);
  EXPECT_TRUE(std::regex_search(line, std::regex("\\| ETA [0-9]+s$"))) << line;  // (with ff's: 7 days)
  // A run that fails while training (its data deleted under it) does not stop the others.
  const std::string prepared2 = dir.file("prep2");
  fs::copy(dir.file("prep"), prepared2);
  const std::string mixed = dir.write(
      "mixed.yaml", "sweep: mixed\nbase: base.yaml\nvariants:\n"
                    "  - {name: broken, set: {data.prepared: " + prepared2 + "}}\n"
                    "  - {name: fine, set: {}}\n");
  const Sweep s = load_sweep(mixed);
  ASSERT_EQ(s.runs.size(), 2u);
  fs::remove(fs::path(prepared2) / "train-00000.h5");
  r = run_thx("--threads 1 sweep --config " + mixed + " --out " + dir.file("mixed"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("broken failed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 of 2 runs finished"), std::string::npos) << r.out;
  EXPECT_EQ(read_results(dir.file("mixed")).size(), 1u);
  // The sweep directory records who ran it and when (common/provenance.h), as each run's does.
  for (const std::string& d : {dir.file("mixed"), dir.file("mixed") + "/fine"}) {
    const nlohmann::json p = nlohmann::json::parse(read_file(d + "/provenance.json"));
    ASSERT_EQ(p["sessions"].size(), 1u) << d;
    EXPECT_NE(p["sessions"][0]["command"].get<std::string>().find(d.size() == dir.file("mixed").size() ? " sweep "
                                                                                                      : " pretrain "),
              std::string::npos) << p.dump(1);
    EXPECT_TRUE(p["sessions"][0].contains("ended")) << p.dump(1);
  }
  // Fine-tuning results added under a finished run reach results.jsonl with the next sweep.
  const fs::path ft = fs::path(dir.file("mixed")) / "fine" / "finetune" / "glue";
  fs::create_directories(ft);
  std::ofstream(ft / "sst2.json") << R"({"task": "sst2", "metrics": {"accuracy": 81.5}, "history": []})";
  std::ofstream(ft / "squad11_predictions.json") << R"({"q1": "x"})";  // not a result: ignored
  // A fine-tuning still running has a best-so-far, not a result: left out until it finishes.
  const std::string rte = R"({"task": "rte", "metrics": {"accuracy": 60}, "history": [], "finished": )";
  std::ofstream(ft / "rte.json") << rte << "false}";
  r = run_thx("--threads 1 sweep --config " + mixed + " --out " + dir.file("mixed"));
  const auto results = read_results(dir.file("mixed"));
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0]["downstream"], json({{"sst2", {{"accuracy", 81.5}}}})) << r.out;
  std::ofstream(ft / "rte.json") << rte << "true}";
  EXPECT_EQ(read_results(dir.file("mixed"))[0]["downstream"],
            json({{"rte", {{"accuracy", 60}}}, {"sst2", {{"accuracy", 81.5}}}}));
  // Runs out of memory beside each other (--jobs 2; thx's memory check told to keep more free
  // than the machine has): each line says the runs share the machine's memory; not with --jobs
  // 1, nor where the cause is THX_MEMORY_LIMIT_MB, each process's own cap.
  const std::string beside = "(it ran beside up to 1 other run of this sweep (--jobs 2), which share the machine's "
                             "memory: fewer at a time gives each more)";
  const std::string large = "model.d_model: 256, model.d_ff: 1024, train.batch_size: 64";  // blocks of 1 MiB and more
  const std::string two = dir.write("two.yaml", "sweep: two\nbase: base.yaml\nvariants:\n"
                                                "  - {name: h2, set: {attention.h: 2, " + large + "}}\n"
                                                "  - {name: h4, set: {attention.h: 4, " + large + "}}\n");
  const std::string run_two = std::string(THX_BINARY) + " --threads 2 sweep --config " + two + " --out ";
  r = run_command("THX_MEMORY_FLOOR_MB=99999999 " + run_two + dir.file("floor2") + " --jobs 2 2>&1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("failed: h2 (exit code 2): thx: error: out of memory: host memory: "), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(beside), std::string::npos) << r.out;
  r = run_command("THX_MEMORY_FLOOR_MB=99999999 " + run_two + dir.file("floor1") + " --jobs 1 2>&1");
  EXPECT_NE(r.out.find("out of memory"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("ran beside"), std::string::npos) << r.out;
  r = run_command("THX_MEMORY_LIMIT_MB=1 " + run_two + dir.file("limit2") + " --jobs 2 2>&1");
  EXPECT_NE(r.out.find("THX_MEMORY_LIMIT_MB=1"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("ran beside"), std::string::npos) << r.out;
}

// Runs whose memory bounds fit alone but not together: where no two fit (--memory-gb just above
// the largest), --jobs 2 runs one at a time with the cores of both; where only the two smallest
// fit together, the third waits for both to end (two at a time, the log says so). The dry run lists each
// run's bound and says what memory allows.
TEST(SweepRun, RunsWhoseMemoryDoesNotFitTogetherWaitForIt) {
  TempDir dir;
  const std::string sweep = tiny_sweep(dir, 20);
  const Sweep s = load_sweep(sweep);
  std::vector<double> bytes;  // h2, h4, h8: more heads, more memory
  for (const auto& run : s.runs) {
    ConfigTree t = sweep_run_tree(s, run);
    bytes.push_back(sweep_run_memory(resolve_pretrain_run(t), 1));
  }
  ASSERT_EQ(bytes.size(), 3u);
  ASSERT_LT(bytes[0], bytes[1]);
  ASSERT_LT(bytes[1], bytes[2]);
  const auto gb = [](double b) { return fmt::format(" --memory-gb {:.9f}", b / 1e9); };
  RunResult r = run_thx("--threads 2 sweep --dry-run --jobs 2 --config " + sweep + gb(bytes[2] * 1.01));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("| memory GB, at least |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(fmt::format(" | {:.3g} | ", bytes[0] / 1e9)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Memory: --jobs 2: at most 1 of these runs on the CPU fits in memory at once (the 2 "
                       "smallest need at least "), std::string::npos) << r.out;
  r = run_thx("--threads 2 sweep --dry-run --config " + sweep + " --memory-gb 0.000001");
  EXPECT_NE(r.out.find("Memory: 3 of the 3 runs to run on the CPU need alone more than --memory-gb's 1e-06 GB"),
            std::string::npos) << r.out;
  r = run_thx("--threads 2 sweep --dry-run --config " + sweep + gb((bytes[1] + bytes[2]) / 2));
  EXPECT_NE(r.out.find("Memory: 1 of the 3 runs to run on the CPU needs alone more than --memory-gb's "),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("it stops with one line that says what to change"), std::string::npos) << r.out;
  r = run_thx("--threads 2 sweep --dry-run --config " + sweep + " --memory-gb 0");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--memory-gb: 0 is invalid: must be > 0"), std::string::npos) << r.out;
  // No two fit: one at a time, with both threads.
  r = run_thx("--threads 2 sweep --jobs 2 --config " + sweep + " --out " + dir.file("one") + gb(bytes[2] * 1.01));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("3 to run; 1 at a time, 2 threads each"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("waits for memory"), std::string::npos) << r.out;
  // h2 and h4 fit together, h8 beside either does not: it waits for both.
  r = run_thx("--threads 2 sweep --jobs 3 --config " + sweep + " --out " + dir.file("two") +
              gb((bytes[0] + bytes[1] + bytes[0] + bytes[2]) / 2));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(read_results(dir.file("two")).size(), 3u);
  EXPECT_NE(r.out.find("--jobs 3: at most 2 of these runs on the CPU fit in memory at once"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("2 at a time, 1 thread each"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("h8 waits for memory: it needs at least "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" of the 1 run now running: "), std::string::npos) << r.out;  // h4, once h2 ended
  for (const auto& [before, after] : {std::pair{"started h4", "finished h2"}, {"finished h2", "started h8"},
                                      {"finished h4", "started h8"}})
    EXPECT_LT(r.out.find(before), r.out.find(after)) << before << " | " << after << "\n" << r.out;
}

// A run killed from outside (SIGKILL, as Linux's out-of-memory killer sends it) is named with
// the signal and where the next sweep resumes it, not its log's last line (the config it
// printed); the others finish, and the next sweep finishes it. (The out-of-memory killer's
// own clause: HostMemory.NamesTheOutOfMemoryKillerInAChildsEnd.)
TEST(SweepRun, ARunKilledBySigkillIsNamedAndResumes) {
  TempDir dir;
  const std::string sweep = tiny_sweep(dir, 120), out = dir.file("out"), log = dir.file("sweep.log");
  const int64_t oom_before = oom_kills();
  const pid_t sweeper = fork();
  if (sweeper == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1), dup2(fd, 2);
    execl(THX_BINARY, THX_BINARY, "--threads", "1", "sweep", "--config", sweep.c_str(), "--out", out.c_str(), nullptr);
    _exit(127);
  }
  // h2's process, once it has a checkpoint: the `thx pretrain` whose --run-dir is out/h2.
  const std::string h2 = (fs::path(out) / "h2").string(), wanted = std::string("--run-dir") + '\0' + h2 + '\0';
  pid_t run = 0;
  for (int i = 0; i < 2400 && run == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    if (list_checkpoints(h2 + "/checkpoints").empty()) continue;
    for (const auto& e : fs::directory_iterator("/proc")) {
      const std::string name = e.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream in(e.path() / "cmdline");
      const std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (cmdline.find(wanted) != std::string::npos) run = pid_t(std::stol(name));
    }
  }
  ASSERT_NE(run, 0) << "no checkpointed h2 run to kill";
  kill(run, SIGKILL);
  int status = 0;
  waitpid(sweeper, &status, 0);
  const std::string said = read_file(log);
  EXPECT_EQ(WEXITSTATUS(status), 1) << said;
  const std::string named = "h2 failed (SIGKILL";
  const size_t at = said.find(named);
  ASSERT_NE(at, std::string::npos) << said;
  const std::string line = said.substr(at, said.find('\n', at) - at);
  if (oom_kills() == oom_before)
    EXPECT_EQ(line.rfind("h2 failed (SIGKILL): the next `thx sweep` resumes it at step ", 0), 0u) << line;
  EXPECT_NE(said.find("2 of 3 runs finished"), std::string::npos) << said;
  const RunResult r = run_thx("--threads 1 sweep --config " + sweep + " --out " + out);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("2 finished, 1 to run"), std::string::npos) << r.out;
  EXPECT_EQ(read_results(out).size(), 3u);
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test

namespace thx::test {
namespace {
namespace THX_FILE_ID {

// What `thx sweep --dry-run --config <file> --out /nonexistent` prints, from run_sweep in this
// process: one thx process per shipped sweep file made this the suite's longest test (32 starts,
// 20 of its 45 s here). The command's own output is tests/experiments/sweep_test.cpp's to check.
std::string dry_run_output(const std::string& file) {
  SweepOptions o;
  o.out_dir = "/nonexistent", o.dry_run = true, o.threads = 1;
  testing::internal::CaptureStdout();
  try {
    run_sweep(load_sweep(file), o, resolve_pretrain_run);
  } catch (const std::exception& e) {
    const std::string printed = testing::internal::GetCapturedStdout();
    ADD_FAILURE() << file << ": " << e.what() << "\n" << printed;
    return "";
  }
  return testing::internal::GetCapturedStdout();
}

// Every shipped sweep resolves, each of its runs fills a row of its table, and together they
// fill every row the paper ran (all but the published baselines; the mini Table 1 by design
// only rows 1-8).
TEST(SweepRun, ShippedSweepsResolveAndFillEveryRowOfTheirTable) {
  const auto paper = load_paper_rows(default_tables_csv());
  int files = 0, own = 0;
  for (const char* dir : {"configs/paper", "configs/mini"})
    for (const auto& e : fs::directory_iterator(fs::path(THX_SOURCE_DIR) / dir)) {
      const Sweep s = [&] {
        try {
          return load_sweep(e.path().string());
        } catch (const InputError&) {
          return Sweep{};  // configs/mini/t5.yaml is a config, not a sweep
        }
      }();
      if (s.runs.empty()) continue;
      ++files;
      std::set<std::string> filled;
      int runs = 0;
      std::stringstream ss(dry_run_output(e.path().string()));
      for (std::string line; std::getline(ss, line);) {
        if (line.rfind("| ", 0) != 0 || line.rfind("| run ", 0) == 0) continue;
        std::vector<std::string> cells;
        std::stringstream ls(line.substr(2));
        for (std::string c; std::getline(ls, c, '|');) cells.push_back(c);
        ASSERT_GE(cells.size(), 4u) << line;
        const std::string fills = cells[3].substr(1, cells[3].size() - 2);
        if (s.table.empty()) {  // a sweep of its own (configs/mini/recall.yaml) fills no paper row
          EXPECT_EQ(fills, "-") << e.path() << ": " << line;
          ++runs;
          continue;
        }
        EXPECT_NE(fills, "none") << e.path() << ": " << line;
        std::stringstream fs_(fills);
        for (std::string row; std::getline(fs_, row, ',');) filled.insert(row.substr(row.find_first_not_of(' ')));
        ++runs;
      }
      EXPECT_EQ(runs, int(s.runs.size())) << e.path();
      if (s.table.empty()) {
        ++own;
        continue;
      }
      const int table = parse_layout(s.table);
      // Mini sweeps that fill part of their table by design: the mini Table 1 and Table 7 keep
      // rows 1-8 (Table 7 at d_model 192 cannot have 384 or 768 heads); the long mini Table 5
      // pair and the precision checks (bf16, and fp32 rerun beside it) are the 12-head rows (2
      // and 6); the seeded Table 5 adds the 48-head rows (4 and 8); the head-count trends
      // (issue 34) are Table 1's rows 1-8 and Table 5's 24-head pair (its 12 and 48 are the seeded
      // sweep's).
      const std::set<int> rows_1_8 = {1, 2, 3, 4, 5, 6, 7, 8}, pair_12 = {2, 6}, pairs_12_48 = {2, 4, 6, 8},
                          pair_24 = {3, 7};
      const std::map<std::string, const std::set<int>*> partial = {
          {"table1.yaml", &rows_1_8},           {"table7.yaml", &rows_1_8},
          {"table1-heads.yaml", &rows_1_8},     {"table5-relative-heads.yaml", &pair_24},
          {"table5-relative-long.yaml", &pair_12}, {"table5-relative-seeds.yaml", &pairs_12_48},
          {"table1-bf16.yaml", &pair_12},        {"table1-h12-fp32.yaml", &pair_12},
          {"table5-relative-seeds-bf16.yaml", &pair_12}, {"table5-relative-h12-fp32.yaml", &pair_12}};
      const auto part = std::string(dir) == "configs/mini" ? partial.find(e.path().filename().string()) : partial.end();
      for (const auto& p : paper)
        if (p.table == table && p.label.find("Raffel") == std::string::npos &&
            (part == partial.end() || part->second->count(p.row))) {
          EXPECT_TRUE(filled.count(std::to_string(p.row))) << e.path() << ": row " << p.row << " " << p.label;
        }
    }
  EXPECT_EQ(files, 32);
  EXPECT_EQ(own, 3);  // configs/mini/recall{,-32keys,-32keys-mixing-lr}.yaml
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
