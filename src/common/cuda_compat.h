// cuda_compat.h: the few CUDA names thx's portable kernels (attention/cuda/th_kernels.cuh,
// models/rms_norm_kernels.cuh) use, for three compilers:
//  - nvcc (__CUDACC__): CUDA itself; the kernels run on the GPU.
//  - clang's CUDA mode without CUDA's headers (__CUDA__, -nocudainc): the device code compiles
//    to PTX on a machine without CUDA (tests/common/cuda_kernels_ptx_test.cpp), so that a syntax
//    or type error shows before a GPU session; the math there is approximate and never run.
//  - a plain C++ compiler: an emulator, so the kernels' logic is tested on the CPU. A launch runs
//    one thread block at a time, each CUDA thread a fiber taking turns in a fixed order (or an OS
//    thread, all at once), __syncthreads() a barrier among them, dynamic shared memory one buffer
//    per block; two orders show races (emu::Order). Slow, exact: for tests at small sizes only.
// The kernels use: threadIdx.x, blockIdx.{x,y}, blockDim.x, gridDim.x, __syncthreads(), dynamic
// shared memory (THX_SHARED), fixed shared arrays (THX_STATIC_SHARED), the most threads a block
// is launched with and the fewest blocks a multiprocessor must hold at once (THX_LAUNCH_BOUNDS:
// registers are allocated to fit them), a loop unrolled on the GPU only (THX_UNROLL), a warp's
// butterfly shuffle (thx_shfl_xor, every lane of the warp taking part) and barrier
// (thx_syncwarp), atomicAdd on float and on four adjacent floats (thx_atomic_add4: one vector
// reduction on sm_90, 16-byte aligned), an aligned 4-byte load (thx_load_word), an aligned 8-byte
// load (thx_load8) and 4-byte store (thx_store_word), aligned 16-byte copies and zeros
// (thx_copy16, thx_zero16), 16-byte copies from global to shared memory that land later
// (thx_cp_async16, committed in groups and waited for: PTX's cp.async), the high word of a 32-bit
// product (thx_umulhi), the math below, and bf16 as bits (bf16_bits.h) with its conversions.
#pragma once
#include <cstdint>

#include "common/bf16_bits.h"

// Sixteen bytes, aligned as a vector load or store needs them (nvcc: ld/st .v4.u32).
struct alignas(16) ThxBytes16 {
  uint32_t w[4];
};
// Eight bytes, aligned as a vector load needs them (nvcc: ld .v2.u32).
struct alignas(8) ThxBytes8 {
  uint32_t w[2];
};

#if defined(__CUDACC__)  // nvcc
#define THX_DEVICE __device__ __forceinline__
#define THX_SHARED(name) extern __shared__ __align__(16) unsigned char name[]
#define THX_STATIC_SHARED __shared__
#define THX_LAUNCH_BOUNDS(threads, blocks) __launch_bounds__(threads, blocks)
#define THX_UNROLL _Pragma("unroll")
THX_DEVICE float thx_exp(float x) { return expf(x); }
// exp where a relative error of a few units of 2^-23 is far below what else rounds (the bf16
// kernels' weights, rounded to bf16 after): CUDA's __expf, ex2.approx.ftz of x log2(e), two
// instructions against expf's eight or so. Its error, by the CUDA C++ Programming Guide's table
// of intrinsic functions: at most 2 + floor(|1.173 x|) ulps; results below 2^-126 flush to +0.
THX_DEVICE float thx_exp_fast(float x) { return __expf(x); }
THX_DEVICE float thx_rsqrt(float x) { return rsqrtf(x); }
THX_DEVICE float thx_shfl_xor(float v, int lane_mask) { return __shfl_xor_sync(0xffffffffu, v, lane_mask); }
THX_DEVICE void thx_syncwarp() { __syncwarp(); }
THX_DEVICE float thx_log(float x) { return logf(x); }
THX_DEVICE float thx_fmax(float a, float b) { return fmaxf(a, b); }
THX_DEVICE float thx_inf() { return __int_as_float(0x7f800000); }
THX_DEVICE float thx_bits_to_float(uint32_t u) { return __uint_as_float(u); }
THX_DEVICE uint32_t thx_float_to_bits(float f) { return __float_as_uint(f); }
THX_DEVICE void thx_atomic_add(float* p, float v) { atomicAdd(p, v); }
// p[0..3] += v0..v3 for p in global memory, 16-byte aligned: on sm_90 one vector reduction (PTX
// ISA 8.1, red.global.add.v4.f32), which L2 takes as one transaction; elsewhere four atomics.
THX_DEVICE void thx_atomic_add4(float* p, float v0, float v1, float v2, float v3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v0), "f"(v1), "f"(v2), "f"(v3)
               : "memory");
