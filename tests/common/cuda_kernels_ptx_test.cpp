// thx's CUDA kernels compile as device code on a machine without CUDA: clang's CUDA mode
// (-nocudainc, cuda_compat.h's second branch) compiles th_kernels.cuh, th_rows_kernels.cuh,
// th_rows_tc_kernels.cuh, th_softmax_kernels.cuh, th_mix_kernels.cuh, rms_norm_kernels.cuh,
// loss_kernels.cuh and adafactor_kernels.cuh for sm_80 to PTX with
// -Wall -Wextra -Werror,
// and the PTX has every instantiation nvcc builds: the fused talking-heads forward and backward in
// fp32, bf16 and bf16 on tensor cores, the row kernels' for each dtype and bucket of heads (and
// bf16 on tensor cores for three), the flash kernels', the softmax's for each dtype, cache and
// pairing, the heads-major mixings' and their gradients' for each dtype and pairing, the RMS
// norm's for each pair of x and y dtypes, the loss's forward and backward for
// each dtype of the logits, and Adafactor's five. PTX 7.0
// (CUDA 11's) is asked for: the warp shuffles need PTX 6.0 or later, and clang cannot tell the
// version from a CUDA it does not have.
// This catches a syntax or type error in device code before a GPU session's nvcc does. clang 14
// knows sm_80, not the H100's sm_90; the kernels use nothing that differs but the vector
// reduction, which sm_80 takes as four atomics (cuda_compat.h). Skips, saying so,
// where clang++ or its NVPTX back end is missing.
//
// Where nvcc is found (this project's machines have CUDA 13 at /usr/local/cuda, without a GPU),
// every .cu file of src/ and tests/ is compiled as the GPU build compiles its device code (C++17,
// sm_90, to a cubin), against the headers of the LibTorch this build used: ptxas must report every
// kernel, none spilling registers or with a stack frame (an array in local memory). The device
// pass's front end checks the host functions' types too (a type error in a host function, and in
// a host template the file instantiates, each failed it: tried once each); GCC's compile of the
// host half (more than half of nvcc's time, 18 of Adafactor's 29 s) is left to
// scripts/cuda_build_check.sh, which builds every object of the CUDA build before a GPU session.
// Debian's CPU LibTorch lacks one generated header of c10's CUDA half
// (cuda_cmake_macros.h); the test writes one, found only where the LibTorch has none. No kernel
// of these objects may be defined for the linker by this CPU build's test binary too (an emulated
// kernel with external linkage), which would stop a CUDA build's link of thx_tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <set>
#include <sstream>

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
                       "#include \"attention/cuda/th_rows_kernels.cuh\"\n"
                       "#include \"attention/cuda/th_rows_tc_kernels.cuh\"\n"
                       "#include \"attention/cuda/th_flash_backward.cuh\"\n"
                       "#include \"attention/cuda/th_softmax_kernels.cuh\"\n"
                       "#include \"attention/cuda/th_mix_kernels.cuh\"\n"
                       "#include \"models/rms_norm_kernels.cuh\"\n"
                       "#include \"models/loss_kernels.cuh\"\n"
                       "#include \"training/adafactor_kernels.cuh\"\n"
                       "namespace thx::cuda_th {\n"
                       "template __global__ void forward_kernel<float>(Args<float>);\n"
                       "template __global__ void forward_kernel<thx_bf16>(Args<thx_bf16>);\n"
                       "template __global__ void forward_kernel<thx_bf16, true>(Args<thx_bf16>);\n"
                       "template __global__ void backward_kernel<float>(Args<float>);\n"
                       "template __global__ void backward_kernel<thx_bf16>(Args<thx_bf16>);\n"
                       "template __global__ void backward_kernel<thx_bf16, true>(Args<thx_bf16>);\n"
                       "}\n"
                       "namespace thx::cuda {\n"
                       "#define RMS(X, Y) \\\n"
                       "  template __global__ void rms_forward_kernel<X, Y>(const X*, const float*, Y*, float*, \\\n"
                       "                                                    int64_t); \\\n"
                       "  template __global__ void rms_backward_kernel<X, Y>(const X*, const float*, const float*, \\\n"
                       "                                                     const Y*, X*, float*, int64_t, int64_t);\n"
                       "RMS(float, float) RMS(float, thx_bf16) RMS(thx_bf16, float) RMS(thx_bf16, thx_bf16)\n"
                       "#define CE(X) template __global__ void ce_forward_kernel<X>(const X*, const int64_t*, \\\n"
                       "  float*, float*, float*, int64_t); template __global__ void ce_backward_kernel<X>( \\\n"
                       "  const X*, const int64_t*, const float*, const float*, float, X*, int64_t);\n"
                       "CE(float) CE(thx_bf16)\n"
                       "}\n"
                       "namespace thx::cuda_th::rows {\n"
                       "#define ROWS(T, H) template __global__ void rows_forward_kernel<T, H>(RowsArgs<T>); \\\n"
                       "  template __global__ void rows_backward_kernel<T, H>(RowsArgs<T>);\n"
                       "ROWS(float, 16) ROWS(float, 32) ROWS(float, 48) ROWS(float, 64)\n"
                       "ROWS(thx_bf16, 16) ROWS(thx_bf16, 32) ROWS(thx_bf16, 48) ROWS(thx_bf16, 64)\n"
                       "}\n"
                       "namespace thx::cuda_th::rows_tc {\n"
                       "#define TC(H) template __global__ void rows_tc_forward_kernel<H>(RowsArgs<thx_bf16>); \\\n"
                       "  template __global__ void rows_tc_backward_kernel<H>(RowsArgs<thx_bf16>);\n"
                       "TC(16) TC(32) TC(48)\n"
                       "}\n"
                       "namespace thx::cuda_th::flash {\n"
                       "#define FLASH(H, DV) template __global__ void flash_forward_kernel<H, DV>(FlashArgs<thx_bf16>);\n"
                       "FLASH(16, 16) FLASH(16, 32) FLASH(16, 64) FLASH(32, 16) FLASH(32, 32) FLASH(48, 16)\n"
                       "}\n"
                       "namespace thx::cuda_th::flash_back {\n"
                       "#define BACK(H, D) template __global__ void flash_backward_kernel<H, D, false>(\\\n"
                       "  FlashBackArgs<thx_bf16>); template __global__ void flash_backward_kernel<H, D, true>(\\\n"
                       "  FlashBackArgs<thx_bf16>);\n"
                       "BACK(16, 16) BACK(16, 32) BACK(16, 64) BACK(32, 16) BACK(32, 32) BACK(48, 16)\n"
                       "}\n"
                       "namespace thx::cuda_th::softmax {\n"
                       "#define SOFTMAX(T, C, P) template __global__ void softmax_kernel<T, C, P>(RowsArgs<T>);\n"
                       "#define SOFTMAXES(T) SOFTMAX(T, 0, false) SOFTMAX(T, 16, false) SOFTMAX(T, 32, false) \\\n"
                       "  SOFTMAX(T, 0, true) SOFTMAX(T, 16, true) SOFTMAX(T, 64, true)\n"
                       "SOFTMAXES(float) SOFTMAXES(thx_bf16)\n"
                       "}\n"
                       "namespace thx::cuda_th::heads_mix {\n"
                       "#define MIX(T, P) template __global__ void mix_kernel<T, P>(MixArgs<T>); \\\n"
                       "  template __global__ void mix_grad_kernel<T, P>(MixArgs<T>);\n"
                       "MIX(float, false) MIX(float, true) MIX(thx_bf16, false) MIX(thx_bf16, true)\n"
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
  EXPECT_EQ(entries, 6 + 8 + 4 + 16 + 6 + 6 + 12 + 12 + 5 + 8) << text.substr(0, 2000);
}

