// What produced a run: `thx --version`, <run>/provenance.json (a session per invocation, with its
// end), the checkpoints' "provenance" attribute and the wall-clock time of each metrics.jsonl
// record, from the binary as a user runs it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/fs.h"
#include "common/h5.h"
#include "common/host_memory.h"
#include "common/provenance.h"
#include "common/runtime.h"
#include "training/checkpoint.h"
#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {
namespace fs = std::filesystem;
using json = nlohmann::json;

// The commit of the source tree, as git gives it ("unknown" without git or a checkout).
std::string source_commit() {
  const RunResult r = run_command("git -C " + std::string(THX_SOURCE_DIR) + " rev-parse --short=12 HEAD 2>/dev/null");
  return r.code == 0 && r.out.size() == 13 ? r.out.substr(0, 12) : "unknown";
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TEST(Provenance, VersionNamesTheCommitItWasBuiltFrom) {
  const RunResult r = run_thx("--version");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(std::regex_match(r.out, std::regex("thx \\d+\\.\\d+\\.\\d+ \\(commit ([0-9a-f]{12}|unknown)"
                                                 "(, built with uncommitted changes)?\\)\n")))
      << r.out;
  // Built from a clean tree, the commit is the source's; a dirty build (a developer's, before
  // committing what it was built from) names the commit it started from.
  if (r.out.find("uncommitted") == std::string::npos)
    EXPECT_NE(r.out.find("(commit " + source_commit()), std::string::npos) << r.out;
  EXPECT_NE(run_thx("pretrain --help").out.find("--version"), std::string::npos);
}

TEST(Provenance, EachSessionOfARunIsRecordedWithItsCheckpointsAndTimes) {
  TempDir dir;
  PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 4);
  c.train.log_every = 1, c.checkpoint.every = 2, c.checkpoint.keep = 3, c.eval.every = 4;
  finish(c);
  const std::string run = dir.file("run");
  const std::string args = "--threads 1 pretrain --config " + dir.write("run.yaml", c.yaml) + " --run-dir " + run;
  const double t0 = std::floor(now_s());
  ASSERT_EQ(run_thx(args).code, 0);
  fs::remove(checkpoint_path(run + "/checkpoints", 4));
  // (resumed with thx's loss and norm by ATen's composition: the session records it)
  ASSERT_EQ(run_command("THX_ATEN=loss,rms_norm " + std::string(THX_BINARY) + " " + args + " --resume 2>&1").code, 0);
  const double t1 = std::ceil(now_s());

  const json p = json::parse(read_file(run + "/provenance.json"));
  ASSERT_EQ(p["sessions"].size(), 2u) << p.dump(2);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  const std::regex iso("\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\dZ");
  for (size_t i = 0; i < 2; ++i) {
    const json& s = p["sessions"][i];
    SCOPED_TRACE(s.dump());
    EXPECT_EQ(s["command"], std::string(THX_BINARY) + " " + args + (i ? " --resume" : ""));
    ASSERT_TRUE(s["dirty"].is_boolean());
    if (!s["dirty"].get<bool>()) EXPECT_EQ(s["commit"], source_commit());
    EXPECT_EQ(s["commit"], build_commit());
    EXPECT_EQ(s["host"], host);
    EXPECT_EQ(s["cwd"], fs::current_path().string());
    EXPECT_NE(s["cpu"].get<std::string>().find("bf16"), std::string::npos);  // model and bf16 flags
    EXPECT_TRUE(std::regex_match(s["started"].get<std::string>(), iso));
    ASSERT_TRUE(s.contains("ended"));
    EXPECT_TRUE(std::regex_match(s["ended"].get<std::string>(), iso));
    EXPECT_LE(s["started"].get<std::string>(), s["ended"].get<std::string>());
  }
  EXPECT_LE(p["sessions"][0]["ended"].get<std::string>(), p["sessions"][1]["started"].get<std::string>());
  // The switches that change numbers: THX_ATEN in the resumed session only; OPENBLAS_CORETYPE in
  // both where set (thx sets it where OpenBLAS took the CPU for an old one; this process too).
  const json none = json::object();
  const json& env0 = p["sessions"][0].contains("environment") ? p["sessions"][0]["environment"] : none;
  EXPECT_FALSE(env0.contains("THX_ATEN"));
  EXPECT_EQ(p["sessions"][1]["environment"]["THX_ATEN"], "loss,rms_norm");
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  EXPECT_EQ(env0.contains("OPENBLAS_CORETYPE"), core != nullptr);
  if (core) EXPECT_EQ(p["sessions"][1]["environment"]["OPENBLAS_CORETYPE"], core);
  EXPECT_EQ(p["sessions"][0].contains("blas"), !blas_description().empty());  // the same BLAS as here
  // Each checkpoint names the session that wrote it: step 2 the first, step 4 the resumed one.
  auto written_by = [&](int64_t step) {
    return json::parse(H5Reader(checkpoint_path(run + "/checkpoints", step)).attr("/", "provenance"));
  };
  EXPECT_EQ(written_by(2)["pid"], p["sessions"][0]["pid"]);
  EXPECT_EQ(written_by(4)["pid"], p["sessions"][1]["pid"]);
  EXPECT_EQ(written_by(4)["command"], p["sessions"][1]["command"]);
  // Every metrics record has its wall-clock time, in order, within the two runs.
  double last = 0;
  int records = 0;
  std::istringstream in(read_file(run + "/metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    ASSERT_TRUE(j.contains("time") && j["time"].is_number()) << line;
    EXPECT_GE(j["time"].get<double>(), std::max(last, t0)) << line;
    EXPECT_LE(j["time"].get<double>(), t1) << line;
    last = j["time"], ++records;
  }
  EXPECT_EQ(records, 5);  // steps 1-4 and the evaluation at 4
}

// A session with no "ended": the resumed run says what most likely ended it, from the boot_id
// and the out-of-memory killer's count recorded at its start against today's.
TEST(Provenance, AResumedRunSaysHowItsLastSessionEnded) {
  const json now = {{"pid", 9}, {"boot_id", "b1"}, {"oom_kills", 5}};
  auto last = [](json s) { return json::array({{{"pid", 7}, {"started", "T0"}, {"ended", "T1"}}, s}); };
  const json killed = {{"pid", 8}, {"started", "T2"}, {"boot_id", "b1"}, {"oom_kills", 5}};
  EXPECT_EQ(unended_session(last(killed), now),
            "the last session here (pid 8, started T2) did not record its end: it was killed (SIGKILL, as `kill -9` "
            "or a job scheduler's limit sends it) or crashed (thx's report of a crash, \"thx: fatal signal\", is on "
            "that session's stderr)");
  json oom = killed;
  oom["oom_kills"] = 3;
  EXPECT_EQ(unended_session(last(oom), now).rfind("the last session here (pid 8, started T2) did not record its end: "
                                                  "Linux's out-of-memory killer has ended 2 processes since it started "
                                                  "(/proc/vmstat oom_kill), most likely it; give this run more room",
                                                  0),
            0u);
  json rebooted = oom;
  rebooted["boot_id"] = "b0";  // the count started again at the boot
  EXPECT_EQ(unended_session(last(rebooted), now),
            "the last session here (pid 8, started T2) did not record its end: the machine has restarted since it "
            "started");
  EXPECT_EQ(unended_session(last({{"pid", 8}, {"started", "T2"}}), now),  // written before thx recorded a boot
            "the last session here (pid 8, started T2) did not record its end (killed, crashed, or the machine "
            "stopped)");
  json ended = killed;
  ended["ended"] = "T3";
  EXPECT_EQ(unended_session(last(ended), now), "");
  EXPECT_EQ(unended_session(json::array(), now), "");
  json other_rank = killed;  // another rank's session is not this one's last
  other_rank["rank"] = "1";
  EXPECT_EQ(unended_session(last(other_rank), now), "");
  EXPECT_NE(unended_session(last(other_rank), {{"rank", "1"}, {"boot_id", "b1"}, {"oom_kills", 5}}), "");
  json rank0 = killed;  // a data-parallel run's rank 0, resumed as one process
  rank0["rank"] = "0";
  EXPECT_NE(unended_session(last(rank0), now), "");
  // A file edited by hand: fields of other types are unknown, not an error.
  EXPECT_EQ(unended_session(last({{"pid", "x"}, {"started", 3}, {"boot_id", 1}, {"oom_kills", "y"}}), now),
            "the last session here (pid ?, started ?) did not record its end (killed, crashed, or the machine "
            "stopped)");
  EXPECT_EQ(unended_session(json::object(), now), "");

  // From the binary: a run killed after its first checkpoint, then resumed.
  TempDir dir;
  PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 40);
  c.checkpoint.every = 2;
  finish(c);
  const std::string run = dir.file("run");
  const std::string args = "--threads 1 pretrain --config " + dir.write("run.yaml", c.yaml) + " --run-dir " + run;
  const int64_t oom_before = oom_kills();
  ASSERT_TRUE(kill_thx_when_exists(args, checkpoint_path(run + "/checkpoints", 2)));
  const json killed_session = json::parse(read_file(run + "/provenance.json"))["sessions"][0];
  EXPECT_FALSE(killed_session.contains("ended")) << killed_session.dump();
  const RunResult r = run_thx(args + " --resume");
  EXPECT_EQ(r.code, 0) << r.out;
  const std::string said =
      fmt::format("{}: the last session here (pid {}, started {}) did not record its end: ", run,
                  killed_session["pid"].get<int64_t>(), killed_session["started"].get<std::string>());
  EXPECT_NE(r.out.find(said + (oom_kills() == oom_before ? "it was killed (SIGKILL" : "")), std::string::npos) << r.out;
  EXPECT_EQ(json::parse(read_file(run + "/provenance.json"))["sessions"][1]["boot_id"], killed_session["boot_id"]);
  EXPECT_EQ(run_thx(args + " --resume").out.find("did not record its end"),
            std::string::npos);  // the resumed session ended
}

// Debian 12's OpenBLAS takes an Intel CPU it does not know for a Prescott (common/runtime.h);
// thx then names the AVX-512 or AVX2 kernels, and keeps OpenBLAS's own choice otherwise.
TEST(Provenance, OpenBlasKernelsReplaceOnlyACoreOlderThanAvx) {
  EXPECT_STREQ(openblas_core_for("Prescott", true, true), "SkylakeX");
  EXPECT_STREQ(openblas_core_for("PRESCOTT", true, true), "SkylakeX");
  EXPECT_STREQ(openblas_core_for("Nehalem", false, true), "Haswell");
  EXPECT_STREQ(openblas_core_for("Unknown", true, true), "SkylakeX");
  EXPECT_EQ(openblas_core_for("Prescott", false, false), nullptr);  // no kernels it could use
  for (const char* own : {"Haswell", "SkylakeX", "Zen", "Sandybridge", "Cooperlake"})
    EXPECT_EQ(openblas_core_for(own, true, true), nullptr) << own;
}

// An OPENBLAS_CORETYPE set before thx started stands; bench's CPU line says where its kernels
// leave the CPU's AVX-512 (or AVX2) unused: the session shells of this project's AVX-512 hosts
// set Haswell.
TEST(Provenance, ACoretypeThatLeavesVectorUnitsUnusedIsNamed) {
  for (const char* core : {"Haswell", "Zen", "Sandybridge", "Prescott", "Excavator"})
    EXPECT_STREQ(openblas_core_leaves_unused(core, true, true), "AVX-512") << core;
  for (const char* core : {"SkylakeX", "SKYLAKEX", "Cooperlake", "SapphireRapids"})
    EXPECT_EQ(openblas_core_leaves_unused(core, true, true), nullptr) << core;
  for (const char* core : {"Prescott", "Nehalem", "Core2", "Unknown", "Sandybridge", "Piledriver"})
    EXPECT_STREQ(openblas_core_leaves_unused(core, false, true), "AVX2") << core;
  for (const char* core : {"Haswell", "Zen", "Excavator"})  // AVX2 kernels on an AVX2 CPU
    EXPECT_EQ(openblas_core_leaves_unused(core, false, true), nullptr) << core;
  EXPECT_EQ(openblas_core_leaves_unused("Sandybridge", false, false), nullptr);  // an AVX CPU's own
  EXPECT_EQ(openblas_core_leaves_unused("Prescott", false, false), nullptr);  // nothing it could use
}