#else
  atomicAdd(p, v0), atomicAdd(p + 1, v1), atomicAdd(p + 2, v2), atomicAdd(p + 3, v3);
#endif
}
THX_DEVICE uint32_t thx_load_word(const void* p) { return *static_cast<const uint32_t*>(p); }
THX_DEVICE ThxBytes8 thx_load8(const void* p) { return *static_cast<const ThxBytes8*>(p); }
THX_DEVICE void thx_store_word(void* p, uint32_t v) { *static_cast<uint32_t*>(p) = v; }
THX_DEVICE void thx_copy16(void* to, const void* from) {
  *static_cast<ThxBytes16*>(to) = *static_cast<const ThxBytes16*>(from);
}
THX_DEVICE void thx_zero16(void* to) { *static_cast<ThxBytes16*>(to) = ThxBytes16{{0u, 0u, 0u, 0u}}; }
THX_DEVICE uint32_t thx_umulhi(uint32_t a, uint32_t b) { return __umulhi(a, b); }
// x, as a value the compiler must take where it stands (an empty asm it cannot see through): what is
// worked out from it inside a loop is not hoisted out and kept in registers across the loop.
THX_DEVICE int thx_opaque(int x) {
  asm volatile("" : "+r"(x));
  return x;
}

#elif defined(__CUDA__)  // clang -x cuda -nocudainc: the PTX compile check
#include <__clang_cuda_builtin_vars.h>
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define THX_DEVICE __attribute__((device)) inline
#define THX_SHARED(name) extern __attribute__((shared)) __attribute__((aligned(16))) unsigned char name[]
#define THX_STATIC_SHARED __attribute__((shared))
#define THX_LAUNCH_BOUNDS(threads, blocks) __attribute__((launch_bounds(threads, blocks)))
#define THX_UNROLL _Pragma("unroll")
extern "C" __device__ void __syncthreads() __asm__("llvm.nvvm.barrier0");
THX_DEVICE float thx_exp(float x) { return __nvvm_ex2_approx_f(x * 1.44269504f); }
THX_DEVICE float thx_exp_fast(float x) { return __nvvm_ex2_approx_f(x * 1.44269504f); }
THX_DEVICE float thx_rsqrt(float x) { return __nvvm_rsqrt_approx_f(x); }
THX_DEVICE float thx_shfl_xor(float v, int lane_mask) {
  return __nvvm_shfl_sync_bfly_f32(0xffffffffu, v, lane_mask, 0x1f);
}
THX_DEVICE void thx_syncwarp() { __nvvm_bar_warp_sync(0xffffffffu); }
THX_DEVICE float thx_log(float x) { return __nvvm_lg2_approx_f(x) * 0.693147181f; }
THX_DEVICE float thx_fmax(float a, float b) { return __nvvm_fmax_f(a, b); }
THX_DEVICE float thx_inf() { return __builtin_huge_valf(); }
THX_DEVICE float thx_bits_to_float(uint32_t u) { return __builtin_bit_cast(float, u); }
THX_DEVICE uint32_t thx_float_to_bits(float f) { return __builtin_bit_cast(uint32_t, f); }
THX_DEVICE void thx_atomic_add(float* p, float v) { __nvvm_atom_add_gen_f(p, v); }
THX_DEVICE void thx_atomic_add4(float* p, float v0, float v1, float v2, float v3) {  // sm_80 here: four
  __nvvm_atom_add_gen_f(p, v0), __nvvm_atom_add_gen_f(p + 1, v1);
  __nvvm_atom_add_gen_f(p + 2, v2), __nvvm_atom_add_gen_f(p + 3, v3);
}
THX_DEVICE uint32_t thx_load_word(const void* p) { return *static_cast<const uint32_t*>(p); }
THX_DEVICE ThxBytes8 thx_load8(const void* p) { return *static_cast<const ThxBytes8*>(p); }
THX_DEVICE void thx_store_word(void* p, uint32_t v) { *static_cast<uint32_t*>(p) = v; }
THX_DEVICE void thx_copy16(void* to, const void* from) {
  *static_cast<ThxBytes16*>(to) = *static_cast<const ThxBytes16*>(from);
}
THX_DEVICE void thx_zero16(void* to) { *static_cast<ThxBytes16*>(to) = ThxBytes16{{0u, 0u, 0u, 0u}}; }
THX_DEVICE uint32_t thx_umulhi(uint32_t a, uint32_t b) { return __nvvm_mulhi_ui(a, b); }
THX_DEVICE int thx_opaque(int x) {
  asm volatile("" : "+r"(x));
  return x;
}

