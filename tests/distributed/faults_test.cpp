// A rank killed with SIGKILL after the first checkpoint: with torchrun --max_restarts the group
// restarts, --resume continues from the last checkpoint and the final parameters are bit for
// bit those of an uninterrupted run of the same world size, and TensorBoard shows each step once;
// without restarts the other rank stops at once with one line naming the dead rank. SIGTERM to
// the torchrun agent saves a checkpoint on all ranks, and --resume then ends bit for bit where
// the uninterrupted run does.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <thread>

#include "common/host_memory.h"
#include "distributed/dist_fixtures.h"
#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

namespace fs = std::filesystem;

// The pid of the thx process of rank `rank` training in `run_dir` (its command line names the
// directory, its environment the rank), or -1.
// rank -1: the torchrun agent launched for run_dir.
pid_t find_rank(const std::string& run_dir, int rank) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmd(e.path() / "cmdline"), env(e.path() / "environ");
    const std::string c((std::istreambuf_iterator<char>(cmd)), {}), v((std::istreambuf_iterator<char>(env)), {});
    if (c.find(run_dir) == std::string::npos) continue;
    const std::string program = c.substr(0, c.find('\0'));  // the agent: python3 /usr/bin/torchrun ...
    const bool agent = program.find("python") != std::string::npos && c.find("torchrun") != std::string::npos;
    if (rank < 0 && agent) return pid_t(std::stoi(name));
    if (rank < 0 || c.find("torchrun") != std::string::npos) continue;
    bool is_rank = false;
    for (size_t at = 0; at < v.size();) {
      const size_t end = v.find('\0', at);
      if (v.compare(at, end - at, "RANK=" + std::to_string(rank)) == 0) is_rank = true;
      at = end == std::string::npos ? v.size() : end + 1;
    }
    if (is_rank)
      return pid_t(std::stoi(name));
  }
  return -1;
}

