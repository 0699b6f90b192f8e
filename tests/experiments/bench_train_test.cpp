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

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
