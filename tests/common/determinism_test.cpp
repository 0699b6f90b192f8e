// train.deterministic's scope (common/determinism.h): it turns on ATen's deterministic algorithms
// (and cuDNN's) and restores what was before; on a CUDA device it fixes cuBLAS's workspace where
// CUBLAS_WORKSPACE_CONFIG is unset and refuses another value in one line naming the key; and
// ATen's refusal of an op under it becomes one line naming the op and the key.
#include <gtest/gtest.h>

#include <ATen/Context.h>
#include <torch/version.h>

#include <cstdlib>
#include <limits>
#include <optional>
#include <string>

#include "common/determinism.h"
#include "common/error.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

// CUBLAS_WORKSPACE_CONFIG as it was, put back at the end of a test.
class CublasVar {
 public:
  CublasVar() {
    if (const char* v = std::getenv("CUBLAS_WORKSPACE_CONFIG")) was_ = v;
  }
  ~CublasVar() {
    if (was_) setenv("CUBLAS_WORKSPACE_CONFIG", was_->c_str(), 1);
    else unsetenv("CUBLAS_WORKSPACE_CONFIG");
  }

 private:
  std::optional<std::string> was_;
};

TEST(Determinism, CublasWorkspaceValues) {
  for (const char* ok : {static_cast<const char*>(nullptr), ":4096:8", ":16:8"})
    EXPECT_EQ(cublas_workspace_refusal(ok), "") << (ok ? ok : "unset");
  EXPECT_EQ(cublas_workspace_refusal(":4096:2"),
            "true needs cuBLAS's fixed workspace, but CUBLAS_WORKSPACE_CONFIG is \":4096:2\"; unset it (thx then "
            "sets :4096:8) or set :4096:8 or :16:8");
  EXPECT_NE(cublas_workspace_refusal(""), "");  // set but empty: not ATen's values
}

TEST(Determinism, ScopeTurnsTheAlgorithmsOnAndRestores) {
  at::Context& c = at::globalContext();
  ASSERT_FALSE(c.deterministicAlgorithms());
  const bool cudnn = c.deterministicCuDNN();
  const CublasVar keep;
  unsetenv("CUBLAS_WORKSPACE_CONFIG");
  {
    const DeterminismScope off(false, torch::Device(torch::kCPU), "train.deterministic");
    EXPECT_FALSE(c.deterministicAlgorithms());
  }
  {
    const DeterminismScope on(true, torch::Device(torch::kCPU), "train.deterministic");
    EXPECT_TRUE(c.deterministicAlgorithms());
    EXPECT_FALSE(c.deterministicAlgorithmsWarnOnly());
    EXPECT_TRUE(c.deterministicCuDNN());
    EXPECT_EQ(std::getenv("CUBLAS_WORKSPACE_CONFIG"), nullptr);  // the CPU has no cuBLAS
  }
  EXPECT_FALSE(c.deterministicAlgorithms());
  EXPECT_EQ(c.deterministicCuDNN(), cudnn);
  {  // A CUDA device (only named here: nothing runs on it) gets cuBLAS's fixed workspace.
    const DeterminismScope on(true, torch::Device(torch::kCUDA, 0), "train.deterministic");
    ASSERT_NE(std::getenv("CUBLAS_WORKSPACE_CONFIG"), nullptr);
    EXPECT_EQ(std::string(std::getenv("CUBLAS_WORKSPACE_CONFIG")), ":4096:8");
  }
  EXPECT_FALSE(c.deterministicAlgorithms());
}

TEST(Determinism, AnotherCublasWorkspaceIsAConfigErrorAndChangesNothing) {
  const CublasVar keep;
  setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0", 1);
  try {
    const DeterminismScope on(true, torch::Device(torch::kCUDA, 0), "finetune.deterministic");
    FAIL() << "not refused";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key, "finetune.deterministic");  // the CLI writes "thx: error: <key>: <what>"
    EXPECT_EQ(std::string(e.what()).rfind("true needs cuBLAS's fixed workspace, but CUBLAS_WORKSPACE_CONFIG is "
                                          "\":0:0\"", 0),
              0u)
        << e.what();
  }
  EXPECT_FALSE(at::globalContext().deterministicAlgorithms());
  EXPECT_EQ(std::string(std::getenv("CUBLAS_WORKSPACE_CONFIG")), ":0:0");
}

// put_ without accumulation has no deterministic implementation in ATen (on the CPU too): under
// the scope it throws, and the error becomes one line; outside it runs (the control).
TEST(Determinism, AnOpWithoutADeterministicImplementationIsNamed) {
  const torch::Tensor index = torch::tensor({int64_t{1}, int64_t{1}}), values = torch::tensor({1.0f, 2.0f});
  EXPECT_NO_THROW(torch::zeros({3}).put_(index, values, false));
  std::string what;
  {
    const DeterminismScope on(true, torch::Device(torch::kCPU), "train.deterministic");
    try {
      torch::zeros({3}).put_(index, values, false);
    } catch (const c10::Error& e) {
      what = e.what_without_backtrace();
    }
  }
  ASSERT_FALSE(what.empty()) << "put_ ran under deterministic algorithms";
  EXPECT_EQ(nondeterministic_op(what, "train.deterministic"),
            std::string("train.deterministic: true, but put_ has no deterministic implementation in this LibTorch (") +
                TORCH_VERSION + "); set train.deterministic: false to train with it");
  // ATen's refusal of cuBLAS started without the workspace (its words, Context.cpp), and another error.
  EXPECT_NE(nondeterministic_op("Deterministic behavior was enabled with either `torch.use_deterministic_algorithms"
                                "(True)` or ..., but this operation is not deterministic because it uses CuBLAS and "
                                "you have CUDA >= 10.2.",
                                "train.deterministic")
                .find("cuBLAS started before CUBLAS_WORKSPACE_CONFIG was set to :4096:8"),
            std::string::npos);
  EXPECT_EQ(nondeterministic_op("shape '[2, 3]' is invalid for input of size 5", "train.deterministic"), "");
}

// repeat_check compares bits: a NaN equals the same NaN, -0 is not 0; what differs is counted,
// with the largest difference; lists of other lengths or shapes say so.
TEST(Determinism, RepeatCheckComparesBitsNotValues) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto twice = [](std::vector<torch::Tensor> first, std::vector<torch::Tensor> second) {
    int call = 0;
    return repeat_check([&] { return call++ == 0 ? first : second; });
  };
  const torch::Tensor a = torch::tensor({1.5f, -0.0f, nan, 2.0f}), h = torch::tensor({1.0, 3.0}).to(torch::kBFloat16);
  EXPECT_EQ(twice({a, h}, {a.clone(), h.clone()}), "bitwise");
  EXPECT_EQ(twice({a, h}, {torch::tensor({1.5f, 0.0f, nan, 2.0f}), h}), "differs: 1 of 6 values, the largest by 0");
  EXPECT_EQ(twice({a, h}, {a, torch::tensor({1.0, 3.015625}).to(torch::kBFloat16)}),
            "differs: 1 of 6 values, the largest by 0.0156");
  EXPECT_EQ(twice({a}, {torch::tensor({1.5f, -0.0f, 7.0f, 2.001f})}),
            "differs: 2 of 4 values, the largest by NaN (a NaN against another value)");
  EXPECT_EQ(twice({a}, {a, h}), "differs: 1 tensors, then 2");
  EXPECT_EQ(twice({a, torch::Tensor()}, {a, torch::Tensor()}), "bitwise");
  EXPECT_EQ(twice({a, torch::Tensor()}, {a, h}), "differs: tensor 1 is undefined, then defined");
  EXPECT_EQ(twice({a}, {a.view({2, 2})}), "differs: tensor 0 is Float [4], then Float [2, 2]");
  // A run that draws from the generator repeats only where it reseeds it first (as the bench's does).
  EXPECT_EQ(repeat_check([] { return std::vector<torch::Tensor>{torch::randn({8})}; }).rfind("differs: 8 of 8", 0), 0u);
  EXPECT_EQ(repeat_check([] {
              torch::manual_seed(3);
              return std::vector<torch::Tensor>{torch::randn({8})};
            }),
            "bitwise");
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
