#include "common/runtime.h"

#include <dlfcn.h>
#include <malloc.h>
#include <torch/torch.h>

#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdlib>
#include <thread>

namespace thx {

namespace {
std::atomic<bool> g_cpu_kernels{true};
}  // namespace

bool cpu_kernels_enabled() { return g_cpu_kernels; }
void set_cpu_kernels(bool enabled) { g_cpu_kernels = enabled; }

void configure_runtime(int64_t threads) {
  static bool malloc_done = false;
  if (!malloc_done) {
    mallopt(M_MMAP_MAX, 0);                  // large blocks from the heap, not fresh mmaps
    mallopt(M_TRIM_THRESHOLD, INT_MAX);      // and keep up to 2 GB of freed memory
    malloc_done = true;
  }
  if (threads <= 0) {
    // Under torchrun, the node's cores are shared by its LOCAL_WORLD_SIZE ranks.
    int64_t local = 1;
    if (const char* v = std::getenv("LOCAL_WORLD_SIZE")) local = std::max<int64_t>(1, std::atoll(v));
    threads = std::max<int64_t>(1, int64_t(std::thread::hardware_concurrency()) / local);
  }
  torch::set_num_threads(static_cast<int>(threads));
  // ATen's thread count does not reach a pthreads OpenBLAS, which would otherwise use every
  // core whatever --threads says (two sweep jobs of one thread each would then fight over
  // both cores).
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
    set(static_cast<int>(threads));
}

}  // namespace thx

namespace thx {

void reexec_with_thread_environment(char** argv) {
  bool changed = false;
  for (auto [key, value] : {std::pair{"OMP_WAIT_POLICY", "PASSIVE"},
                            std::pair{"OPENBLAS_THREAD_TIMEOUT", "4"}})
    if (!std::getenv(key)) {
      ::setenv(key, value, 1);
      changed = true;
    }
  if (changed) ::execv("/proc/self/exe", argv);  // returns only on failure: run as we are
}

}  // namespace thx
