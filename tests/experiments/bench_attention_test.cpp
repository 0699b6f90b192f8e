// `thx bench attention` when a variant runs out of device memory (c10::OutOfMemoryError, what
// LibTorch's CUDA allocator throws; here a test hook throws it, as a CPU cannot run out on
// demand): the variant's row says so, the cell has no time ratio and does not count for or
// against the time target, the report names the cell, and every other cell is still measured.
// And what its GFLOP/s count.
#include <gtest/gtest.h>

#include "experiments/bench_attention.h"
#include "test_util.h"

#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace thx {
namespace {
namespace THX_FILE_ID {

// The trimmed cells of the report's table row whose first two cells are `a` and `b` (a variant
// and h, or h and a precision), in the table that has `column` in its header; {} where none.
std::vector<std::string> row(const std::string& report, const std::string& column, const std::string& a,
                             const std::string& b) {
  std::istringstream lines(report);
  bool in_table = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '|') {
      in_table = false;
      continue;
    }
    if (line.find(column) != std::string::npos) in_table = true;
    std::vector<std::string> cells;
    std::istringstream parts(line.substr(1));
    for (std::string c; std::getline(parts, c, '|');) {
      c.erase(0, c.find_first_not_of(' '));
      c.erase(c.find_last_not_of(' ') + 1);
      cells.push_back(c);
    }
    if (in_table && cells.size() >= 2 && cells[0] == a && cells[1] == b) return cells;
  }
  return {};
}

struct HookReset {
  ~HookReset() { bench_attention_step_hook() = nullptr, bench_attention_inputs_hook() = nullptr; }
};

BenchAttentionOptions tiny() {
  BenchAttentionOptions o;
  o.d_model = 32, o.n = 8, o.batch = 1, o.heads = {2, 4}, o.reps = 2, o.warmup = 1, o.reference = false;
  return o;
}

TEST(BenchAttention, AVariantOutOfMemoryIsItsRowAndTheOthersGoOn) {
  HookReset reset;
  int th_steps = 0;
  bench_attention_step_hook() = [&](const AttentionDims& d, const torch::Tensor&, const torch::Tensor&) {
    if (d.name() != "talking_heads" || d.h != 4) return;
    // Out of memory from its second step on (after a warm-up that fitted): it leaves the cell.
    if (++th_steps > 1) TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate 3.20 GiB");
  };
  const std::string report = bench_attention(tiny());
  EXPECT_EQ(th_steps, 2) << "no step of a variant after it ran out";
  const auto th4 = row(report, "variant", "talking_heads", "4"), mh4 = row(report, "variant", "multi_head", "4");
  ASSERT_GE(th4.size(), 6u) << report;
  ASSERT_GE(mh4.size(), 6u) << report;
  EXPECT_EQ(th4[4], "out of memory");
  EXPECT_NE(mh4[4], "out of memory");
  EXPECT_GT(std::stod(mh4[4]), 0) << "multi-head at h = 4 still timed";
  const auto ratio4 = row(report, "TH/MH time", "4", "fp32"), ratio2 = row(report, "TH/MH time", "2", "fp32");
  ASSERT_EQ(ratio4.size(), 6u) << report;
  EXPECT_EQ(ratio4[2], "-");
  EXPECT_EQ(ratio4[5], "out of memory: talking_heads");
  ASSERT_EQ(ratio2.size(), 6u) << report;
  EXPECT_GT(std::stod(ratio2[2]), 0) << "h = 2 has its ratio";
  for (const char* v : {"talking_heads", "multi_head"}) {
    const auto r = row(report, "variant", v, "2");
    ASSERT_GE(r.size(), 6u) << report;
    EXPECT_GT(std::stod(r[4]), 0) << v;
  }
  EXPECT_NE(report.find("within 1.15x of the multiplies ratio at every h where both ran"), std::string::npos);
  EXPECT_NE(report.find("Out of memory: h = 4 fp32: talking_heads."), std::string::npos) << report;
}