// -I of the LibTorch this build used, where its headers are not in a system folder (a PyTorch
// wheel's: <prefix>/share/cmake/Torch -> <prefix>/include); Debian's are in /usr/include.
std::string torch_include() {
  std::ifstream cache(std::string(THX_BUILD_DIR) + "/CMakeCache.txt");
  for (std::string line; std::getline(cache, line);)
    if (line.rfind("Torch_DIR:", 0) == 0) {
      const fs::path inc = fs::path(line.substr(line.find('=') + 1)) / "../../../include";
      if (fs::exists(inc / "ATen/ATen.h")) return " -I" + fs::canonical(inc).string();
    }
  return "";
}

// The folder of the one generated header of c10's CUDA half that Debian's CPU LibTorch lacks
// (scripts/cuda_build_check.sh's too), after the LibTorch's: found only where it has none.
const std::string kStandIn = std::string(THX_SOURCE_DIR) + "/cmake/stand-in";

std::string nvcc() {
  if (run_command("nvcc --version > /dev/null 2>&1").code == 0) return "nvcc";
  if (fs::exists("/usr/local/cuda/bin/nvcc")) return "/usr/local/cuda/bin/nvcc";
  return "";
}

#ifdef THX_CUDA_KERNELS
constexpr bool kBuiltWithTheseObjects = true;
#else
constexpr bool kBuiltWithTheseObjects = false;
#endif

