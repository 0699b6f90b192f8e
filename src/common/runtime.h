// runtime.h: process-wide settings that decide CPU speed, applied once at startup.
//
// - Threads: LibTorch's OpenMP pool may start with one thread (seen on Debian 12 VMs), so thx
//   sets the intra-op thread count explicitly (default: every core).
// - Idle threads: LibTorch's OpenMP pool spins after each parallel region (GOMP's default
//   wait policy) and OpenBLAS's pool spins with sched_yield for ~2^28 cycles after each
//   GEMM. On a 2-core machine each steals the cores the other needs: measured, 30-50% slower
//   layers. Both read their policy from the environment when the libraries load, so
//   thx re-executes itself once with OMP_WAIT_POLICY=PASSIVE and OPENBLAS_THREAD_TIMEOUT=4
//   unless the user has set them (for a command that computes: cli/command.h).
// - fp32 matmuls: LibTorch's go to the BLAS, Debian 12's OpenBLAS 0.3.21, which picks its
//   kernels by the CPU's model number and takes an Intel model it does not know for a Prescott
//   (SSE3; OpenBLAS issue 4267, fixed in 0.3.25). An Emerald Rapids Xeon (family 6, model 207) of
//   this project's kind then ran a 2048^3 fp32 matmul at 51-60 GFLOP/s, and at 172-246 with the
//   AVX-512 kernels (docs/benchmarks.md). OpenBLAS reads OPENBLAS_CORETYPE when it loads, so where
//   it chose a core older than AVX on a CPU with AVX-512 (or AVX2 and FMA), the same re-execution
//   sets OPENBLAS_CORETYPE=SkylakeX (Haswell), unless the user has set it, and records what
//   OpenBLAS had chosen in THX_OPENBLAS_DETECTED (blas_description, provenance).
// - Memory: glibc serves allocations above 32 MB with mmap and unmaps them on free, so every
//   [b,h,n,m] attention tensor would be fresh memory, paid for in page faults on first touch
//   (measured: softmax over [2,24,512,512] 26 ms with them, 7 ms without). thx keeps freed
//   memory in the heap for reuse instead (keep_freed_memory). RSS then stays at its high-water
//   mark; host_memory's check gives the free memory back before it refuses a block.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace thx {

// The hand-written CPU kernels (the fused attention core, cross-entropy with z-loss, RMS norm,
// Adafactor's loops) run where their tensors are fp32 on the CPU and this is on; everywhere
// else the ATen composition they are tested against runs, which is the path a CUDA tensor
// takes. Each kernel makes that choice in one place. Tests turn it off to run the device path
// on the CPU (tests/models/device_path_test.cpp).
bool cpu_kernels_enabled();
void set_cpu_kernels(bool enabled);

// Parts of a step that thx's own kernels compute (the CPU's loops, a GPU's kernels): Adafactor's
// update, the loss's cross-entropy with z-loss, T5's RMS norm. A part named here runs the ATen
// composition its kernels are tested against instead, on every device. Named by THX_ATEN in the
// environment, a comma list (a GPU session names a part whose kernels failed their test there, so
// that the rest still measures), or by `bench train --aten` (set_aten_parts: what the kernels
// save). aten_parts() holds both; a name in THX_ATEN other than adafactor, loss or rms_norm is an
// InputError naming it (thx reads it before any command runs).
struct AtenParts {
  bool adafactor = false, loss = false, rms_norm = false;
};
AtenParts aten_parts();
void set_aten_parts(AtenParts parts);
// The parts `names` name; a name that is none is an InputError "<where>: <name> is not a part;
// allowed: adafactor, loss, rms_norm<hint>" (THX_ATEN's, --aten's).
AtenParts parse_aten_parts(const std::vector<std::string>& names, const std::string& where,
                           const std::string& hint = "");
// The names of the parts set in `parts`, in that order (a report's).
std::vector<std::string> aten_part_names(AtenParts parts);