// Out of memory while a variant allocates a cell's inputs (the bias at n = 8192 and 48 heads is
// 12.9 GB): that variant's row and reference say so, it takes no step, and the rest go on.
TEST(BenchAttention, InputsThatDoNotFitAreTheirVariantsRow) {
  HookReset reset;
  int th4_steps = 0;
  std::vector<int64_t> bytes;
  bench_attention_inputs_hook() = [&](const AttentionDims& d, int64_t b) {
    bytes.push_back(b);
    if (d.name() == "talking_heads" && d.h == 4)
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate 12.00 GiB");
  };
  bench_attention_step_hook() = [&](const AttentionDims& d, const torch::Tensor&, const torch::Tensor&) {
    th4_steps += d.name() == "talking_heads" && d.h == 4;
  };
  BenchAttentionOptions o = tiny();
  o.reference = true, o.bias = true;
  const std::string report = bench_attention(o);
  EXPECT_EQ(th4_steps, 0) << "no step without its inputs";
  ASSERT_EQ(bytes.size(), 4u) << "once per variant and cell";
  EXPECT_EQ(bytes[0], 4 * (2 * 1 * 8 * 32 + 2 * 8 * 8)) << "X, dY and the bias [1, 2, 8, 8], fp32";
  const auto th4 = row(report, "variant", "talking_heads", "4"), mh4 = row(report, "variant", "multi_head", "4");
  ASSERT_GE(th4.size(), 8u) << report;
  ASSERT_GE(mh4.size(), 8u) << report;
  EXPECT_EQ(th4[4], "out of memory");
  EXPECT_EQ(th4[7], "out of memory") << "its reference neither";
  EXPECT_GT(std::stod(mh4[4]), 0) << "multi-head at h = 4 still timed";
  EXPECT_GT(std::stod(mh4[7]), 0) << "and its reference";
  EXPECT_EQ(row(report, "TH/MH time", "4", "fp32")[5], "out of memory: talking_heads");
  EXPECT_GT(std::stod(row(report, "TH/MH time", "2", "fp32")[2]), 0) << "h = 2 has its ratio";
  EXPECT_NE(report.find("Out of memory: h = 4 fp32: talking_heads."), std::string::npos) << report;
}

// The control: without the hook no row is out of memory and the report names none.
TEST(BenchAttention, NoHookNoRowOutOfMemory) {
  const std::string report = bench_attention(tiny());
  EXPECT_EQ(report.find("out of memory"), std::string::npos) << report;
  EXPECT_EQ(report.find("Out of memory"), std::string::npos) << report;
  EXPECT_NE(report.find("at every h: "), std::string::npos) << report;
}

// --bias (T5's relative position bias): every timed step of both variants gets a learned [1, h, n, n]
// fp32 bias and computes its gradient, and the report says so; without it no step gets one.
TEST(BenchAttention, TheBiasReachesEveryStepWithItsGradient) {
  HookReset reset;
  for (const bool with : {true, false}) {
    SCOPED_TRACE(with ? "--bias" : "no bias");
    std::vector<std::tuple<std::string, int64_t, torch::Tensor>> seen;  // (variant, h, the step's bias)
    bench_attention_step_hook() = [&](const AttentionDims& d, const torch::Tensor& bias, const torch::Tensor&) {
      seen.emplace_back(d.name(), d.h, bias);
    };
    BenchAttentionOptions o = tiny();
    o.bias = with;
    const std::string report = bench_attention(o);
    EXPECT_EQ(seen.size(), 2u * o.heads.size() * (o.warmup + o.reps));
    for (const auto& [variant, h, bias] : seen) {
      ASSERT_EQ(bias.defined(), with) << variant;
      if (!with) continue;
      EXPECT_EQ(bias.dtype(), torch::kFloat32);
      EXPECT_TRUE(bias.requires_grad());
      ASSERT_EQ(bias.dim(), 4) << variant;
      EXPECT_EQ(bias.size(0), 1);
      EXPECT_EQ(bias.size(1), h);
      EXPECT_EQ(bias.size(2), o.n);
      EXPECT_EQ(bias.size(3), o.n);
      ASSERT_TRUE(bias.grad().defined()) << variant;
      EXPECT_GT(bias.grad().abs().sum().item<double>(), 0) << variant;
    }
    EXPECT_EQ(report.find("relative position bias") != std::string::npos, with) << report;
  }
}

