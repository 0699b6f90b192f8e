#include "common/runtime.h"

#include <malloc.h>
#include <torch/torch.h>

#include <thread>

namespace thx {

void configure_runtime(int64_t threads) {
  static bool malloc_done = false;
  if (!malloc_done) {
    mallopt(M_MMAP_MAX, 0);                  // large blocks from the heap, not fresh mmaps
    mallopt(M_TRIM_THRESHOLD, 1L << 62);     // and never hand freed memory back to the OS
    malloc_done = true;
  }
  if (threads <= 0) threads = std::max(1u, std::thread::hardware_concurrency());
  torch::set_num_threads(static_cast<int>(threads));
}

}  // namespace thx