#else  // the host emulator
#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <sys/mman.h>
#include <ucontext.h>

// An emulated kernel is its translation unit's own (internal linkage). In a CUDA build the same
// binary links nvcc's objects, whose host stub of a kernel that is not a template is an external
// function of the kernel's own name: with external linkage here too, the emulator's tests and the
// .cu file defined Adafactor's kernels twice, and the CUDA build's thx_tests did not link
// (scripts/cuda_build_check.sh found it). Template kernels met no error (nvcc's stubs of their
// instantiations are local), and are now the unit's own as well.
#define __global__ static
#define THX_DEVICE inline
#define THX_SHARED(name) unsigned char* name = ::thx::emu::shared_memory()
// One copy for the block running now (blocks run one at a time): a function's static.
#define THX_STATIC_SHARED static
#define THX_LAUNCH_BOUNDS(threads, blocks)
// A loop a GPU's compiler must unroll (registers indexed by its counter), left a loop here: where
// its body calls the emulator's warp shuffle, clang finds the unrolled loop too large and warns.
#define THX_UNROLL

namespace thx::emu {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// The order a launch's threads run in (launch_order()): one at a time as fibers of the launching
// thread, each until it waits at a barrier or ends, the next being the lowest (ascending, the
// default) or highest (descending) thread id not waiting; or all at once as OS threads
// (concurrent). A kernel that reads another thread's shared memory without a barrier between, or
// overwrites it before the other has read it, gives different results in the two serialized
// orders: one of them sees bytes that are not there on the GPU at some moment (the tests' race
// check, the emulator's counterpart of compute-sanitizer's racecheck; CTest runs each emulator
// suite in both). Set by ScopedOrder, or for a test binary by THX_EMU_ORDER.
enum class Order { concurrent, ascending, descending };
inline std::atomic<int> g_order{-1};  // -1: THX_EMU_ORDER, else ascending

inline Order launch_order() {
  const int o = g_order.load();
  if (o >= 0) return Order(o);
  const char* env = std::getenv("THX_EMU_ORDER");
  const std::string e = env ? env : "";
  if (e.empty() || e == "ascending") return Order::ascending;
  if (e == "concurrent") return Order::concurrent;
  if (e == "descending") return Order::descending;
  std::fprintf(stderr, "THX_EMU_ORDER=%s: allowed are concurrent, ascending, descending\n", env);
  std::exit(2);
}

// The launches in this scope run in `order`.
class ScopedOrder {
 public:
  explicit ScopedOrder(Order order) : before_(g_order.exchange(int(order))) {}
  ~ScopedOrder() { g_order.store(before_); }
  ScopedOrder(const ScopedOrder&) = delete;
  ScopedOrder& operator=(const ScopedOrder&) = delete;

 private:
  int before_;
};

class Barrier;
struct Warp;
class Turns;

// A block's dynamic shared memory: `bytes` filled with NaN bytes before each block, between two
// guard zones that a kernel must leave as they are (check(): a write past either end, which on a
// GPU compute-sanitizer's memcheck reports, stops the launch).
class SharedMemory {
 public:
  explicit SharedMemory(size_t bytes) : buffer_(bytes + 2 * kGuard), bytes_(bytes) {}
  unsigned char* data() { return buffer_.data() + kGuard; }
  size_t size() const { return bytes_; }
  void reset() {
    std::fill(buffer_.begin(), buffer_.end(), kGuardByte);
    std::fill(data(), data() + bytes_, static_cast<unsigned char>(0xff));
  }
  void check() const {
    for (size_t i = 0; i < buffer_.size(); i = i + 1 == kGuard ? kGuard + bytes_ : i + 1)  // the guards alone
      if (buffer_[i] != kGuardByte) {
        std::fprintf(stderr, "emulator: a kernel wrote byte %td of a block's %zu bytes of shared memory (outside them;"
                     " a GPU faults here)\n", ptrdiff_t(i) - ptrdiff_t(kGuard), bytes_);
        std::abort();
      }
  }