// The device to train on: "cpu", "cuda" or "auto" (CUDA when present), from --device (set
// once by main) or a config's train.device. resolve_device throws InputError (exit 2)
// naming `where` for "cuda" when this LibTorch has no CUDA or no device is visible. Under
// torchrun each rank takes the GPU of its LOCAL_RANK. Models are built on the CPU (so a run
// draws the same initial weights on every device) and then moved; every tensor a forward
// pass creates follows its inputs' device, and batches move to the model's (to_device,
// data/stream.h).
void set_device_request(const std::string& device);
const std::string& device_request();
torch::Device resolve_device(const std::string& requested, const std::string& where);

// A crash (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) writes "thx: fatal signal <name>", the
// faulting address, instruction and caller (x86-64), and the stack (glibc's backtrace;
// addresses resolve with addr2line -f -C -e <binary> <offset>) to stderr, then dies of
// the same signal, so that a crash on a machine without a debugger names where it happened.
// Not under the sanitizers, whose own reports are better. main() and the tests install it.
void install_crash_report();

// "SIGINT", "SIGTERM", ... or "signal N". A run stopped by one exits 128 + N, as shells report
// it (130 for Ctrl-C, 143 for SIGTERM), after its checkpoint.
std::string signal_name(int sig);

// The hardware threads this process may run on: its CPU affinity's (taskset, a container's
// cpuset), not the machine's, which std::thread::hardware_concurrency counts, and at most what
// its cgroup's CPU quota allows (a container's --cpus); at least 1.
int64_t available_cores();
// The whole cores a cgroup's CPU quota allows (at least 1; a thread past them would be throttled
// within each period, stalling the others at its parallel region's end); 0 where it sets none.
// From the texts of v2's cpu.max ("max 100000", or "200000 100000": quota and period in us)
// or, where that is empty, v1's cpu.cfs_quota_us (-1: none) and cpu.cfs_period_us.
int64_t cgroup_quota_cores(const std::string& cpu_max, const std::string& cfs_quota, const std::string& cfs_period);
// The least of those quotas over this process's cgroup and its ancestors (common/cgroup.h), from
// a /proc/self/cgroup text and where the cgroup file systems are mounted; 0 where none is set.
int64_t cgroup_cores(const std::string& self_cgroup, const std::string& root);
// The most --threads takes: past the cores, threads only wait on each other (a run with 1,000
// on 2 cores took 6x as long to start, with 100,000 it never did), so more is a mistake. Up to
// it, more than the cores is taken with a warning (a run repeated with another machine's count).
constexpr int64_t kMaxThreads = 1024;

// threads <= 0: under torchrun available_cores() divided among its LOCAL_WORLD_SIZE ranks (torchrun
// sets OMP_NUM_THREADS=1 for several ranks itself: not taken), else OMP_NUM_THREADS where set, as
// PyTorch takes it, else available_cores(). More than available_cores() logs a warning.
void configure_runtime(int64_t threads = 0);
// OMP_NUM_THREADS as OpenMP reads it: a whole number from 1 to kMaxThreads, the first of a comma
// list (nested levels' counts); 0 where it is unset or empty, -1 where it is none of those.
int64_t omp_num_threads_env();
// What is wrong with OMP_NUM_THREADS, in one line, or "" (thx refuses it before any work: cli.cpp).
std::string omp_num_threads_env_error();

