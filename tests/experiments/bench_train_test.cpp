// thx bench train end to end on a tiny T5 (the benchmark itself runs in scripts, at sizes too
// large for a test): --profile adds a profile a row, by phase and op; --aten says in the report
// which parts ran their ATen composition.
#include "common/fs.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

TEST(BenchTrain, ProfileAndAtenPartsOnATinyT5) {
  TempDir dir;
  const std::string out = dir.file("train.md");
  const RunResult r = run_thx("--log-level warn bench train --config " + std::string(THX_SOURCE_DIR) +
                              "/configs/t5/mini.yaml --set model.d_model=32 --set model.d_ff=64 --set "
                              "model.encoder_layers=1 --set model.decoder_layers=1 --set train.batch_size=2 --steps 1 "
                              "--profile --aten adafactor,loss,rms_norm --out " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string md = read_file(out);
  EXPECT_NE(md.find("; by ATen's composition, not thx's kernels (--aten): adafactor, loss, rms_norm."),
            std::string::npos) << md;
  for (const char* row : {"multi_head", "talking_heads"})
    EXPECT_NE(md.find(std::string("Profile, configured ") + row), std::string::npos) << row;
  EXPECT_NE(md.find("| attention core rows "), std::string::npos) << md;
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
