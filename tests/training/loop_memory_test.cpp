// The loop's memory figures (training/loop.h): a train record's peak_rss_mb is the process's peak
// in the steps since the previous record, an evaluation among them left out, and an eval record's
// is the evaluation's own. A stand-in trainee touches a 256 MiB block in one step's forward pass
// and frees it: glibc maps a block that large and unmaps it on free, so the resident set falls
// back while the peak (VmHWM) keeps it. (On a GPU, gpu_peak_mb follows the same windows:
// Cuda.PretrainingT5AndAlbertMatchTheCpuAndResume.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>

#include "common/runtime.h"
#include "test_util.h"
#include "training/linear_trainee.h"
#include "training/loop.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

constexpr size_t kBlock = size_t(256) << 20;  // bytes; 256 of runtime.h's MB (2^20)

void touch_block() {
  auto* p = static_cast<char*>(std::malloc(kBlock));
  ASSERT_TRUE(p);
  volatile char* pages = p;  // (volatile: a compiler may drop writes to a block freed unread)
  for (size_t i = 0; i < kBlock; i += 4096) pages[i] = 1;
  std::free(p);
}

// Touches the block in its `touch_at`th forward pass.
class PeakTrainee : public LinearTrainee {
 public:
  explicit PeakTrainee(int64_t touch_at) : touch_at_(touch_at) {}
  MicroLoss forward(const Batch& b) override {
    if (++forwards_ == touch_at_) touch_block();
    return LinearTrainee::forward(b);
  }

 private:
  int64_t touch_at_, forwards_ = 0;
};

// metrics.jsonl's records by kind and step ("train 4", "eval 2").
std::map<std::string, nlohmann::json> records(const std::string& file) {
  std::map<std::string, nlohmann::json> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    out[std::string(j.contains("step_time_s") ? "train " : "eval ") + std::to_string(j["step"].get<int64_t>())] = j;
  }
  return out;
}

// Four steps in one log window, an evaluation after step 2 (inside it) and after step 4 (after
// its record). The block is touched in step 1, before the evaluation inside the window, or in
// step 3, after it; either way the window's record has it, and no evaluation's does.
TEST(LoopMemory, AWindowsPeakIsItsStepsAndAnEvaluationsIsItsOwn) {
  // The control: this kernel resets the peak when asked (/proc/self/clear_refs), and the block
  // shows in it.
  reset_peak_rss();
  const double base = peak_rss_mb();
  touch_block();
  if (peak_rss_mb() < base + 200) GTEST_SKIP() << "the peak did not rise with the block (VmHWM)";
  reset_peak_rss();
  if (peak_rss_mb() > base + 100) GTEST_SKIP() << "this kernel does not reset the peak (/proc/self/clear_refs)";
  for (const int64_t at : {1, 3}) {
    TempDir dir;
    LoopOptions o;
    o.steps = 4, o.batch_size = 8, o.log_every = 4, o.eval_every = 2, o.checkpoint_every = 4;
    o.checkpoint_dir = dir.file("checkpoints"), o.metrics_file = dir.file("metrics.jsonl");
    o.schedule.schedule = "constant", o.schedule.learning_rate = 0.01;
    const double resident = rss_mb();
    PeakTrainee t(at);
    train(t, o);
    const auto r = records(o.metrics_file);
    ASSERT_EQ(r.size(), 3u) << "the train record at 4, the evaluations at 2 and 4";
    const double window = r.at("train 4")["peak_rss_mb"].get<double>();
    EXPECT_GE(window, resident + 200) << "the block touched in step " << at;
    for (const char* e : {"eval 2", "eval 4"})
      EXPECT_LT(r.at(e)["peak_rss_mb"].get<double>(), resident + 100) << e << ", the block touched in step " << at;
  }
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