// Call before any work (cli_main does, once it has parsed a command that computes):
// re-executes the program with the thread-pool environment above if it is not set yet.
// Returns only when no re-execution happened (or it failed).
void reexec_with_thread_environment(char** argv);
// Only the OpenBLAS half of it, for programs without argv at hand (the test binaries, from a
// static initializer: their arguments are read from /proc/self/cmdline).
void reexec_for_openblas_kernels();
// The OPENBLAS_CORETYPE for a CPU that OpenBLAS took for `detected`: "SkylakeX" (avx512: F, CD,
// BW, DQ and VL) or "Haswell" (avx2: AVX2 and FMA) where `detected` is a core before AVX, else
// nullptr (OpenBLAS's own choice stands).
const char* openblas_core_for(const std::string& detected, bool avx512, bool avx2);
// The vector units OpenBLAS's `core` kernels leave unused on a CPU with them: "AVX-512" where the
// CPU has it and the core is not SkylakeX, Cooperlake or SapphireRapids; "AVX2" where the CPU has
// AVX2 and FMA and the core is one before AVX2 (before AVX, Sandybridge, Bulldozer, Piledriver,
// Steamroller); else nullptr.
const char* openblas_core_leaves_unused(const std::string& core, bool avx512, bool avx2);
// The BLAS behind LibTorch's fp32 CPU matmuls, as bench headers and provenance name it:
// "OpenBLAS SkylakeX kernels", with "(OPENBLAS_CORETYPE=SkylakeX: OpenBLAS took this CPU for a
// Prescott)" where thx set it; where it was set before thx started, "(OPENBLAS_CORETYPE=Haswell)",
// with ", set before thx started: its kernels leave this CPU's AVX-512 unused; ..." where they do
// (a shell's setting from another machine, say); "" where the BLAS is not OpenBLAS.
std::string blas_description();

// This process's memory, from /proc/self/status (MB; 0 where it cannot be read): resident now,
// and the peak since the last reset_peak_rss() (or the start). reset_peak_rss() writes 5 to
// /proc/self/clear_refs (Linux 4.0+), so that the training loop reports each window's and each
// evaluation's own peak; where that is refused, the peak is the whole run's.
double rss_mb();
// Returns the heap's free memory to the system (malloc_trim), so that RSS counts live memory.
void trim_heap();
// Makes glibc serve large blocks from the heap, not fresh mmaps, and never trim the heap's top on
// free (configure_runtime calls it). Trimming is off, not at its largest threshold (2 GB): a
// T5-base step at 48 heads frees 5 GB at the top, and with the threshold each step gave it back
// and faulted it in again (bench train: 49 s a step against 14; docs/benchmarks.md).
// trim_heap() still returns free memory where thx asks.
void keep_freed_memory();
// keep_freed_memory's two settings as glibc's tunables (GLIBC_TUNABLES, which a process reads as
// it starts), for a child that should keep its heap as thx does (bench train's PyTorch peer): a
// shell's assignment to put before its command, with the user's own tunables after them (they win).
std::string kept_heap_environment();
double peak_rss_mb();
void reset_peak_rss();

// Memory this process may use at most, in bytes: the machine's physical memory, or a cgroup's
// limit where one is lower (a container; host_memory().total); 0 if unknown.
double physical_memory_bytes();

// The same for a device: physical_memory_bytes() on the CPU, the GPU's own memory on CUDA (in a
// LibTorch with CUDA, THX_CUDA; 0 where unknown). "this machine's" (or "this cgroup's", where
// its limit is the total) or "GPU 0's", for messages.
double memory_bytes(const torch::Device& device);
std::string memory_owner(const torch::Device& device);
// What a benchmark names beside its numbers: "CPU: <model> (<bf16 features>); N threads", or
// "GPU: <name>, <memory> GB" on CUDA.
std::string device_description(const torch::Device& device);
// Waits for the device's queued work (CUDA runs asynchronously; timings need it); no-op on the CPU.
void synchronize(const torch::Device& device);
// The peak of memory held by tensors on a GPU since the last reset, in MB (the caching
// allocator's statistics); 0 on the CPU, where peak_rss_mb() is the measure.
double device_peak_mb(const torch::Device& device);
void reset_device_peak(const torch::Device& device);
// The memory held by tensors on a GPU now, in MB (the same statistics); 0 on the CPU.
double device_allocated_mb(const torch::Device& device);
// Hands a GPU's cached free blocks back to the driver (before another process needs them).
void empty_device_cache(const torch::Device& device);

}  // namespace thx
