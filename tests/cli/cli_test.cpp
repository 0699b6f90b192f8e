// The thx binary: help, config merging and dumping, the probe file, and bad input (one line,
// exit code 2, nothing written). The help test runs the binary; the others run its command line
// in forked copies of a process with LibTorch loaded (cli/forked_cli.h), which
// Cli.AForkedCopyAnswersAsTheBinaryDoes holds to the binary's codes and output.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/fs.h"
#include "common/h5.h"
#include "data/data_fixtures.h"
#include "cli/forked_cli.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

TEST(Cli, HelpDescribesEverySubcommandAndOption) {
  RunResult r = run_thx("--help");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* s : {"costs", "attention-probe", "bench", "--threads", "--log-level"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
  r = run_thx("attention-probe --help");
  EXPECT_EQ(r.code, 0);
  for (const char* s : {"--config", "--set", "--dump-config", "--d-model", "--n", "--m",
                        "--batch", "--seed", "--mask", "--bias", "--out"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
  r = run_thx("bench attention --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--heads"), std::string::npos);
}

// --threads, --log-level and --device go before or after the subcommand (as git's and
// torchrun's do), and every subcommand's --help lists them.
TEST(Cli, GlobalOptionsOnEitherSideOfTheSubcommand) {
  const RunResult before = fork_thx("--threads 1 --log-level warn costs --format csv");
  ASSERT_EQ(before.code, 0) << before.out;
  const RunResult after = fork_thx("costs --format csv --threads 1 --log-level warn --device cpu");
  ASSERT_EQ(after.code, 0) << after.out;
  EXPECT_EQ(after.out, before.out);
  const RunResult nested = fork_thx("bench attention --threads 1 --help");
  EXPECT_EQ(nested.code, 0) << nested.out;
  for (const char* sub : {"costs --help", "pretrain --help", "bench attention --help", "finetune --help"}) {
    const RunResult r = fork_thx(sub);
    EXPECT_NE(r.out.find("Global options, before or after the subcommand: --threads N, --log-level LEVEL, "
                         "--device DEVICE"), std::string::npos) << sub << "\n" << r.out;
  }
  EXPECT_EQ(fork_thx("costs --threads -1").code, 2);
}

// Threads are counted from the cores this process may run on (here: taskset's one), not the
// machine's; more than those is a warning, more than thx's bound (kMaxThreads) one line, exit 2.
TEST(Cli, ThreadsAreTheCoresThisProcessMayRunOn) {
  const std::string bench = " bench attention --heads 2 --d-model 16 --n 8 --batch 1 --reps 1 --no-reference";
  RunResult r = run_command("taskset -c 0 " + std::string(THX_BINARY) + bench + " 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("batch 1, 1 thread, median of 1"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("more than the"), std::string::npos) << r.out;
  r = run_command("taskset -c 0 " + std::string(THX_BINARY) + " --threads 2 --log-level warn" + bench + " 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("] --threads 2: more than the 1 core this process may run on; past them threads only wait "
                       "on each other\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("; 2 threads"), std::string::npos) << r.out;  // (the report's CPU line)
  r = fork_thx("--threads 1025 costs");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out.rfind("thx: error: --threads: 1025 is invalid: at most 1024 (this process may run on ", 0), 0u)
      << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
}

// OMP_NUM_THREADS, set, is the default of --threads, as PyTorch takes it (the first of a comma
// list); not under torchrun, which sets it to 1 for several ranks itself (there the node's cores
// are shared among them); --threads wins. A value that is no count is one line, exit 2.
TEST(Cli, OmpNumThreadsIsTheDefaultOfThreadsOutsideTorchrun) {
  const std::string bench = " bench attention --heads 2 --d-model 16 --n 8 --batch 1 --reps 1 --no-reference 2>&1";
  const std::string thx = std::string(THX_BINARY);
  RunResult r = run_command("taskset -c 0,1 env OMP_NUM_THREADS=1 " + thx + bench);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("batch 1, 1 thread, median of 1"), std::string::npos) << r.out;
  r = run_command("taskset -c 0 env OMP_NUM_THREADS=3,1 " + thx + " --log-level warn" + bench);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("; 3 threads; "), std::string::npos) << r.out;  // (the report's CPU line)
  EXPECT_NE(r.out.find("] OMP_NUM_THREADS=3,1: more than the 1 core this process may run on"), std::string::npos)
      << r.out;
  r = run_command("taskset -c 0 env OMP_NUM_THREADS=1 " + thx + " --threads 2" + bench);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("; 2 threads; "), std::string::npos) << r.out;
  r = run_command("taskset -c 0 env OMP_NUM_THREADS=3 LOCAL_WORLD_SIZE=1 " + thx + bench);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("batch 1, 1 thread, median of 1"), std::string::npos) << r.out;
  for (const char* bad : {"two", "0", "1025", "-1", ",2"}) {  // (refused before thx's second start too)
    r = run_command(std::string("env -u OMP_WAIT_POLICY OMP_NUM_THREADS=") + bad + " " + thx + bench);
    EXPECT_EQ(r.code, 2) << bad << ": " << r.out;
    // (libgomp's own line about it comes first where it too takes the value for none)
    const std::string line = std::string("thx: error: OMP_NUM_THREADS=") + bad +
                             ": not a count of threads from 1 to 1024 (the default of --threads outside torchrun); "
                             "unset it or set --threads\n";
    EXPECT_EQ(r.out.find("thx: "), r.out.size() - line.size()) << r.out;
    EXPECT_EQ(r.out.substr(r.out.size() - std::min(r.out.size(), line.size())), line) << r.out;
    EXPECT_LE(std::count(r.out.begin(), r.out.end(), '\n'), 3) << "libgomp's line once, and thx's: " << r.out;
  }
}

