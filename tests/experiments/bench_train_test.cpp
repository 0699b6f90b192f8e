// thx bench train end to end on a tiny T5 (the benchmark itself runs in scripts, at sizes too
// large for a test): --profile adds a profile a row, by phase and op; the report names the parts
// that ran their ATen composition (--aten, THX_ATEN).
#include <filesystem>
#include <fstream>

#include "common/fs.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

TEST(BenchTrain, ProfileAndAtenPartsOnATinyT5) {
  TempDir dir;
  const std::string out = dir.file("train.md");
  // (--aten names two parts, THX_ATEN a third: the report names all three)
  const RunResult r = run_command("THX_ATEN=loss " + std::string(THX_BINARY) + " --log-level warn bench train " +
                                  "--config " + std::string(THX_SOURCE_DIR) + "/configs/t5/mini.yaml " +
                                  "--set model.d_model=32 --set model.d_ff=64 --set model.encoder_layers=1 " +
                                  "--set model.decoder_layers=1 --set train.batch_size=2 --steps 1 --profile " +
                                  "--aten adafactor,rms_norm --out " + out + " 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string md = read_file(out);
  EXPECT_NE(md.find("; by ATen's composition, not thx's kernels (--aten, THX_ATEN): adafactor, loss, rms_norm."),
            std::string::npos) << md;
  for (const char* row : {"multi_head", "talking_heads"})
    EXPECT_NE(md.find(std::string("Profile, configured ") + row), std::string::npos) << row;
  EXPECT_NE(md.find("| attention core "), std::string::npos) << md;  // (on a GPU: its kernels, under Kineto)
}

// --deterministic-cost times each row again under train.deterministic in the same run, beside its
// time without it, and says whether a step repeats to the bit either way; with the config's
// train.deterministic already on it is refused in one line.
int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(BenchTrain, DeterministicCostOnATinyT5) {
  TempDir dir;
  const std::string out = dir.file("train.md");
  const std::string bench = std::string(THX_BINARY) + " --log-level warn --device cpu bench train --config " +
                            std::string(THX_SOURCE_DIR) + "/configs/t5/mini.yaml --set model.d_model=32 --set " +
                            "model.d_ff=64 --set model.encoder_layers=1 --set model.decoder_layers=1 --set " +
                            "train.batch_size=2 --set model.dropout=0.1 --steps 1 --deterministic-cost";
  const RunResult r = run_command(bench + " --out " + out + " 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string md = read_file(out);
  EXPECT_NE(md.find("Each row again under train.deterministic (--deterministic-cost"), std::string::npos) << md;
  EXPECT_NE(md.find("| s/step | a step repeats | deterministic s/step | a step repeats | ratio |"), std::string::npos)
      << md;
  for (const char* row : {"| configured | multi_head h=8", "| configured | talking_heads h_k=8"})
    EXPECT_EQ(count(md, row), 2) << row << "\n" << md;  // the main table's row and the cost table's
  // On the CPU a step repeats to the bit with and without the option: each cost row says so twice.
  EXPECT_EQ(count(md, "| bitwise "), 4) << md;
  EXPECT_TRUE(refused(run_command(bench + " --set train.deterministic=true 2>&1"), "thx: error: --deterministic-cost",
                      "the config's train.deterministic is true"));
}

// --peer runs the peer after each row and reads its median step from its RESULT line; --peer-heap
// kept starts it behind keep_freed_memory's settings as glibc's tunables, the user's own after
// them, and the default leaves its environment as it is. The peer here is a shell script
// (THX_PEER_PYTHON=/bin/sh) that records the GLIBC_TUNABLES it was started with.
TEST(BenchTrain, ThePeerRunsBesideEachRowOnTheHeapAskedFor) {
  TempDir dir;
  const std::string peer = dir.file("peer.sh"), seen = dir.file("seen.txt"), out = dir.file("train.md");
  std::ofstream(peer) << "echo \"[$GLIBC_TUNABLES] $3\" >> " << seen << "\necho 'RESULT median_step_s=0.2500'\n";
  const auto bench = [&](const std::string& heap) {
    std::filesystem::remove(seen);
    const RunResult r = run_command(
        "THX_PEER_PYTHON=/bin/sh GLIBC_TUNABLES=glibc.malloc.tcache_count=0 " + std::string(THX_BINARY) +
        " --log-level warn --device cpu bench train --config " + std::string(THX_SOURCE_DIR) +
        "/configs/t5/mini.yaml --set model.d_model=32 --set model.d_ff=64 --set model.encoder_layers=1 " +
        "--set model.decoder_layers=1 --set train.batch_size=2 --steps 1 --precision fp32 --peer " + peer +
        heap + " --out " + out + " 2>&1");
    EXPECT_EQ(r.code, 0) << r.out;
    return read_file(seen) + read_file(out);
  };
  std::string got = bench(" --peer-heap kept");
  const std::string kept = "[glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=18446744073709551615:"
                           "glibc.malloc.tcache_count=0] ";
  std::string calls = kept + "mha\n" + kept + "th\n";  // (--bench --attn mha|th ...)
  EXPECT_EQ(got.substr(0, calls.size()), calls) << got;
  EXPECT_NE(got.find("; the peer's heap kept as thx keeps its own (--peer-heap kept"), std::string::npos) << got;
  EXPECT_EQ(count(got, "|       0.250 |"), 2) << got;  // each row's peer s/step
  got = bench("");
  calls = "[glibc.malloc.tcache_count=0] mha\n[glibc.malloc.tcache_count=0] th\n";
  EXPECT_EQ(got.substr(0, calls.size()), calls) << got;
  EXPECT_NE(got.find("; the peer's heap on glibc's defaults (--peer-heap kept"), std::string::npos) << got;
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