 private:
  static constexpr size_t kGuard = 256;  // (a multiple of 16: the data stays 16-byte aligned)
  static constexpr unsigned char kGuardByte = 0xa5;
  std::vector<unsigned char> buffer_;
  size_t bytes_;
};

// A thread's copies by thx_cp_async16 not yet landed: each with its 16 bytes, read as it was issued
// (the kernels never write what they copy from), written into shared memory only when a wait
// covers its group, so that a read before the wait sees what was there before, as it may on a GPU.
struct AsyncCopy {
  void* to;
  unsigned char bytes[16];
};
struct AsyncCopies {
  std::vector<AsyncCopy> open;                 // issued since the last commit
  std::vector<std::vector<AsyncCopy>> groups;  // committed, oldest first
};

// What a CUDA thread sees of its block (t_block; with threadIdx and the rest below, a fiber's own).
struct Block {
  Barrier* barrier = nullptr;
  SharedMemory* shared = nullptr;
  std::mutex* atomics = nullptr;
  std::vector<std::unique_ptr<Warp>>* warps = nullptr;
  Turns* turns = nullptr;  // a serialized launch's
  int thread = 0;
  AsyncCopies* copies = nullptr;  // this thread's
};
inline thread_local Block t_block;

// One block's barrier (or a warp's): the last of `count` threads to arrive releases the others.
class Barrier {
 public:
  explicit Barrier(int count) : count_(count) {}
  void wait();  // below

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int count_, arrived_ = 0;
  long generation_ = 0;
  std::vector<int> waiting_;  // a serialized launch's threads waiting here
};

// A warp's lanes exchanging values: each writes its slot, all wait, each reads its partner's.
struct Warp {
  explicit Warp(int lanes) : barrier(lanes) {}
  float slots[32];
  uint32_t words[32][6];  // a tensor-core product's operand words, stmatrix's (common/cuda_mma.h)
  unsigned char rows[32][16];  // ldmatrix's rows, as each lane read its own (common/cuda_mma.h)
  Barrier barrier;
};

// How many vector reductions (thx_atomic_add4), 16-byte copies (thx_copy16), ldmatrix loads
// (cuda_mma.h; plain and .trans), stmatrix stores and asynchronous copies (thx_cp_async16) the
// emulator has run: the tests' way to see that a kernel or a product took them.
inline std::atomic<int64_t> vector_reductions{0}, vector_copies{0}, matrix_loads{0}, matrix_loads_trans{0},
    matrix_stores{0}, async_copies{0};

inline unsigned char* shared_memory() { return t_block.shared->data(); }
// Whether [p, p + bytes) lies in the running block's shared memory.
inline bool in_shared_memory(const void* p, size_t bytes) {
  const auto* c = static_cast<const unsigned char*>(p);
  return c >= t_block.shared->data() && c + bytes <= t_block.shared->data() + t_block.shared->size();
}

}  // namespace thx::emu

inline thread_local thx::emu::Dim3 threadIdx, blockIdx;
inline thread_local thx::emu::Dim3 blockDim, gridDim;
inline void __syncthreads() { thx::emu::t_block.barrier->wait(); }

