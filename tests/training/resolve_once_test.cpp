// A run resolves its attention once: reading the config resolves each attention block of it
// (attention/config.h's resolve(), counted by resolve_count()), and nothing after that does
// again, neither building the model, the optimizer's factoring rule, the memory bound and its
// log line, nor --resume's comparison with the stored config (which reads it back without
// resolving). The tiny T5's config writes four blocks (attention, and one per layer type:
// talking-heads in the encoder, multi-head elsewhere); the tiny ALBERT's one.
#include <gtest/gtest.h>

#include "attention/config.h"
#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

TEST(ResolveOnce, AFreshRunAndAResumeResolveEachAttentionBlockOnce) {
  for (const bool albert : {false, true}) {
    SCOPED_TRACE(albert ? "albert" : "t5");
    TempDir dir;
    const PretrainConfig base = albert ? tiny_albert_pretrain(prepared_corpus(dir, 120, TokenizerConvention::albert), 2)
                                       : tiny_pretrain(prepared_corpus(dir), 2);
    const std::string cfg = dir.write("run.yaml", base.yaml);
    auto resolutions = [&](bool resume, int64_t steps) {
      const int64_t before = resolve_count();
      ConfigTree tree;
      tree.merge_file(cfg);
      tree.set("train.steps=" + std::to_string(steps));
      const PretrainConfig c = load_pretrain_config(tree);
      run_pretrain(c, dir.file("run"), resume, resume ? std::vector<std::string>{"train.steps"} : std::vector<std::string>{});
      return resolve_count() - before;
    };
    const int64_t blocks = albert ? 1 : 4;
    EXPECT_EQ(resolutions(false, 2), blocks) << "a fresh run";
    EXPECT_EQ(resolutions(true, 4), blocks) << "a resume (two more steps)";
  }
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
