// thx bench train end to end on a tiny T5 (the benchmark itself runs in scripts, at sizes too
// large for a test): --profile adds a profile a row, by phase and op; the report names the parts
// that ran their ATen composition (--aten, THX_ATEN).
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

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