THX_DEVICE float thx_exp(float x) { return std::exp(x); }
namespace thx::emu {
// For the test of that bound (tests/attention/tc_bounds.h's fast_exp_error): where a test sets
// it, this thread's thx_exp_fast gives exp(x) (1 + fast_exp_skew(x)), a GPU's error at its worst.
inline thread_local double (*fast_exp_skew)(float x) = nullptr;
}  // namespace thx::emu
// (the emulator's is exp itself: the GPU's few ulps more are within every bound the kernels' tests
// check, which run on a GPU too)
THX_DEVICE float thx_exp_fast(float x) {
  return thx::emu::fast_exp_skew ? float(std::exp(double(x)) * (1 + thx::emu::fast_exp_skew(x))) : std::exp(x);
}
THX_DEVICE float thx_rsqrt(float x) { return 1.f / std::sqrt(x); }
THX_DEVICE float thx_shfl_xor(float v, int lane_mask) {
  thx::emu::Warp& w = *(*thx::emu::t_block.warps)[threadIdx.x / 32];
  const unsigned lane = threadIdx.x % 32;
  w.slots[lane] = v;
  w.barrier.wait();
  const float r = w.slots[lane ^ unsigned(lane_mask)];
  w.barrier.wait();  // before any lane writes its slot again
  return r;
}
THX_DEVICE void thx_syncwarp() { (*thx::emu::t_block.warps)[threadIdx.x / 32]->barrier.wait(); }
THX_DEVICE float thx_log(float x) { return std::log(x); }
THX_DEVICE float thx_fmax(float a, float b) { return std::fmax(a, b); }
THX_DEVICE float thx_inf() { return std::numeric_limits<float>::infinity(); }
THX_DEVICE float thx_bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
THX_DEVICE uint32_t thx_float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
THX_DEVICE void thx_atomic_add(float* p, float v) {
  std::lock_guard<std::mutex> lock(*thx::emu::t_block.atomics);
  *p += v;
}
// p aligned to `bytes` as the access `what` needs, or the emulator aborts where a GPU faults.
THX_DEVICE void thx_check_aligned(const void* p, uintptr_t bytes, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % bytes != 0) {
    std::fprintf(stderr, "%s: misaligned address %p (a GPU faults here)\n", what, p);
    std::abort();
  }
}
// A vector reduction, 16-byte aligned.
THX_DEVICE void thx_atomic_add4(float* p, float v0, float v1, float v2, float v3) {
  thx_check_aligned(p, 16, "thx_atomic_add4");
  ++thx::emu::vector_reductions;
  std::lock_guard<std::mutex> lock(*thx::emu::t_block.atomics);
  p[0] += v0, p[1] += v1, p[2] += v2, p[3] += v3;
}
// Loads and stores aligned to their size: a 4-byte load, an 8-byte load, a 4-byte store.
THX_DEVICE uint32_t thx_load_word(const void* p) {
  thx_check_aligned(p, 4, "thx_load_word");
  uint32_t u;
  std::memcpy(&u, p, 4);
  return u;
}
THX_DEVICE ThxBytes8 thx_load8(const void* p) {
  thx_check_aligned(p, 8, "thx_load8");
  ThxBytes8 v;
  std::memcpy(&v, p, 8);
  return v;
}
THX_DEVICE void thx_store_word(void* p, uint32_t v) {
  thx_check_aligned(p, 4, "thx_store_word");
  std::memcpy(p, &v, 4);
}
// 16-byte copies and zeros: both addresses multiples of 16.
THX_DEVICE void thx_check16(const void* p, const char* what) { thx_check_aligned(p, 16, what); }
THX_DEVICE void thx_copy16(void* to, const void* from) {
  thx_check16(to, "thx_copy16"), thx_check16(from, "thx_copy16");
  ++thx::emu::vector_copies;
  std::memcpy(to, from, 16);
}
THX_DEVICE void thx_zero16(void* to) {
  thx_check16(to, "thx_zero16");
  std::memset(to, 0, 16);
}
THX_DEVICE uint32_t thx_umulhi(uint32_t a, uint32_t b) { return uint32_t(uint64_t(a) * b >> 32); }
THX_DEVICE int thx_opaque(int x) { return x; }
// Asynchronous copies (thx::emu::AsyncCopies): to in shared memory, both 16-byte aligned.
THX_DEVICE void thx_cp_async16(void* to, const void* from) {
  thx_check16(to, "thx_cp_async16"), thx_check16(from, "thx_cp_async16");
  if (!thx::emu::in_shared_memory(to, 16)) {
    std::fprintf(stderr, "thx_cp_async16: %p is not in shared memory (a GPU faults here)\n", to);
    std::abort();
  }
  ++thx::emu::async_copies;
  thx::emu::AsyncCopy c{to, {}};
  std::memcpy(c.bytes, from, 16);
  thx::emu::t_block.copies->open.push_back(c);
}
THX_DEVICE void thx_cp_async_commit() {
  thx::emu::AsyncCopies& q = *thx::emu::t_block.copies;
  q.groups.push_back(std::move(q.open));
  q.open.clear();
}
template <int N>
THX_DEVICE void thx_cp_async_wait() {
  auto& groups = thx::emu::t_block.copies->groups;
  while (groups.size() > size_t(N)) {
    for (const thx::emu::AsyncCopy& c : groups.front()) std::memcpy(c.to, c.bytes, 16);
    groups.erase(groups.begin());
  }
}

