// test_util.h: helpers shared by the tests: tensor comparison with stated tolerances (the max
// error is printed on failure), running the thx binary, and temporary directories.
#pragma once
#include <gtest/gtest.h>
#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "attention/fused.h"
#include "common/determinism.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/runtime.h"
#include "common/torch_compat.h"

namespace thx::test {

// A test binary that crashes says where (common/runtime.h), once per program.
inline const bool kCrashReport = (install_crash_report(), true);
// And its fp32 matmuls use the OpenBLAS kernels thx uses where OpenBLAS took the CPU for an old
// one (common/runtime.h): the same numbers as the thx it runs, which inherits the setting.
inline const bool kOpenBlasKernels = (reexec_for_openblas_kernels(), true);

// The unit suite on a GPU machine (issue 30): a run that names no device trains on the GPU there
// (--device auto), so the suite's trainings run on CUDA. Two kinds of test need more:
// - A test about the CPU itself (its bf16 check, its profiler, the CPU-only options) names
//   --device cpu in its runs, and runs on any machine.
// - A test that asserts bitwise results of such runs (a resumed run equal bit for bit to an
//   uninterrupted one, runs that must train alike to the bit) trains them under
//   train.deterministic where LibTorch sees a GPU (deterministic_here(); training_fixtures.h's
//   bitwise_runs): CUDA's atomics would add in an order that varies from run to run
//   (common/determinism.h). On the CPU the runs repeat anyway, and the key keeps its default.
inline bool deterministic_here() { return torch::cuda::is_available(); }

// The device a run that names none trains on here (--device auto): cuda:0 on a GPU machine, else
// the CPU. For tests that check what such a run logs or sizes against the device it took.
inline torch::Device run_device() { return resolve_device("auto", "the test's run"); }

// A GPU machine is another system than CI's Debian (Ubuntu, no apt, PyTorch's wheel in its own
// Python): a tool or Python module that scripts/setup.sh installs may be absent there. Why a check
// that needs one cannot run here, where `probe` (a shell command) fails on such a machine; "" where
// it can. Without a GPU it is always "": CI runs setup.sh, and there a missing one must fail.
inline std::string absent_on_gpu_machine(const std::string& probe, const std::string& what) {
  if (!torch::cuda::is_available() || std::system((probe + " > /dev/null 2>&1").c_str()) == 0) return "";
  return what + " is absent on this GPU machine (scripts/setup.sh installs it on CI's machines, which run this check)";
}

// cuBLAS's fixed workspace (common/determinism.h) for this process before its first product: a
// test that trains in-process under train.deterministic on a GPU may come after others that
// started cuBLAS, and ATen reads the variable once. (thx itself sets it where a run asks.)
inline const bool kCublasWorkspace = (setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 0), true);

// From construction to destruction every new CPU tensor's bytes are 0xFF (a NaN in every floating
// type, -1 in every integer type) where the heap would give what was there (fresh pages read 0), so
// that a kernel or composition that reads memory nothing wrote shows it in its results. PyTorch 2.x
// fills new tensors with NaN under deterministic algorithms (fill_uninitialized_memory): what a GPU
// run under train.deterministic meets, checked here on the CPU and its emulator of thx's kernels.
// The wrapping allocator is never destroyed (a storage keeps its allocator for resizes), and outside
// a scope it passes allocations through as they are.
class PoisonedCpuMemory {
 public:
  PoisonedCpuMemory() : previous_(c10::GetCPUAllocator()) {
    ++depth();
    c10::SetCPUAllocator(&poisoner(previous_), 0);
    if (c10::GetCPUAllocator() != &poisoner(previous_)) throw std::logic_error("PoisonedCpuMemory: not installed");
  }
  ~PoisonedCpuMemory() {
    c10::SetCPUAllocator(previous_, 0);
    --depth();
  }
  PoisonedCpuMemory(const PoisonedCpuMemory&) = delete;
  PoisonedCpuMemory& operator=(const PoisonedCpuMemory&) = delete;

 private:
  static std::atomic<int>& depth() {  // (scopes may nest)
    static std::atomic<int> n{0};
    return n;
  }
  static c10::Allocator& poisoner(c10::Allocator* base) {
    auto fill = [](void* p, size_t n) {
      if (depth() > 0) std::memset(p, 0xFF, n);
    };
    static auto* a = new compat::WrappingAllocator<decltype(fill)>(base, fill);  // (the first scope's base)
    return *a;
  }
  c10::Allocator* previous_;
};

// Whether `run` reads memory nothing wrote: its results as the heap gives new memory, then with new
// CPU memory poisoned, must be equal bit for bit (repeat_check, common/determinism.h).
inline ::testing::AssertionResult same_in_poisoned_memory(const std::function<std::vector<torch::Tensor>()>& run) {
  int call = 0;
  const std::string r = repeat_check([&] {
    std::optional<PoisonedCpuMemory> poison;
    if (call++ == 1) poison.emplace();
    return run();
  });
  if (r == "bitwise") return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "in poisoned memory the results " << r;
}