// Whether process `pid` ignores SIGPIPE (the SigIgn mask of /proc/<pid>/status, bit SIGPIPE - 1).
bool ignores_sigpipe(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("SigIgn:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> (SIGPIPE - 1)) & 1;
  return false;
}

struct Faults : ::testing::Test {
  TempDir dir;
  std::string config;
  void SetUp() override {
    // Steps of some tens of milliseconds, so that the signal lands mid-run.
    PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 60);
    c.model.d_model = 64, c.model.d_ff = 256, c.model.encoder_layers = c.model.decoder_layers = 2;
    c.data.inputs_length = 64, c.data.targets_length = 16, c.train.batch_size = 16;
    c.checkpoint.keep = 20;
    finish(c);
    config = dir.write("run.yaml", c.yaml);
  }
  int timeout_s = 30;
  std::string args(const std::string& run) const {
    return fmt::format("pretrain --config {} --run-dir {} --resume --set distributed.timeout_s={}", config,
                       dir.file(run), timeout_s);
  }
  std::string final_ckpt(const std::string& run) const { return checkpoint_path(dir.file(run + "/checkpoints"), 60); }
  // Launch `run` under torchrun and send `sig` to rank `rank` (-1: the agent) once the step-5
  // checkpoint exists.
  RunResult run_and_kill(const std::string& run, int max_restarts, double* seconds_after_kill, int rank = 1,
                         int sig = SIGKILL) {
    auto job = std::async(std::launch::async, [&] {
      return run_torchrun(fmt::format("{} --max_restarts {}", two_ranks(), max_restarts), args(run));
    });
    const std::string first = checkpoint_path(dir.file(run + "/checkpoints"), 5);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    pid_t victim = -1;
    while (std::chrono::steady_clock::now() < deadline) {
      if (fs::exists(first) && (victim = find_rank(dir.file(run), rank)) > 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_GT(victim, 0) << "rank " << rank << " was not found after the first checkpoint";
    // The rank that lives on writes to the dead one's sockets: it must ignore SIGPIPE, or that
    // write kills it before it can say which rank stopped (dist.cpp's init).
    if (const pid_t other = find_rank(dir.file(run), rank == 0 ? 1 : 0); victim > 0 && other > 0)
      EXPECT_TRUE(ignores_sigpipe(other)) << "rank " << (rank == 0 ? 1 : 0);
    if (victim > 0) ::kill(victim, sig);
    const auto killed = std::chrono::steady_clock::now();
    RunResult r = job.get();
    *seconds_after_kill = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
    return r;
  }
};

TEST_F(Faults, KilledRankRestartsAndResumesBitForBit) {
  const RunResult plain = run_torchrun(two_ranks(), args("plain"));
  ASSERT_EQ(plain.code, 0) << plain.out;
  double after = 0;
  const RunResult r = run_and_kill("killed", 1, &after);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("rank 1 stopped"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("resumed from"), std::string::npos) << "the kill came after the run ended:\n" << r.out;
  EXPECT_TRUE(same_params(final_ckpt("killed"), final_ckpt("plain"), 0));
  // Rank 0's tb/, read as TensorBoard reads a folder (tests/scripts/tb_check.py), shows each step
  // once, as metrics.jsonl has it: the restarted group's rank 0 wrote a SessionLog START and the
  // history (training/tensorboard.h), which hide whatever the killed group wrote past step 5 (how
  // much depends on when the kill lands; the restart is counted either way, and without it the
  // check fails: seen failing with the restart left out of loop.cpp).
  if (std::system("/usr/bin/python3 -c 'import google.protobuf, crc32c, numpy' 2>/dev/null") != 0)
    GTEST_SKIP() << "/usr/bin/python3 lacks protobuf or crc32c (scripts/setup.sh installs them)";
  const RunResult tb = run_command(
      fmt::format("/usr/bin/python3 {}/tests/scripts/tb_check.py {} 2>&1", THX_SOURCE_DIR, dir.file("killed")));
  EXPECT_EQ(tb.code, 0) << tb.out;
  EXPECT_NE(tb.out.find("2 event file(s), 1 restart(s)"), std::string::npos) << tb.out;
}

TEST_F(Faults, KilledRankWithoutRestartsStopsTheOthersWithOneLine) {
  double after = 0;
  const int64_t oom_before = oom_kills();
  const RunResult r = run_and_kill("killed", 0, &after);
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(" failed: rank 1 stopped (no heartbeat"), std::string::npos)
      << r.out;
  if (oom_before >= 0 && oom_kills() == oom_before)  // (a SIGKILL from the test, not the out-of-memory killer)
    EXPECT_NE(r.out.find("not ended by this machine's out-of-memory killer (/proc/vmstat oom_kill unchanged)"),
              std::string::npos) << r.out;
  EXPECT_LT(after, 30.0) << "distributed.timeout_s is 30";
  EXPECT_FALSE(fs::exists(final_ckpt("killed")));
}

TEST_F(Faults, AHungRankIsNamedWhenTheTimeoutExpires) {
  // SIGSTOP: rank 1 is alive but silent (its heartbeat stops too). Rank 0's all-reduce gives up
  // after distributed.timeout_s = 5 and names it; the stopped rank is killed once rank 0 has
  // exited (torchrun would wait for it), or after 25 s.
  timeout_s = 5;
  std::atomic<bool> done{false};
  auto reaper = std::async(std::launch::async, [&] {
    bool seen = false;
    for (int i = 0; i < 250 && !done; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (find_rank(dir.file("hung"), 0) > 0) seen = true;
      else if (seen) break;
    }
    if (const pid_t p = find_rank(dir.file("hung"), 1); p > 0) ::kill(p, SIGKILL);
  });
  double after = 0;
  const RunResult r = run_and_kill("hung", 0, &after, 1, SIGSTOP);
  done = true;
  reaper.get();
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(" failed: rank 1 stopped (no heartbeat"), std::string::npos)
      << r.out;
}

TEST_F(Faults, SigtermToTheAgentCheckpointsEveryRankAndResumes) {
  const RunResult plain = run_torchrun(two_ranks(), args("plain"));
  ASSERT_EQ(plain.code, 0) << plain.out;
  double after = 0;
  const RunResult stopped = run_and_kill("stopped", 0, &after, -1, SIGTERM);
  EXPECT_NE(stopped.out.find("stopped by SIGTERM at step"), std::string::npos) << stopped.out;
  EXPECT_FALSE(fs::exists(final_ckpt("stopped"))) << "the signal came after the run ended";
  const auto saved = list_checkpoints(dir.file("stopped/checkpoints"));
  ASSERT_FALSE(saved.empty());
  EXPECT_EQ(load_checkpoint(saved.back()).world_size, 2);
  const RunResult resumed = run_torchrun(two_ranks(), args("stopped"));
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_TRUE(same_params(final_ckpt("stopped"), final_ckpt("plain"), 0));
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