namespace thx::emu {

// A serialized launch (launch_order()): its CUDA threads as fibers (ucontext) of the launching OS
// thread, one running at a time; the running one hands over at a barrier or at its end to the next
// in the order, each fiber keeping its own threadIdx, blockIdx, blockDim, gridDim and t_block. A
// hand-over is a function call, not a wake-up of an OS thread, so serialized launches are faster
// than concurrent ones.
class Turns {
 public:
  Turns(int threads, Order order, std::function<void(int)> body)
      : ascending_(order == Order::ascending), body_(std::move(body)), fibers_(size_t(threads)) {
    for (Fiber& f : fibers_) {
      const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
      f.stack = static_cast<char*>(mmap(nullptr, kStack, PROT_READ | PROT_WRITE, flags, -1, 0));
      if (f.stack == MAP_FAILED) {
        std::fprintf(stderr, "emulator: no memory for %d threads' stacks\n", threads);
        std::abort();
      }
      mprotect(f.stack, 4096, PROT_NONE);  // a guard page: overflowing faults instead of corrupting
      getcontext(&f.context);
      f.context.uc_stack.ss_sp = f.stack, f.context.uc_stack.ss_size = kStack, f.context.uc_link = nullptr;
      makecontext(&f.context, entry, 0);
    }
  }
  ~Turns() {
    for (Fiber& f : fibers_) munmap(f.stack, kStack);
  }
  Turns(const Turns&) = delete;
  Turns& operator=(const Turns&) = delete;

  // From the launching thread: every fiber until all have ended.
  void run() {
    const Saved caller = Saved::now();
    t_running = this;
    running_ = pick();
    swapcontext(&main_, &fibers_[size_t(running_)].context);
    caller.restore();
  }
  // Thread t waits at a barrier (waiting: its threads so far); the last to arrive readies them all.
  void arrive(int t, std::vector<int>& waiting, int count) {
    waiting.push_back(t);
    fibers_[size_t(t)].state = kWaiting;
    if (int(waiting.size()) == count) {
      for (int w : waiting) fibers_[size_t(w)].state = kReady;
      waiting.clear();
    }
    hand_over(t);
  }

 private:
  enum State : char { kReady, kWaiting, kDone };
  // The thread-locals a fiber sees.
  struct Saved {
    Block block;
    Dim3 thread, block_idx, dim, grid;
    static Saved now() { return {t_block, threadIdx, blockIdx, blockDim, gridDim}; }
    void restore() const { t_block = block, threadIdx = thread, blockIdx = block_idx, blockDim = dim, gridDim = grid; }
  };
  struct Fiber {
    ucontext_t context;
    char* stack = nullptr;
    State state = kReady;
    Saved saved;
  };
  static constexpr size_t kStack = size_t(1) << 20;  // committed only as used (MAP_NORESERVE)
  static inline thread_local Turns* t_running = nullptr;

  static void entry() {
    Turns* T = t_running;
    const int t = T->running_;
    T->body_(t);
    T->fibers_[size_t(t)].state = kDone;
    T->hand_over(t);  // does not come back
  }
  int pick() const {
    const int n = int(fibers_.size());
    for (int i = 0; i < n; ++i) {
      const int t = ascending_ ? i : n - 1 - i;
      if (fibers_[size_t(t)].state == kReady) return t;
    }
    return -1;
  }
  void hand_over(int t) {
    const int next = pick();
    if (next == t) return;
    Fiber& me = fibers_[size_t(t)];
    me.saved = Saved::now();
    if (next < 0) {
      for (const Fiber& f : fibers_)
        if (f.state == kWaiting) {
          std::fprintf(stderr, "emulator: every thread left waits at a barrier that not all reach"
                               " (a GPU hangs here)\n");
          std::abort();
        }
      swapcontext(&me.context, &main_);  // every fiber has ended
      return;
    }
    running_ = next;
    swapcontext(&me.context, &fibers_[size_t(next)].context);
    me.saved.restore();
  }