TEST(CudaKernels, NvccCompilesEveryCuFileForSm90) {
  const std::string compiler = nvcc();
  if (compiler.empty()) GTEST_SKIP() << "no nvcc on PATH or in /usr/local/cuda/bin";
  TempDir dir;
  std::vector<fs::path> sources;
  for (const char* tree : {"/src", "/tests"})
    for (const auto& e : fs::recursive_directory_iterator(std::string(THX_SOURCE_DIR) + tree))
      if (e.path().extension() == ".cu") sources.push_back(e.path());
  ASSERT_GE(sources.size(), 3u);
  const std::string flags = " -std=c++17 -arch=sm_90 -Xptxas -v -I" + std::string(THX_SOURCE_DIR) + "/src -I" +
                            std::string(THX_SOURCE_DIR) + "/tests" + torch_include() + " -I" + kStandIn;
  std::string jobs;  // the files side by side: nvcc spends most of its time in LibTorch's headers
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::string out = (dir.path / std::to_string(i)).string();
    jobs += compiler + flags + " -cubin " + sources[i].string() + " -o " + out + ".cubin > " + out + ".log 2>&1 & ";
    jobs += "pids=\"$pids $!\"; ";
  }
  const RunResult r = run_command(jobs + "rc=0; for p in $pids; do wait $p || rc=1; done; exit $rc");
  ASSERT_EQ(r.code, 0) << r.out;
  int kernels = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    SCOPED_TRACE(sources[i].string());
    const std::string log = read_file(dir.path / (std::to_string(i) + ".log"));
    EXPECT_TRUE(fs::exists(dir.path / (std::to_string(i) + ".cubin"))) << log;
    for (size_t at = log.find("Compiling entry function"); at != std::string::npos;
         at = log.find("Compiling entry function", at + 1))
      ++kernels;
    EXPECT_EQ(log.find("error"), std::string::npos) << log;
    std::istringstream lines(log);
    for (std::string line; std::getline(lines, line);)
      if (line.find("spill stores") != std::string::npos) {
        EXPECT_NE(line.find(" 0 bytes spill stores"), std::string::npos) << line;
        // nor an array in local memory (a register array indexed by a value known only at run time)
        EXPECT_NE(line.find(" 0 bytes stack frame"), std::string::npos) << line;
      }
  }
  // fused talking-heads fwd/bwd x fp32/bf16/bf16 on tensor cores; RMS norm 2 x 4; the loss fwd/bwd x
  // fp32/bf16; the tiled path's row
  // kernels fwd/bwd x fp32/bf16 x 4 buckets of heads, and on tensor cores fwd/bwd x 3 buckets; the
  // flash forward x 6 buckets, and its backward's two passes x 6; the softmax x fp32/bf16 x 3 caches x
  // keys in pairs or not; Adafactor's group update (reduce, average, stats, finish_stats, apply); the
  // heads-major mixing and its gradient x fp32/bf16 x positions in pairs or not; the primitives'
  // probe (tests/common)
  EXPECT_EQ(kernels, 6 + 8 + 4 + 16 + 6 + 6 + 12 + 12 + 5 + 8 + 1);
  // No kernel is defined for the linker by this binary too (the CPU build's thx_tests: thx's
  // libraries, and the tests with the kernels they emulate, which a CUDA build's thx_tests links
  // beside these objects, where each kernel is also its host stub's name). A kernel defined
  // strongly in both stops that link: Adafactor's did, emulated with external linkage
  // (common/cuda_compat.h). Weak and local definitions meet no conflict.
  std::set<std::string> here;
  std::istringstream symbols(run_command("nm -g --defined-only " + fs::read_symlink("/proc/self/exe").string()).out);
  for (std::string line; std::getline(symbols, line);) {
    std::istringstream fields(line);
    std::string address, type, name;
    if (fields >> address >> type >> name && (type == "T" || type == "D" || type == "B" || type == "R"))
      here.insert(name);
  }
  ASSERT_GT(here.size(), 1000u) << "nm read too few of this binary's symbols";
  if (kBuiltWithTheseObjects) return;  // (a CUDA build's thx_tests holds them: there its link is the check)
  int checked = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::string log = read_file(dir.path / (std::to_string(i) + ".log"));
    const std::regex entry("Compiling entry function '([^']+)'");
    for (std::sregex_iterator m(log.begin(), log.end(), entry), end; m != end; ++m, ++checked)
      EXPECT_EQ(here.count((*m)[1].str()), 0u) << sources[i].string() << " and this binary both define the kernel "
                                               << (*m)[1].str();
  }
  EXPECT_EQ(checked, kernels);
}

