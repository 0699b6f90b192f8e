// runtime.h: process-wide settings that decide CPU speed, applied once at startup.
//
// - Threads: LibTorch's OpenMP pool may start with one thread (seen on Debian 12 VMs), so thx
//   sets the intra-op thread count explicitly (default: every core).
// - Memory: glibc serves allocations above 32 MB with mmap and unmaps them on free, so every
//   [b,h,n,m] attention tensor would be fresh memory, paid for in page faults on first touch
//   (measured: softmax over [2,24,512,512] 26 ms with them, 7 ms without). thx keeps freed
//   memory in the heap for reuse instead. Peak RSS then stays at its high-water mark.
#pragma once
#include <cstdint>

namespace thx {

// threads <= 0: all hardware threads.
void configure_runtime(int64_t threads = 0);

}  // namespace thx