  bool ascending_;
  std::function<void(int)> body_;
  std::vector<Fiber> fibers_;
  ucontext_t main_;
  int running_ = -1;
};

inline void Barrier::wait() {
  if (Turns* turns = t_block.turns) return turns->arrive(t_block.thread, waiting_, count_);
  std::unique_lock<std::mutex> lock(mu_);
  const long gen = generation_;
  if (++arrived_ == count_) {
    arrived_ = 0, ++generation_;
    cv_.notify_all();
  } else {
    cv_.wait(lock, [&] { return generation_ != gen; });
  }
}

// kernel<<<grid, threads, shared_bytes>>>(): the blocks in turn, each block's threads at once as
// OS threads (or taking turns as fibers: launch_order()), the same threads taking block after
// block with a barrier between (starting threads for every block made the emulator's tests slow).
// The shared buffer is filled with NaN bytes before each block, so that a kernel reading what it
// did not write shows in its results, and a write past either of its ends stops the launch.
// A kernel's thread must have waited for every copy it issued (one not waited for may land in the
// next block's shared memory): else the launch stops, naming it. Its (empty) groups then go.
inline void check_copies_landed(AsyncCopies& q) {
  size_t left = q.open.size();
  for (const auto& g : q.groups) left += g.size();
  if (left != 0) {
    std::fprintf(stderr, "emulator: a thread ended its block with %zu asynchronous copies not waited for\n", left);
    std::abort();
  }
  q.groups.clear();
}

inline void launch(Dim3 grid, int threads, size_t shared_bytes, const std::function<void()>& kernel) {
  SharedMemory shared(shared_bytes);
  std::mutex atomics;
  Barrier barrier(threads);
  std::vector<std::unique_ptr<Warp>> warps;
  for (int w = 0; w < threads; w += 32) warps.push_back(std::make_unique<Warp>(std::min(32, threads - w)));
  const Order order = launch_order();
  std::unique_ptr<Turns> turns;
  std::vector<AsyncCopies> copies(static_cast<size_t>(threads));
  auto thread = [&](int t) {
    t_block = Block{&barrier, &shared, &atomics, &warps, turns.get(), t, &copies[size_t(t)]};
    threadIdx = Dim3{unsigned(t), 0, 0};
    blockDim = Dim3{unsigned(threads), 1, 1};
    gridDim = grid;
    for (unsigned z = 0; z < grid.z; ++z)
      for (unsigned y = 0; y < grid.y; ++y)
        for (unsigned x = 0; x < grid.x; ++x) {
          if (t == 0) shared.reset();
          barrier.wait();  // the buffer is new before the block starts
          blockIdx = Dim3{x, y, z};
          kernel();
          check_copies_landed(copies[size_t(t)]);
          barrier.wait();  // every thread is done with the block before the next one's reset
          if (t == 0) shared.check();
        }
  };
  if (order != Order::concurrent) {
    turns = std::make_unique<Turns>(threads, order, thread);
    turns->run();
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(size_t(threads));
  for (int t = 0; t < threads; ++t) pool.emplace_back(thread, t);
  for (std::thread& th : pool) th.join();
}

}  // namespace thx::emu
#endif

#if defined(__CUDACC__) || defined(__CUDA__)  // (the emulator's are above)
// 16 bytes from global memory to shared memory, both 16-byte aligned, landing by the wait for their
// group (PTX ISA, "cp.async", sm_80: .cg, through L2 only); the groups this thread committed, all
// but the newest n done when thx_cp_async_wait<n> returns (the data then visible to this thread;
// to the warp's others after a barrier).
THX_DEVICE void thx_cp_async16(void* to, const void* from) {
  uint32_t s;
  asm volatile("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(s) : "l"(to));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(from) : "memory");
}
THX_DEVICE void thx_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
THX_DEVICE void thx_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
#endif

// bf16 <-> fp32, the same on every compiler: a float's top 16 bits, rounded to nearest even (as
// c10::BFloat16 and __float2bfloat16_rn round). On a GPU (sm_80 and later) one instruction,
// cvt.rn.bf16.f32, whose NaN is 0x7fff (as ATen's on CUDA); elsewhere the integer steps below,
// whose NaN is 0x7fc0 (as c10::BFloat16's on the CPU). Every other value the same bits.
THX_DEVICE float thx_to_float(float x) { return x; }
THX_DEVICE float thx_to_float(thx_bf16 x) { return thx_bits_to_float(uint32_t(x.bits) << 16); }
template <typename T>
THX_DEVICE T thx_from_float(float x);
template <>
THX_DEVICE float thx_from_float<float>(float x) {
  return x;
}
template <>
THX_DEVICE thx_bf16 thx_from_float<thx_bf16>(float x) {
#if defined(__CUDACC__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return thx_bf16{h};
#else
  const uint32_t u = thx_float_to_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return thx_bf16{uint16_t(0x7fc0)};
  return thx_bf16{uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
#endif
}