// The host code that only a CUDA build compiles: the blocks of src/ and tests/ under `#if THX_CUDA`
// or `#ifdef THX_CUDA_KERNELS` (the loss's and RMS norm's autograd functions, Adafactor's and the
// attention paths' routing to thx's kernels, the GPU's memory statistics, the primitives' probe).
// Nothing here compiles them otherwise, so a slip in one would first show in a GPU session's
// build, where the whole session's kernels are then lost to the build without them. Each is
// compiled here with this build's compiler and both macros set, against this build's LibTorch
// (Debian's 1.13 has c10's and ATen's CUDA headers) and CUDA's own headers (nvcc's, without a
// GPU): syntax and types, -Werror (but for the kernels' `#pragma unroll`, which only nvcc
// knows and the build's GCC warns of). What differs in LibTorch 2.x is in torch_compat.h, which the
// GPU build compiles. Each src file is a unit of its own (two would clash on helpers of the same
// name, which the unity build batches apart); the test files, whose names live in THX_FILE_ID,
// are one unit together.
std::string cuda_include() {
  std::vector<fs::path> dirs{"/usr/local/cuda/include"};
  std::string on_path = run_command("command -v nvcc").out;  // nvcc's own, where one is on PATH
  while (!on_path.empty() && on_path.back() == '\n') on_path.pop_back();
  if (!on_path.empty()) dirs.push_back(fs::path(on_path).parent_path() / "../include");
  for (const fs::path& dir : dirs)
    if (fs::exists(dir / "cuda_runtime_api.h")) return fs::canonical(dir).string();
  return "";
}

std::vector<fs::path> cuda_guarded_files(const char* tree) {
  static const std::regex guard(R"(#\s*if(n?def)?\s+!?\s*(defined\s*\(\s*)?THX_CUDA(_KERNELS)?\b)");
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(std::string(THX_SOURCE_DIR) + tree))
    if (e.path().extension() == ".cpp" && !fs::equivalent(e.path(), __FILE__) &&  // (this file's are the skip)
        std::regex_search(read_file(e.path()), guard))
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

TEST(CudaHostCode, GuardedBlocksCompileWithCuda) {
#if defined(THX_CUDA) || defined(THX_CUDA_KERNELS)
  GTEST_SKIP() << "this build compiles them itself (a LibTorch with CUDA)";
#endif
  const std::string cuda = cuda_include();
  if (cuda.empty()) GTEST_SKIP() << "no CUDA headers (cuda_runtime_api.h) in /usr/local/cuda/include or beside nvcc";
  const auto src = cuda_guarded_files("/src"), tests = cuda_guarded_files("/tests");
  // Where the blocks are today: six files of src/, one test (the search must find them, or this
  // test checks nothing).
  ASSERT_GE(src.size(), 6u) << "the search for `#if THX_CUDA` found too few";
  ASSERT_GE(tests.size(), 1u) << "the search for `#if THX_CUDA` found too few";
  TempDir dir;
  std::vector<fs::path> units = src;
  {
    std::ofstream all(dir.path / "tests.cpp");
    for (size_t i = 0; i < tests.size(); ++i)
      all << "#undef THX_FILE_ID\n#define THX_FILE_ID cuda_host_" << i << "\n#include \"" << tests[i].string()
          << "\"\n";
    units.push_back(dir.path / "tests.cpp");
  }
  const std::string source(THX_SOURCE_DIR);
  const std::string flags =
      " -std=gnu++17 -fsyntax-only -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas -Werror"
      " -DTHX_CUDA=1 -DTHX_CUDA_KERNELS=1 -DTHX_BUILD_DIR='\"" THX_BUILD_DIR "\"' -DTHX_BINARY='\"" THX_BINARY "\"'"
      " -DTHX_SOURCE_DIR='\"" + source + "\"' -I" + source + "/tests " THX_TORCH_INCLUDES + torch_include() +
      " -isystem " + cuda + " -isystem " + kStandIn;
  std::string jobs;
  for (size_t i = 0; i < units.size(); ++i) {
    // A src file sees what its library's build sees: its layer's view of src/ (CMakeLists.txt,
    // thx_layer_view), so that an include pointing up fails here as it would there.
    fs::path view = source + "/src";
    if (i < src.size()) {
      const fs::path layer = fs::path(THX_BUILD_DIR) / "layers" / *fs::relative(units[i], view).begin();
      if (fs::is_directory(layer)) view = layer;
    }
    const std::string log = (dir.path / (std::to_string(i) + ".log")).string();
    jobs += THX_CXX_COMPILER + flags + " -I" + view.string() + " " + units[i].string() + " > " + log + " 2>&1 & ";
    jobs += "pids=\"$pids $!\"; ";
  }
  const RunResult r = run_command(jobs + "rc=0; for p in $pids; do wait $p || rc=1; done; exit $rc");
  for (size_t i = 0; i < units.size(); ++i) {
    const std::string log = read_file(dir.path / (std::to_string(i) + ".log"));
    EXPECT_TRUE(log.empty()) << (i < src.size() ? units[i].string() : "the tests' blocks") << ":\n" << log;
  }
  EXPECT_EQ(r.code, 0);
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
