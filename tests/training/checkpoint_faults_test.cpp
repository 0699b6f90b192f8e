// Checkpoint faults beyond SIGKILL (issue 16): a checkpoint whose bytes were flipped is found
// by the CRC-32 in its user block and named in one line, and --resume falls back to the one
// before it; a full disk (here a file-size limit, ulimit -f) while writing a checkpoint is one
// line, leaves the previous checkpoints as they were and no temporary file, and --resume then
// continues bit for bit.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/forked_cli.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/h5.h"
#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {
namespace fs = std::filesystem;

// Flip one bit of byte `at` of a file.
void flip(const std::string& path, int64_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c = 0;
  f.get(c);
  f.seekp(at);
  f.put(char(c ^ 0x10));
}

TEST(CheckpointFaults, AFlippedBitIsOneLineNamingTheFile) {
  TempDir dir;
  Checkpoint c;
  c.params["w"] = torch::arange(4096, torch::kFloat32);  // 16 KB of data after the user block
  c.step = 7;
  c.config = "model: {}\n";
  const std::string path = dir.file("ck.h5");
  save_checkpoint(path, c);
  const H5Checksum sum = verify_h5_checksum(path);
  EXPECT_TRUE(sum.present && sum.ok) << sum.problem;
  EXPECT_EQ(load_checkpoint(path).step, 7);
  // Anywhere after the user block: the parameters' bytes, HDF5's own structures, the end.
  const int64_t size = int64_t(fs::file_size(path));
  for (const int64_t at : {int64_t(512), int64_t(600), size / 2, size - 1}) {
    SCOPED_TRACE(at);
    const std::string copy = dir.file("flipped.h5");
    fs::copy_file(path, copy, fs::copy_options::overwrite_existing);
    flip(copy, at);
    const std::string e = error_of([&] { load_checkpoint(copy); });
    EXPECT_EQ(e.rfind(copy + ": checksum mismatch (CRC-32 ", 0), 0u) << e;
    EXPECT_NE(e.find("its bytes changed after it was written"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  // The header itself, and a cut file.
  const std::string copy = dir.file("header.h5");
  fs::copy_file(path, copy);
  flip(copy, 20);  // inside "crc32 ..."
  EXPECT_NE(error_of([&] { load_checkpoint(copy); }).find(copy + ": "), std::string::npos);
  const std::string cut = dir.file("cut.h5");
  fs::copy_file(path, cut);
  fs::resize_file(cut, 1000);
  EXPECT_EQ(error_of([&] { load_checkpoint(cut); }), cut + ": truncated: 1000 of its " + std::to_string(size) + " bytes");
}

// A file written without the header (thx before checksums, or another program) still reads.
TEST(CheckpointFaults, AFileWithoutTheChecksumHeaderStillReads) {
  TempDir dir;
  Checkpoint c;
  c.params["w"] = torch::ones({3});
  c.config = "x";
  const std::string path = dir.file("ck.h5");
  save_checkpoint(path, c);
  // Erase the header (512 zero bytes: an HDF5 user block with nothing in it).
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    const std::string zeros(512, '\0');
    f.write(zeros.data(), 512);
  }
  EXPECT_FALSE(verify_h5_checksum(path).present);
  EXPECT_TRUE(torch::equal(load_checkpoint(path).params.at("w"), torch::ones({3})));
}

struct TinyRun {
  TempDir dir;
  std::string cfg;
  TinyRun() {
    PretrainConfig c = tiny_pretrain(prepared_corpus(dir), 6);
    cfg = dir.write("run.yaml", bitwise_runs(c).yaml);
  }
  std::string args(const std::string& run, const std::string& extra = "") const {
    return "--threads 1 pretrain --config " + cfg + " --run-dir " + dir.file(run) +
           " --set checkpoint.every=2 --set checkpoint.keep=3 " + extra;
  }
};

TEST(CheckpointFaults, ResumeFallsBackToTheCheckpointBeforeAFlippedOne) {
  TinyRun t;
  ASSERT_EQ(fork_thx(t.args("whole")).code, 0);
  ASSERT_EQ(fork_thx(t.args("hurt")).code, 0);
  const std::string ck = t.dir.file("hurt/checkpoints");
  fs::remove(checkpoint_path(ck, 6));                   // as if killed before step 6 was saved
  flip(checkpoint_path(ck, 4), int64_t(fs::file_size(checkpoint_path(ck, 4))) / 2);  // and step 4 rotted
  const RunResult r = fork_thx(t.args("hurt", "--resume"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(checkpoint_path(ck, 4) + ": checksum mismatch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("moved aside to " + checkpoint_path(ck, 4) + ".corrupt; resuming from the checkpoint before "
                       "it, " + checkpoint_path(ck, 2)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("resumed from " + checkpoint_path(ck, 2) + " at step 2"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(checkpoint_path(ck, 4) + ".corrupt"));  // kept for a look, out of the way
  EXPECT_TRUE(same_params(checkpoint_path(ck, 6), checkpoint_path(t.dir.file("whole/checkpoints"), 6), 0));
}

TEST(CheckpointFaults, EveryCheckpointUnreadableIsOneLineAndMovesNothing) {
  TinyRun t;
  ASSERT_EQ(fork_thx(t.args("hurt", "--set train.steps=2")).code, 0);
  const std::string ck = checkpoint_path(t.dir.file("hurt/checkpoints"), 2);
  flip(ck, 700);
  const RunResult r = fork_thx(t.args("hurt", "--set train.steps=2 --resume"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_LE(lines(r.out), 2) << r.out;  // the model's one-line summary, then the error
  EXPECT_NE(r.out.find("thx: error: " + ck + ": checksum mismatch"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("thx: error:"), r.out.rfind("thx: error:")) << r.out;
  EXPECT_TRUE(fs::exists(ck));
}

TEST(CheckpointFaults, AFullDiskWhileCheckpointingIsOneLineAndResumes) {
  TinyRun t;
  ASSERT_EQ(fork_thx(t.args("whole")).code, 0);
  ASSERT_EQ(fork_thx(t.args("full")).code, 0);
  const std::string ck = t.dir.file("full/checkpoints");
  fs::remove(checkpoint_path(ck, 4)), fs::remove(checkpoint_path(ck, 6));  // as if stopped after step 2
  const std::string before = read_file(checkpoint_path(ck, 2));
  ASSERT_GT(before.size(), 200u * 1024);  // larger than the limit below; the logs stay under it
  // ulimit -f counts 1024-byte blocks: writes past 128 KB fail with EFBIG, as on a full disk.
  const RunResult r = run_command("ulimit -f 128 && " + std::string(THX_BINARY) + " " +
                                  t.args("full", "--resume") + " 2>&1");
  EXPECT_EQ(r.code, 1) << r.out;
  const std::string last = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
  EXPECT_EQ(last.rfind("thx: error: step 4: no checkpoint written: " + checkpoint_path(ck, 4) + ".tmp-", 0), 0u)
      << r.out;
  EXPECT_NE(last.find("(File too large); nothing was replaced; the earlier checkpoints in " + ck +
                      " are intact (free some space, then --resume)\n"), std::string::npos) << last;
  EXPECT_EQ(r.out.find("thx: error:"), r.out.rfind("thx: error:")) << r.out;  // one error line
  // The previous checkpoint is untouched, no temporary is left, and the run resumes.
  EXPECT_EQ(read_file(checkpoint_path(ck, 2)), before);
  for (const auto& e : fs::directory_iterator(ck))
    EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos) << e.path();
  // A run's first checkpoint: there is none before it to speak of.
  const RunResult first = run_command("ulimit -f 128 && " + std::string(THX_BINARY) + " " + t.args("first") + " 2>&1");
  EXPECT_EQ(first.code, 1) << first.out;
  const std::string none =
      "; nothing was replaced; there is no earlier checkpoint in " + t.dir.file("first/checkpoints");
  EXPECT_NE(first.out.find(none + " (free some space, then run again)\n"), std::string::npos) << first.out;
  const RunResult again = fork_thx(t.args("full", "--resume"));
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_TRUE(same_params(checkpoint_path(ck, 6), checkpoint_path(t.dir.file("whole/checkpoints"), 6), 0));
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