// On this machine, as a user runs thx (OPENBLAS_CORETYPE unset), its fp32 matmuls never run on
// OpenBLAS kernels older than AVX where the CPU has AVX2: bench's CPU line names the kernels, and
// where thx chose them, what OpenBLAS had taken the CPU for. A user's OPENBLAS_CORETYPE stands.
TEST(Provenance, Fp32MatmulsRunOnTheCpusOwnOpenBlasKernels) {
  const std::string bench = std::string(THX_BINARY) +
                            " --threads 1 bench attention --heads 2 --n 8 --batch 1 --reps 1 --no-reference 2>&1";
  const RunResult r = run_command("env -u OPENBLAS_CORETYPE -u THX_OPENBLAS_DETECTED " + bench);
  ASSERT_EQ(r.code, 0) << r.out;
  std::smatch m;
  if (!std::regex_search(r.out, m, std::regex("OpenBLAS (\\w+) kernels(.*)")))
    GTEST_SKIP() << "this LibTorch's BLAS is not OpenBLAS: " << r.out;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    for (const char* old : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Unknown"})
      EXPECT_NE(m[1].str(), old) << r.out;
  if (m[2].str().find("OPENBLAS_CORETYPE=") != std::string::npos)  // thx's choice: what it replaced
    EXPECT_TRUE(std::regex_search(m[2].str(), std::regex("OpenBLAS took this CPU for a \\w+"))) << r.out;
  const RunResult own = run_command("env -u THX_OPENBLAS_DETECTED OPENBLAS_CORETYPE=Haswell " + bench);
  ASSERT_EQ(own.code, 0) << own.out;
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl");
  EXPECT_NE(own.out.find(avx512 ? "OpenBLAS Haswell kernels (OPENBLAS_CORETYPE=Haswell, set before thx started: its "
                                  "kernels leave this CPU's AVX-512 unused; unset it for the CPU's own)"
                                : "OpenBLAS Haswell kernels (OPENBLAS_CORETYPE=Haswell)"),
            std::string::npos)
      << own.out;
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