// max |a - b| <= atol + rtol * max |b|, printing the max error and where it is.
inline ::testing::AssertionResult close(const torch::Tensor& a, const torch::Tensor& b,
                                        double atol, double rtol) {
  if (a.sizes() != b.sizes())
    return ::testing::AssertionFailure() << "shapes differ: " << a.sizes() << " vs " << b.sizes();
  const torch::Tensor d = (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs();
  const double err = d.numel() ? d.max().item<double>() : 0.0;
  const double scale = b.numel() ? b.abs().max().item<double>() : 0.0;
  const double tol = atol + rtol * scale;
  if (std::isfinite(err) && err <= tol)
    return ::testing::AssertionSuccess() << "max error " << err << " <= " << tol;
  const int64_t at = d.numel() ? d.flatten().argmax().item<int64_t>() : -1;
  return ::testing::AssertionFailure() << "max error " << err << " > tolerance " << tol
                                       << " (atol " << atol << ", rtol " << rtol << " x max|b| "
                                       << scale << ") at flat index " << at;
}

// A tensor's data as T* (float, thx_bf16, ...): a kernel's argument on the CUDA emulator.
template <typename T>
T* data_as(const torch::Tensor& t) {
  return reinterpret_cast<T*>(t.data_ptr());
}

struct RunResult {
  int code = -1;
  std::string out;  // stdout and stderr together
};

// The Python that runs the independent references (tests/scripts): Debian's /usr/bin/python3
// (scripts/setup.sh gives it torch, numpy and h5py), or THX_TEST_PYTHON (the GPU machine's,
// whose torch is in a virtual environment).
inline std::string test_python() {
  const char* p = std::getenv("THX_TEST_PYTHON");
  return p && *p ? p : "/usr/bin/python3";
}

// The thread-pool environment thx would re-execute itself for (common/runtime.h), set unless it
// is: the thx processes and forked copies (cli/forked_cli.h) the tests start then need no re-exec.
inline void set_thread_environment() {
  setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
  setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);
}

// Run a shell command line, capturing stdout and stderr together.
inline RunResult run_command(const std::string& cmd) {
  set_thread_environment();
  RunResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, got);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Run the thx binary with `args` (a shell-quoted string). The thread-pool environment is set
// (run_command) so that thx does not re-execute itself (common/runtime.h), which would double
// start-up.
inline RunResult run_thx(const std::string& args) {
  return run_command(std::string(THX_BINARY) + " " + args + " 2>&1");
}

// Runs the thx binary with `args` in the background and kills it with SIGKILL as soon as the
// file `path` exists (a first checkpoint). Fails if `path` did not appear within a minute or
// the process had already ended.
inline ::testing::AssertionResult kill_thx_when_exists(const std::string& args, const std::string& path) {
  const std::string cmd = "exec " + std::string(THX_BINARY) + " " + args + " >/dev/null 2>&1";
  const pid_t pid = fork();
  if (pid < 0) return ::testing::AssertionFailure() << "fork failed";
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 12000 && !std::filesystem::exists(path); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!std::filesystem::exists(path)) return ::testing::AssertionFailure() << "no " << path << " within a minute";
  if (!WIFSIGNALED(status)) return ::testing::AssertionFailure() << "the run ended before it was killed; make it longer";
  return ::testing::AssertionSuccess();
}

// A fresh directory under the system temp dir, removed with the object.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    char tmpl[] = "/tmp/thx-test-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { remove_tree(path.string()); }  // (not std::filesystem::remove_all: common/fs.h)
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(file(name)) << text;
    return file(name);
  }
};

// The message of the InputError that f throws; "(no error)" if it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

// A refusal of bad input as the project's standard has it: exit code 2 and one line, starting
// with `who` (say "seed_table.py: ") and naming `says`.
inline ::testing::AssertionResult refused(const RunResult& r, const std::string& who, const std::string& says) {
  const bool one_line = !r.out.empty() && r.out.find('\n') == r.out.size() - 1;
  if (r.code == 2 && one_line && r.out.rfind(who, 0) == 0 && r.out.find(says) != std::string::npos)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "want exit 2 and one line '" << who << "...' naming '" << says
                                       << "'; got exit " << r.code << ":\n" << r.out;
}

// Number of non-empty lines.
inline int lines(const std::string& s) {
  int n = 0;
  bool any = false;
  for (char c : s) {
    if (c == '\n') n += any, any = false;
    else any = true;
  }
  return n + any;
}

// The CPU's bf16 attention core chosen for a scope (attention/fused.h's Bf16Core), then what
// was chosen before.
struct CoreRoute {
  Bf16Core before = bf16_core();
  explicit CoreRoute(Bf16Core c) { set_bf16_core(c); }
  ~CoreRoute() { set_bf16_core(before); }
};

}  // namespace thx::test