// --m (an encoder-decoder attention's memory of its own length): the queries keep n positions and
// the keys and values have m, so each step's memory is [batch, m, d_model] and its bias [1, h, n, m]
// (a memory of n positions could not take it: the logits would not broadcast), the memory's
// gradient dM is computed (each variant's last step leaves it), the inputs counted are the
// memory's too, and the report says both lengths and that dM is computed.
TEST(BenchAttention, TheMemoryHasItsOwnLength) {
  HookReset reset;
  BenchAttentionOptions o = tiny();
  o.m = 5, o.bias = true;
  std::vector<torch::Tensor> memories;  // (each step's; a variant's steps share one)
  bench_attention_step_hook() = [&](const AttentionDims& d, const torch::Tensor& bias, const torch::Tensor& memory) {
    memories.push_back(memory);
    ASSERT_TRUE(bias.defined());
    EXPECT_EQ(bias.sizes(), (std::vector<int64_t>{1, d.h, 8, 5}));
    EXPECT_EQ(memory.sizes(), (std::vector<int64_t>{1, 5, 32}));
    EXPECT_TRUE(memory.requires_grad());
  };
  std::vector<int64_t> bytes;
  bench_attention_inputs_hook() = [&](const AttentionDims& d, int64_t b) {
    EXPECT_EQ(b, 4 * ((2 * 8 + 5) * 32 + d.h * 8 * 5)) << d.name() << " h=" << d.h;
    bytes.push_back(b);
  };
  const std::string report = bench_attention(o);
  EXPECT_EQ(memories.size(), 2u * 2 * (o.warmup + o.reps));
  for (const torch::Tensor& memory : memories) {
    ASSERT_TRUE(memory.grad().defined());
    EXPECT_GT(memory.grad().abs().sum().item<double>(), 0);
  }
  EXPECT_EQ(bytes.size(), 4u);
  EXPECT_NE(report.find("n = 8 queries, m = 5 keys"), std::string::npos) << report;
  EXPECT_NE(report.find("(dX, the memory's dM, every parameter gradient and the bias's)"), std::string::npos)
      << report;
  for (const char* variant : {"multi_head", "talking_heads"})
    EXPECT_GE(row(report, "variant", variant, "4").size(), 7u) << variant;
  o.m = 8, o.bias = false;  // the queries' own length: self-attention, as without --m
  bench_attention_step_hook() = [&](const AttentionDims&, const torch::Tensor&, const torch::Tensor& memory) {
    EXPECT_EQ(memory.size(1), 8);
  };
  bench_attention_inputs_hook() = [&](const AttentionDims&, int64_t b) { EXPECT_EQ(b, 4 * 2 * 8 * 32); };
  const std::string self = bench_attention(o);
  EXPECT_NE(self.find("n = m = 8,"), std::string::npos) << self;
  EXPECT_NE(self.find("(dX and every parameter gradient)"), std::string::npos) << self;
}

// GFLOP/s counts the whole batch: 6 x batch x the layer's multiplies per example, here
// multi-head's 2 n d^2 + 2 m d^2 (the four projections, two on the queries' side and two on the
// memory's) + 2 n m d (scores and weighted sums), from its time; with --m the memory's own length
// m. (Until 2026-11-30 the batch was left out: every published GFLOP/s and % of peak of this
// benchmark was the batch's factor too low.)
TEST(BenchAttention, GflopsCountTheWholeBatch) {
  for (const int64_t keys : {0, 256}) {
    SCOPED_TRACE(keys == 0 ? "m = n" : "m = 256");
    BenchAttentionOptions o;
    o.d_model = 128, o.n = 128, o.m = keys, o.batch = 6, o.heads = {4}, o.reps = 3, o.warmup = 1;
    o.reference = false;
    const std::string report = bench_attention(o);
    const auto mh = row(report, "variant", "multi_head", "4");
    ASSERT_GE(mh.size(), 7u) << report;
    const double ms = std::stod(mh[4]), gflops = std::stod(mh[5]), n = 128, m = keys == 0 ? n : keys, d = 128;
    ASSERT_GE(ms, 2.0) << "too short for the rounded cells to check: " << report;
    const double want = 6 * 6 * (2 * n * d * d + 2 * m * d * d + 2 * n * m * d) / (ms / 1e3) / 1e9;
    EXPECT_NEAR(gflops, want, 0.03 * want + 0.1) << report;  // (ms rounded to 0.1: at most 2.5% at 2 ms)
  }
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx
