// thx's CUDA kernels compile as device code on a machine without CUDA: clang's CUDA mode
// (-nocudainc, cuda_compat.h's second branch) compiles th_kernels.cuh and rms_norm_kernels.cuh for
// sm_80 to PTX with -Wall -Wextra -Werror, and the PTX has every instantiation nvcc builds: the
// fused talking-heads forward and backward in fp32 and bf16, and the RMS norm's for each pair
// of x and y dtypes. PTX 7.0 (CUDA 11's) is asked for: the warp shuffles need PTX 6.0 or later,
// and clang cannot tell the version from a CUDA it does not have.
// This catches a syntax or type error in device code before a GPU session's nvcc does. clang 14
// knows sm_80, not the H100's sm_90; the kernels use nothing that differs. Skips, saying so,
// where clang++ or its NVPTX back end is missing.
#include <gtest/gtest.h>

#include "common/fs.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

namespace fs = std::filesystem;

TEST(CudaKernels, CompileToPtxWithClang) {
  if (run_command("clang++ --version > /dev/null 2>&1").code != 0) GTEST_SKIP() << "no clang++ on PATH";
  if (run_command("clang++ -print-targets 2>/dev/null | grep -q nvptx64").code != 0)
    GTEST_SKIP() << "clang++ has no NVPTX back end";
  TempDir dir;
  const fs::path cu = dir.path / "th.cu", ptx = dir.path / "th.ptx";
  std::ofstream(cu) << "#include \"attention/cuda/th_kernels.cuh\"\n"
                       "#include \"models/rms_norm_kernels.cuh\"\n"
                       "namespace thx::cuda_th {\n"
                       "template __global__ void forward_kernel<float>(Args<float>);\n"
                       "template __global__ void forward_kernel<thx_bf16>(Args<thx_bf16>);\n"
                       "template __global__ void backward_kernel<float>(Args<float>);\n"
                       "template __global__ void backward_kernel<thx_bf16>(Args<thx_bf16>);\n"
                       "}\n"
                       "namespace thx::cuda {\n"
                       "#define RMS(X, Y) \\\n"
                       "  template __global__ void rms_forward_kernel<X, Y>(const X*, const float*, Y*, float*, \\\n"
                       "                                                    int64_t); \\\n"
                       "  template __global__ void rms_backward_kernel<X, Y>(const X*, const float*, const float*, \\\n"
                       "                                                     const Y*, X*, float*, int64_t, int64_t);\n"
                       "RMS(float, float) RMS(float, thx_bf16) RMS(thx_bf16, float) RMS(thx_bf16, thx_bf16)\n"
                       "}\n";
  const RunResult r = run_command("clang++ -std=c++17 -x cuda --cuda-device-only -nocudainc -nocudalib "
                                  "--cuda-gpu-arch=sm_80 -Xclang -target-feature -Xclang +ptx70 "
                                  "-Wno-unknown-cuda-version -Wall -Wextra -Werror -I" +
                                  std::string(THX_SOURCE_DIR) + "/src -S -o " + ptx.string() + " " + cu.string() +
                                  " 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string text = read_file(ptx);
  int entries = 0;
  for (size_t at = text.find(".entry"); at != std::string::npos; at = text.find(".entry", at + 1)) ++entries;
  EXPECT_EQ(entries, 4 + 8) << text.substr(0, 2000);
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