TEST(Cli, UnknownSubcommandOrFlagExitsTwo) {
  EXPECT_EQ(fork_thx("frobnicate").code, 2);
  EXPECT_EQ(fork_thx("costs --colour").code, 2);
  EXPECT_EQ(fork_thx("").code, 2);
  RunResult r = fork_thx("costs --format html");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("allowed: markdown, csv, latex"), std::string::npos) << r.out;
}

TEST(Cli, BadBenchFlagsExitTwo) {
  RunResult r = fork_thx("bench attention --heads 7");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "thx: error: --heads: 7 does not divide --d-model 768\n");
  EXPECT_EQ(fork_thx("bench").code, 2);
  EXPECT_EQ(fork_thx("bench attention --reps 0").code, 2);
  r = fork_thx("bench attention --m 0");  // the memory's positions, like --n's
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("--m"), std::string::npos) << r.out;
  r = fork_thx("bench attention --d-model 64");  // a default head count that does not divide it says so
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "thx: error: --heads: 6 (of the default --heads 6 12 24 48) does not divide --d-model 64\n");
  r = fork_thx("bench attention --precision fp16");  // the one line, before the benchmark's banner
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "thx: error: --precision fp16: allowed: fp32, bf16, both\n");
  r = fork_thx("bench attention --tiled --batched");  // one talking-heads path at a time
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "thx: error: --batched excludes --tiled (thx --help lists the options)\n");
  // The fused kernels' forced launch: tiles RxC[,RxC], threads a multiple of 32, atomics by name,
  // not with another path.
  for (const char* bad : {"--th-tiles 16x", "--th-tiles 16x8,8", "--th-tiles 0x8", "--th-tiles 16x8,8x8x"}) {
    r = fork_thx(std::string("bench attention ") + bad);
    EXPECT_TRUE(refused(r, "thx: error: --th-tiles", "allowed: RxC or RxC,RxC")) << bad;
  }
  EXPECT_TRUE(refused(fork_thx("bench attention --th-threads 100"), "thx: error: --th-threads 100",
                      "a multiple of 32 from 32 to 256"));
  EXPECT_TRUE(
      refused(fork_thx("bench attention --th-tiles 16x8 --tiled"), "thx: error: --tiled excludes --th-tiles", ""));
  EXPECT_TRUE(refused(fork_thx("bench attention --th-atomics sorted"), "thx: error: --th-atomics sorted",
                      "allowed: in-order, staggered, vector"));
  EXPECT_TRUE(refused(fork_thx("--th-path flashy bench attention"), "thx: error: --th-path", "fused"));
  // A --th-path the user names is the choice --tiled and --batched make: no contradiction, no fused-only option under
  // another path. Without it (tiled by default) --batched and the fused kernels' options choose their own path.
  EXPECT_TRUE(refused(fork_thx("--th-path tiled bench attention --th-atomics in-order"), "thx: error: --th-atomics",
                      "which --th-path tiled leaves"));
  EXPECT_TRUE(refused(fork_thx("bench attention --fma --th-path batched"), "thx: error: --fma", "--th-path batched"));
  for (const std::string path : {"tiled-aten", "folded", "gemm-aten"})  // ATen's operations alone
    EXPECT_TRUE(refused(fork_thx("--th-path " + path + " bench attention --fma"),
                        "thx: error: --fma is an option of thx's kernels", "--th-path " + path + " leaves"));
  for (const std::string path : {"gemm", "tiled-gemm"})  // thx's softmax kernel alone
    EXPECT_TRUE(refused(fork_thx("--th-path " + path + " bench attention --fma"),
                        "thx: error: --fma makes the row kernels' mixings fp32 FMAs",
                        "--th-path " + path + " mixes by cuBLAS products"));
  EXPECT_TRUE(refused(fork_thx("--th-path flash bench attention --fma"), "thx: error: --fma runs thx's kernels as fp32 "
                                                                        "FMAs; --th-path flash runs on tensor cores",
                      ""));
  EXPECT_TRUE(refused(fork_thx("--th-path tiled --device cuda bench attention --fma"), "thx: error: --device cuda",
                      ""));  // --fma is the row kernels' option too: past the path check, refused for the device
  EXPECT_TRUE(refused(fork_thx("bench attention --th-unpadded --th-path tiled"), "thx: error: --th-unpadded",
                      "--th-path tiled"));
  // The paths that are not the tiled path's forms exclude --tiled, in either benchmark.
  for (const std::string path : {"batched", "fused", "folded", "gemm", "gemm-aten"})
    for (const char* bench : {" bench attention --tiled", " bench train --tiled"})
      EXPECT_TRUE(refused(fork_thx("--th-path " + path + bench), "thx: error: --th-path " + path + " excludes --tiled",
                          ""));
  for (const char* own : {"attention --batched", "attention --tiled", "attention --fma",
                          "attention --th-atomics in-order", "attention --th-unpadded", "train --tiled"})  // on the CPU
    EXPECT_TRUE(refused(fork_thx(std::string("--device cpu bench ") + own), "thx: error: --",
                        "chooses or tunes a GPU path of talking-heads; on the CPU it runs on thx's CPU cores"))
        << own;
  // The tiled path's forms take --tiled: past the path check, refused for the device.
  for (const std::string path : {"tiled-aten", "tiled-fma", "tiled-gemm", "flash"})
    for (const char* bench : {" bench attention --tiled", " bench train --tiled"})
      EXPECT_TRUE(refused(fork_thx("--th-path " + path + " --device cuda" + bench), "thx: error: --device cuda", ""));
  for (const char* own : {"--batched", "--th-atomics in-order", "--th-unpadded"})  // past the path check: refused for the device
    EXPECT_TRUE(refused(fork_thx(std::string("--device cuda bench attention ") + own), "thx: error: --device cuda", ""))
        << own;
  // bench train's base rows: an h that does not divide 768, a peer row that is not a base row,
  // --base-only without --base; one line each, before any model is built.
  r = fork_thx("bench train --base --base-heads 7");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "thx: error: --base-heads: 7 does not divide the base d_model 768\n");
  r = fork_thx("bench train --base --base-heads 12 --peer-heads 48");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "thx: error: --peer-heads: 48 is not among the base rows' h (12)\n");
  // The default --peer-heads (12,48) is not refused where the base rows leave one out (the GPU
  // session's profile-aten-parts, --base-heads 12): the check passes, and the next one speaks.
  r = fork_thx("bench train --base --base-only --base-heads 12 --aten bogus");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out.rfind("thx: error: --aten: bogus is not a part", 0), 0u) << r.out;
  r = fork_thx("bench train --base-only");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
  // --trace: Kineto's timeline of a profiled step on a GPU; without --profile, or on the CPU, one
  // line, and its folder is not made.
  TempDir dir;
  const std::string traces = (dir.path / "traces").string();
  r = fork_thx("bench train --trace " + traces);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("--profile"), std::string::npos) << r.out;
  r = fork_thx("--device cpu bench train --profile --trace " + traces);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "thx: error: --trace writes Kineto's timeline of a GPU's step (thx --device cuda); on the CPU, "
                   "--profile's tables are LibTorch's CPU profiler's\n");
  EXPECT_FALSE(std::filesystem::exists(traces));
  // A --peer that is not a script: one line before any row (the peer runs after each, so it
  // was found only then, a warning a row, the rows' time spent).
  const std::string about = " (the PyTorch peer, a Python script such as ../shared/bench/peer_t5.py)\n";
  r = fork_thx("bench train --peer " + traces);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "thx: error: --peer " + traces + ": no such file" + about);
  r = fork_thx("bench train --peer " + dir.path.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "thx: error: --peer " + dir.path.string() + ": not a file" + about);
  // --peer-heap says how the peer's heap is kept: only beside a peer, only glibc or kept.
  r = fork_thx("bench train --peer-heap kept");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "thx: error: --peer-heap requires --peer (thx --help lists the options)\n");
  r = fork_thx("bench train --peer " + traces + " --peer-heap mmap");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "thx: error: --peer-heap: mmap not in {glibc,kept} (thx --help lists the options)\n");
  // --aten adafactor with another optimizer, or rms_norm in a model without it, would report a
  // comparison that did not happen; an unknown part is named.
  r = fork_thx("bench train --aten loss,adafactor --set optimizer.name=lamb");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "thx: error: --aten adafactor: the config's optimizer.name is lamb; the part concerns adafactor\n");
  r = fork_thx("bench train --aten rms_norm --config " + std::string(THX_SOURCE_DIR) + "/configs/albert/mini.yaml");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "thx: error: --aten rms_norm: model.type albert has layer norms (ATen's); rms_norm is T5's\n");
  r = fork_thx("bench train --aten loss,softmax");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "thx: error: --aten: softmax is not a part; allowed: adafactor, loss, rms_norm\n");
  r = fork_thx("bench train --aten '' --dump-config");  // (before the config is dumped, and named)
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "thx: error: --aten: an empty name is not a part; allowed: adafactor, loss, rms_norm\n");
}

TEST(Cli, ConfigsMergeInOrderSetWinsAndDumpRoundTrips) {
  TempDir dir;
  const auto a = dir.write("a.yaml", "attention:\n  variant: talking_heads\n  h: 5\n");
  const auto b = dir.write("b.yaml", "attention:\n  h: 12\n  dynamic: [X_l]\n");
  RunResult r = fork_thx("attention-probe --config " + a + " --config " + b +
                        " --set attention.h_v=4 --set attention.d_v=16 --dump-config");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("variant: talking_heads"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("h: 12"), std::string::npos) << r.out;  // b.yaml wins over a.yaml
  EXPECT_NE(r.out.find("h_v: 4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dynamic: [X_l]"), std::string::npos) << r.out;
  // The dump is itself a config that resolves to the same dump.
  const auto dumped = dir.write("dumped.yaml", r.out);
  RunResult again = fork_thx("attention-probe --config " + dumped + " --dump-config");
  EXPECT_EQ(again.code, 0);
  EXPECT_EQ(again.out, r.out);
}

TEST(Cli, ProbeWritesTheDocumentedLayout) {
  TempDir dir;
  const std::string args =
      "--log-level warn attention-probe --set attention.variant=talking_heads "
      "--set attention.h_k=2 --set attention.h=3 --set attention.h_v=4 --set attention.d_k=5 "
      "--set attention.d_v=6 --d-model 16 --n 4 --m 4 --batch 2 --mask causal --bias --out ";
  const std::string out = dir.file("probe.h5");
  RunResult r = fork_thx(args + out);
  ASSERT_EQ(r.code, 0) << r.out;
  H5Reader h(out);
  EXPECT_EQ(h.read("/inputs/X").sizes().vec(), (std::vector<int64_t>{2, 4, 16}));
  EXPECT_EQ(h.read("/inputs/bias").sizes().vec(), (std::vector<int64_t>{1, 3, 4, 4}));
  EXPECT_EQ(h.read("/inputs/mask").scalar_type(), torch::kUInt8);
  EXPECT_EQ(h.read("/inputs/mask").sizes().vec(), (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(h.read("/params/P_q").sizes().vec(), (std::vector<int64_t>{16, 5, 2}));
  EXPECT_EQ(h.read("/params/P_o").sizes().vec(), (std::vector<int64_t>{16, 6, 4}));
  EXPECT_EQ(h.read("/grads/P_l").sizes().vec(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h.read("/grads/P_w").sizes().vec(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(h.read("/outputs/Y").sizes().vec(), (std::vector<int64_t>{2, 4, 16}));
  EXPECT_NE(h.attr("/", "config").find("variant: talking_heads"), std::string::npos);
  // The same seed gives the same file contents.
  const std::string out2 = dir.file("probe2.h5");
  ASSERT_EQ(fork_thx(args + out2).code, 0);
  H5Reader h2(out2);
  EXPECT_TRUE(torch::equal(h.read("/outputs/Y"), h2.read("/outputs/Y")));
  EXPECT_TRUE(torch::equal(h.read("/grads/P_q"), h2.read("/grads/P_q")));
}

// Bad attention settings: each gives exactly one line naming the key and what is allowed,
// exit code 2, and no output file.
struct BadCase {
  std::string args;    // --set ... flags, or a YAML body for a --config file
  std::string expect;  // a substring of the one error line
  bool yaml = false;
};

TEST(Cli, BadAttentionSettingsGiveOneLineAndExitTwo) {
  const std::vector<BadCase> cases = {
      {"--set attention.h_k=0 --set attention.variant=talking_heads",
       "attention.h_k: 0 is invalid: must be an integer >= 1"},
      {"--set attention.h_k=-3 --set attention.variant=talking_heads",
       "attention.h_k: -3 is invalid"},
      {"--set attention.variant=talking_head",
       "attention.variant: 'talking_head' is not a variant; allowed: multi_head, talking_heads, "
       "project_logits, project_weights, general_bilinear"},
      {"--set attention.h=8 --set attention.dynamic=[X_l]",
       "attention.dynamic: dynamic projections need attention.variant talking_heads, not "
       "multi_head"},
      {"--set attention.variant=general_bilinear --set attention.d_k=64",
       "attention.d_k: is not a setting of general_bilinear"},
      {"--set attention.variant=general_bilinear --set attention.h_v=4",
       "attention.h_v: is not a setting of general_bilinear"},
      // Blamed on the --set that made the default fail, not on the unset d_k.
      {"--set attention.h=5", "--set attention.h=5: attention.h: 5 heads leave attention.d_k unset with no whole "
                              "default (d_model / h_k = 64 / 5); set attention.d_k explicitly, or a head count that divides 64"},
      {"--set attention.h=128",
       "attention.h: 128 heads leave attention.d_k unset with no whole default (d_model / h_k = 64 / 128)"},
      {"--set attention.variant=talking_heads --set attention.h_v=3 --set attention.d_k=8",
       "--set attention.h_v=3: attention.h_v: 3 heads leave attention.d_v unset with no whole default (d_model / h_v = 64 / 3)"},
      {"--set attention.h=twelve", "attention.h: expected an integer, got 'twelve'"},
      {"--set attention.h=12.5", "attention.h: expected an integer, got '12.5'"},
      {"--set attention.dropout=-0.1", "attention.dropout: -0.1 is invalid: must be in [0, 1)"},
      {"--set attention.dropout=1", "attention.dropout: 1 is invalid: must be in [0, 1)"},
      {"--set attention.h_k=4 --set attention.h=8",
       "attention.h_k: 4 conflicts with attention.h = 8: multi_head has one head count"},
      {"--set attention.variant=project_logits --set attention.h_v=4 --set attention.h=8",
       "attention.h_v: 4 conflicts with attention.h = 8: project_logits has no P_w"},
      {"--set attention.variant=project_weights --set attention.h_k=4 --set attention.h=8",
       "attention.h_k: 4 conflicts with attention.h = 8: project_weights has no P_l"},
      {"--set attention.h=8 --set attention.variant=talking_heads --set attention.dynamic=[X_l,X_q]",
       "attention.dynamic[1]: 'X_q' is not a dynamic projection; allowed: X_l, M_l, X_w, M_w"},
      {"--set attention.h=8 --set attention.variant=talking_heads --set attention.dynamic=[M_w,M_w]",
       "attention.dynamic[1]: 'M_w' is listed twice"},
      {"--set attention.variant=talking_heads --set attention.dynamic=X_l",
       "attention.dynamic: expected a list such as [a, b], got 'X_l'"},
      {"--set attention.heads=8", "attention.heads: unknown key; allowed keys under attention: "
                                  "variant, h_k, h, h_v, d_k, d_v, dynamic, dropout"},
      {"--set attention.d_k=1000000 --set attention.d_v=1 --set attention.h=100000",
       "attention.d_k: makes a parameter of"},
      {"--set attention.variant=[a]", "attention.variant: expected a string, got a list"},
      {"--set attention=7", "attention: expected a mapping of keys, got '7'"},
      {"--set atention.h=8", "atention: unknown key; allowed top-level keys: model, attention, "
                             "attention_encoder_self"},
      {"attention:\n  variant: multi_head\n  h: 8\n  d_v: 0\n",
       "bad.yaml:4: attention.d_v: 0 is invalid", true},
      {"attention:\n  h: [1, 2\n", "invalid YAML", true},
      {"--set attention.h=", "attention.h: expected an integer, got null"},
  };
  TempDir dir;
  const std::string out = dir.file("never.h5");
  for (const auto& c : cases) {
    std::string args = c.args;
    if (c.yaml) args = "--config " + dir.write("bad.yaml", c.args);
    RunResult r = fork_thx("attention-probe --d-model 64 " + args + " --out " + out);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_EQ(lines(r.out), 1) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << args << "\n" << r.out;
    EXPECT_FALSE(std::filesystem::exists(out)) << args;
  }
  EXPECT_GE(cases.size(), 15u);
}

// Each `base + args` exits 2 with one line containing `want`, and `run_dir` is never created.
void expect_one_line_errors(const std::string& base,
                            const std::vector<std::pair<std::string, std::string>>& cases,
                            const std::string& run_dir) {
  for (const auto& [args, want] : cases) {
    RunResult r = fork_thx(base + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_EQ(lines(r.out), 1) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(want), std::string::npos) << args << "\n" << r.out;
    EXPECT_FALSE(std::filesystem::exists(run_dir)) << args;
  }
}

TEST(Cli, BadPretrainConfigsExitTwoWithOneLine) {
  TempDir dir;
  const std::string base = "pretrain --config " + std::string(THX_SOURCE_DIR) +
                           "/configs/t5/mini.yaml --run-dir " + dir.file("run") + " ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--set data.prepared=" + dir.file("nope"), dir.file("nope") + ": no manifest.json; run `thx prepare` first"},
      {"--set train.steps=0", "train.steps: 0 is invalid: must be >= 1"},
      {"--set optimizer.name=sgd", "optimizer.name: 'sgd' is not allowed; allowed: adafactor, adamw, lamb"},
      {"--set optimizer.factor_attention=rows", "allowed: mesh_tf, combined, per_head"},
      {"--set train.grad_accum=3", "train.grad_accum: 3 does not divide train.batch_size 16"},
      {"--set attention_encoder_self.variant=talking_heads --set attention_encoder_self.h_k=0",
       "attention_encoder_self.h_k: 0 is invalid"},
      {"--set attention_decoder_self.dynamic=[X_l]",
       "attention_decoder_self.dynamic: dynamic projections need attention_decoder_self.variant "
       "talking_heads, not multi_head"},
      {"--set model.relative_buckets=7", "model.relative_buckets: 7 is invalid"},
      {"--set model.init_std=0.5", "model.init_std: is for bert and albert; t5 initializes as Mesh TensorFlow does"},
      {"--set optimizer.mixing_lr_multiplier=-0.5",
       "optimizer.mixing_lr_multiplier: -0.5 is invalid: must be in [0, 1000] (0 freezes P_l and P_w"},
      {"--set optimizer.mixing_lr_multiplier=3",
       "optimizer.mixing_lr_multiplier: 3 has no effect: attention.variant multi_head has no P_l or P_w"},
      {"--set data.noise_density=1.5", "data.noise_density: 1.5 is invalid"},
      // (the rate itself named, not end_learning_rate, which is judged against it)
      {"--set optimizer.learning_rate=-1", "optimizer.learning_rate: -1 is invalid: must be > 0"},
      {"--set data.prepared=", "data.prepared: expected a string, got null"},
      {"--set 'data.prepared=\"\"'", "data.prepared: is required"},
  };
  expect_one_line_errors(base, cases, dir.file("run"));
  // The per-layer blocks inherit from attention key by key.
  RunResult d = fork_thx("pretrain --config " + std::string(THX_SOURCE_DIR) + "/configs/t5/mini.yaml "
                        "--set attention.h=4 --set attention_encoder_self.variant=talking_heads --dump-config");
  ASSERT_EQ(d.code, 0) << d.out;
  EXPECT_NE(d.out.find("attention_encoder_self:\n  variant: talking_heads"), std::string::npos) << d.out;
  const auto enc = d.out.find("attention_encoder_self:");
  EXPECT_NE(d.out.find("  h: 4", enc), std::string::npos) << d.out;
}

TEST(Cli, BadAlbertAndBertConfigsExitTwoWithOneLine) {
  TempDir dir;
  const std::string base = "pretrain --config " + std::string(THX_SOURCE_DIR) +
                           "/configs/albert/mini.yaml --run-dir " + dir.file("run") + " ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--set model.hidden_groups=0", "model.hidden_groups: 0 is invalid: must be in [1, encoder_layers = 3]"},
      {"--set model.hidden_groups=2", "model.hidden_groups: 2 does not divide encoder_layers 3"},
      {"--set model.type=gpt", "model.type: 'gpt' is not allowed; allowed: t5, bert, albert"},
      {"--set model.positions=rotary", "model.positions: 'rotary' is not allowed; allowed: absolute, relative"},
      {"--set model.init_std=-0.1", "model.init_std: -0.1 is invalid: must be in (0, 10]"},
      {"--set data.masked_lm_prob=1.5", "data.masked_lm_prob: 1.5 is invalid: must be in (0, 1)"},
      {"--set data.masked_lm_prob=0", "data.masked_lm_prob: 0 is invalid: must be in (0, 1)"},
      {"--set data.max_predictions_per_seq=0", "data.max_predictions_per_seq: 0 is invalid: must be >= 1"},
      {"--set data.max_ngram=0", "data.max_ngram: 0 is invalid: must be >= 1"},
      {"--set data.sentence_task=both", "data.sentence_task: 'both' is not allowed; allowed: sop, nsp, none"},
      {"--set data.inputs_length=256", "data.inputs_length: 256 is more than model.max_positions 128"},
      {"--set data.inputs_length=6", "--set data.inputs_length=6: data.inputs_length: 6 is too short for model.type "
                                     "albert's [CLS] A [SEP] B [SEP]: at least 8"},
      {"--set attention_decoder_self.h=4", "attention_decoder_self: model.type albert has no decoder"},
      {"--set optimizer.schedule=cosine", "allowed: inverse_sqrt, constant, polynomial"},
      {"--set optimizer.power=0", "optimizer.power: 0 is invalid: must be > 0"},
      {"--set optimizer.mixing_lr_multiplier=2", "optimizer.mixing_lr_multiplier: 2 has no effect: attention.variant multi_head"},
      {"--set optimizer.mixing_lr_multiplier=1e9", "optimizer.mixing_lr_multiplier: 1000000000 is invalid: must be in [0, 1000]"},
      {"--set attention.variant=talking_heads --set attention.h=7", "--set attention.h=7: attention.h: 7 heads leave attention.d_k unset with no whole default (d_model / h_k = 192 / 7)"},
  };
  expect_one_line_errors(base, cases, dir.file("run"));
  // Every shipped BERT/ALBERT config resolves.
  for (const char* f : {"albert/base.yaml", "albert/paper.yaml", "albert/mini.yaml", "bert/base.yaml", "bert/mini.yaml"}) {
    RunResult d = fork_thx("pretrain --config " + std::string(THX_SOURCE_DIR) + "/configs/" + f + " --dump-config");
    EXPECT_EQ(d.code, 0) << f << "\n" << d.out;
  }
}

TEST(Cli, BadProbeFlagsExitTwoAndWriteNothing) {
  TempDir dir;
  const std::string out = dir.file("p.h5");
  for (const std::string args : {"--mask diagonal", "--mask causal --n 3 --m 4", "--n 0",
                                 "--d-model -5", "--batch x"}) {
    RunResult r = fork_thx("attention-probe " + args + " --out " + out);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_FALSE(std::filesystem::exists(out)) << args;
  }
  RunResult r = fork_thx("attention-probe --config " + dir.file("nope.yaml") + " --out " + out);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "thx: error: " + dir.file("nope.yaml") + ": cannot read config file: No such file or directory\n");
  // An output directory that does not exist: one line, exit 2.
  r = fork_thx("--log-level warn attention-probe --out " + dir.file("no/such/dir/p.h5"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
}

TEST(Cli, BadTokenizerAndPrepareInputExitTwoAndKeepFiles) {
  TempDir dir;
  const std::string small = dir.write("small.txt", "hello world\n");
  const std::string bad = dir.write("bad.jsonl", "{\"text\": 5}\n{oops\n");
  const std::string model = dir.write("old.model", "an existing model\n");
  const std::string junk = dir.write("junk.model", "junk\n");
  TempDir tok;  // a real tokenizer, for prepare's checks after tokenizing
  const std::string spm = tiny_tokenizer(tok);
  const std::string blank = dir.write("blank.txt", "\n\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"spm-train --input " + dir.file("nope.txt") + " --out " + dir.file("m"),
       dir.file("nope.txt") + ": no such file, directory or matching file"},
      {"spm-train --input " + small + " --format xml --out " + dir.file("m"),
       "--format: 'xml' is not a corpus format; allowed: auto, text, text_files, wikiextractor, jsonl, books"},
      {"spm-train --input " + bad + " --out " + dir.file("m"),
       bad + ": no usable document (2 malformed lines); first problem: " + bad + ":1: no \"text\" string"},
      {"spm-train --input " + small + " --out " + dir.file("no/dir/m"),
       "directory " + dir.file("no/dir") + " does not exist"},
      {"spm-train --input " + small + " --out " + small + "/m", "directory " + small + " is not a directory"},
      {"spm-train --input " + small + " --out " + dir.path.string() + "/",
       dir.path.string() + "/: is a directory; --out names a file"},
      {"spm-train --input " + small + " --out " + dir.file("old"),
       dir.file("old.model") + " exists; remove it or choose another prefix"},
      {"spm-train --input " + small + " --out " + dir.file("m") + " --pieces 8000",
       "spm-train: SentencePiece could not train: Vocabulary size too high (8000). Please set it to a value <= "},
      {"spm-train --input " + small + " --out " + dir.file("m") + " --convention bert",
       "--convention 'bert' is invalid: t5 | albert"},
      {"prepare --input books:" + dir.file("nope*.txt") + " --tokenizer " + junk + " --out " + dir.file("p"),
       dir.file("nope*.txt") + ": no such file, directory or matching file"},
      {"prepare --input " + small + " --tokenizer " + dir.file("nope.model") + " --out " + dir.file("p"),
       dir.file("nope.model") + ": no such SentencePiece model file"},
      {"prepare --input " + small + " --tokenizer " + junk + " --out " + dir.file("p"),
       junk + ": not a SentencePiece model"},
      {"prepare --input " + small + " --tokenizer " + junk + " --out " + dir.file("p") +
           " --heldout-fraction 1.5", "--heldout-fraction 1.5: must be in [0, 1)"},
      {"prepare --input " + small + " --tokenizer " + spm + " --out " + dir.file("p") + " --heldout-fraction 0.01",
       "prepare: no document went to the held-out split (--heldout-fraction 0.01 of 1 document), which thx "
       "pretrain evaluates on; raise --heldout-fraction, or hold out files with --heldout"},
      {"prepare --input " + small + " --tokenizer " + spm + " --out " + dir.file("p") + " --heldout " + blank,
       blank + ": no usable document (0 malformed lines)"},
  };
  for (const auto& [args, want] : cases) {
    RunResult r = fork_thx("--log-level warn " + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_EQ(lines(r.out), 1) << args << "\n" << r.out;
    EXPECT_EQ(r.out.rfind("thx: error: ", 0), 0u) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(want), std::string::npos) << args << "\n" << r.out;
  }
  EXPECT_EQ(read_file(model), "an existing model\n");
  for (const char* f : {"m.model", "m.vocab", "p"}) EXPECT_FALSE(std::filesystem::exists(dir.file(f))) << f;
  for (const auto& e : std::filesystem::directory_iterator(dir.path))  // no temporary model left
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
  // --heldout-fraction 0 is a choice: the shards are written, and the missing split warned of.
  const RunResult none = fork_thx("prepare --input " + small + " --tokenizer " + spm + " --out " + dir.file("q") +
                                 " --heldout-fraction 0");
  EXPECT_EQ(none.code, 0) << none.out;
  EXPECT_NE(none.out.find(dir.file("q") + ": --heldout-fraction 0 and no --heldout files: no held-out split, "
                          "which thx pretrain needs"), std::string::npos) << none.out;
}

TEST(Cli, TableAndClaimsCommands) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"table --layout table14 --sweep " + dir.path.string(),
       "--layout table14: unknown layout; allowed: table1 ... table13, costs"},
      {"table --layout table1", "table: --sweep DIR is required for --layout table1"},
      {"table --layout table1 --sweep " + dir.file("none"),
       dir.file("none") + "/results.jsonl: no results file; run `thx sweep` first"},
      {"claims", "claims: give exactly one of --sweep DIR and --published"},
      {"claims --published --sweep " + dir.path.string(), "claims: give exactly one of --sweep DIR and --published"},
  };
  for (const auto& [args, want] : cases) {
    RunResult r = fork_thx(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_EQ(r.out, "thx: error: " + want + "\n") << args;
  }
  dir.write("results.jsonl", "{\"name\": \"a\"}\nnot json\n");
  RunResult r = fork_thx("table --layout table1 --sweep " + dir.path.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out.rfind("thx: error: " + dir.file("results.jsonl") + ":2: not a JSON object", 0), 0u) << r.out;
  dir.write("results.jsonl", "{\"name\": \"a\", \"ln_ppl\": \"low\"}\n");
  r = fork_thx("table --layout table1 --sweep " + dir.path.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "thx: error: " + dir.file("results.jsonl") + ":1: 'ln_ppl' must be a number\n");
  dir.write("results.jsonl", "{\"name\": \"" + std::string(300, 'x') + "\"}\n");  // fuzzing: past NAME_MAX
  r = fork_thx("table --layout table1 --sweep " + dir.path.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "thx: error: " + dir.file("results.jsonl") + ":1: 'name' must be a run directory's name (1 to 255 "
                   "bytes, no '/')\n");
  // Read as integers: a d_model of 1.28e51 (fuzzing, results) is no int64.
  dir.write("results.jsonl", "{\"name\": \"a\", \"d_model\": 1.28e51, \"attention\": {\"encoder_self\": {\"variant\": "
                             "\"multi_head\", \"h_k\": 4, \"h\": 4, \"h_v\": 4, \"d_k\": 8, \"d_v\": 8}}}\n");
  r = fork_thx("table --layout table1 --sweep " + dir.path.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "thx: error: " + dir.file("results.jsonl") + ":1: 'd_model' must be an integer\n");
  dir.write("results.jsonl", "{\"name\": \"a\", \"attention\": {\"encoder_self\": {\"h\": 4}}}\n");
  r = fork_thx("claims --sweep " + dir.path.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
  // Without --layout, the table the sweep names (its copy of the sweep file).
  dir.write("results.jsonl", "{\"name\": \"a\"}\n");
  dir.write("sweep.yaml", "sweep: x\ntable: table3\nbase: b.yaml\n");
  r = fork_thx("table --sweep " + dir.path.string());
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Table 3 of the paper"), std::string::npos) << r.out;
  // A run that fills no row is named, in the table's notes and as a warning.
  const std::string left = "Left out: 1 of 1 runs match no row of Table 3 (a row is matched by model, variant, heads "
                           "and h·d_k / d_model, in every layer type for T5): a (no attention block).";
  EXPECT_NE(r.out.find("[table] " + left), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n" + left + "\n"), std::string::npos) << r.out;
  EXPECT_EQ(fork_thx("table").code, 2);
  r = fork_thx("table --layout costs --format csv");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("2359296"), std::string::npos);
  r = fork_thx("claims --published");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("| **fails** |"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("| **fails** |"), r.out.rfind("| **fails** |")) << "only the broader reading fails";
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test

namespace thx::test {
namespace {
namespace THX_FILE_ID {

// The forked copies that the CLI tests run thx's command line in (cli/forked_cli.h) answer as the
// binary does: the same exit code and the same output, byte for byte, for a refusal at parsing,
// one in a command's own checks, help, a quoted word, and a benchmark that computes (the copy's
// OpenMP is fresh, though this process has used its own first); a line with a redirection runs
// the binary.
TEST(Cli, AForkedCopyAnswersAsTheBinaryDoes) {
  EXPECT_GT(torch::mm(torch::ones({256, 256}), torch::ones({256, 256})).sum().item<double>(), 0);  // (OpenMP used)
  for (const char* args : {"bench attention --heads 7", "frobnicate", "costs --format html", "score --help",
                           "'bench' attention --heads \"7\"", "--threads 1 costs --format csv",
                           "bench attention --heads 7 > /dev/null"}) {
    const RunResult copy = fork_thx(args), binary = run_thx(args);
    EXPECT_EQ(copy.code, binary.code) << args;
    EXPECT_EQ(copy.out, binary.out) << args;
  }
  const std::string bench =
      "--threads 2 bench attention --heads 2 --d-model 16 --n 8 --batch 1 --reps 1 --no-reference";
  const RunResult copy = fork_thx(bench), binary = run_thx(bench);
  EXPECT_EQ(copy.code, 0) << copy.out;
  EXPECT_EQ(binary.code, 0) << binary.out;
  EXPECT_EQ(lines(copy.out), lines(binary.out)) << copy.out << "\n" << binary.out;
  // A copy that started its own binary (a sweep's runs are /proc/self/exe) would start this test
  // binary with thx's words: refused, not taken for no test option and every test run.
  const RunResult self =
      run_command(std::filesystem::read_symlink("/proc/self/exe").string() + " pretrain --config x 2>&1");
  EXPECT_EQ(self.code, 2) << self.out;
  EXPECT_EQ(self.out.rfind("thx_tests: 'pretrain' is a thx command, not a test option", 0), 0u) << self.out;
}

// thx re-executes itself with the thread pools' environment (common/runtime.h) only for a command
// that computes, once parsed (cli/command.h): help, --version, a bad command line and the commands
// that only read and format load LibTorch once. The dynamic loader, asked by LD_DEBUG=files, says
// each time it hands control to thx.
TEST(Cli, OnlyACommandThatComputesStartsTwice) {
  auto starts = [](const std::string& args) {
    const RunResult r = run_command("env -u OMP_WAIT_POLICY -u OPENBLAS_THREAD_TIMEOUT LD_DEBUG=files " +
                                    std::string(THX_BINARY) + " " + args +
                                    " 2>&1 >/dev/null | grep -c 'transferring control: .*/thx$'");
    return std::atoi(r.out.c_str());
  };
  for (const char* light : {"--version", "--help", "bench attention --help", "frobnicate", "costs --format csv",
                            "table --sweep /nonexistent", "claims --sweep /nonexistent"})
    EXPECT_EQ(starts(light), 1) << light;
  for (const char* computing : {"pretrain --config /nonexistent.yaml", "--threads 1 bench attention --heads 7"})
    EXPECT_EQ(starts(computing), 2) << computing;
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
