#include "common/runtime.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <fmt/format.h>
#include <malloc.h>
#include <sched.h>
#include <torch/torch.h>

#include <signal.h>
#include <strings.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <initializer_list>
#include <utility>
#include <vector>

#include "common/cgroup.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/host_memory.h"
#include "common/log.h"
#include "common/precision.h"

#if THX_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace thx {

namespace {
std::atomic<bool> g_cpu_kernels{true};
}  // namespace

bool cpu_kernels_enabled() { return g_cpu_kernels; }

namespace {
std::string g_device = "auto";
}  // namespace

void set_device_request(const std::string& device) { g_device = device; }
const std::string& device_request() { return g_device; }

torch::Device resolve_device(const std::string& requested, const std::string& where) {
  if (requested != "cpu" && requested != "auto" && requested != "cuda" && !requested.empty())
    throw InputError(fmt::format("{} {}: not a device; allowed: cpu, cuda, auto", where, requested));
  const bool present = torch::cuda::is_available();
  if (requested == "cuda" && !present)
    throw InputError(fmt::format("{} cuda: no CUDA device: this LibTorch ({}) {}; use cpu", where, TORCH_VERSION,
                                 torch::cuda::device_count() == 0 && !at::hasCUDA()
                                     ? "was built without CUDA (Debian's libtorch-dev is CPU-only)"
                                     : "sees no GPU"));
  if (requested == "cuda" || (requested == "auto" && present)) {
    // One GPU per rank: torchrun's LOCAL_RANK picks it (more ranks on a node than GPUs are refused
    // before any work, dist::check_device; the wrap is for a LOCAL_RANK set by hand).
    int64_t local = 0;
    if (const char* v = std::getenv("LOCAL_RANK")) local = std::max<int64_t>(0, std::atoll(v));
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local % torch::cuda::device_count()));
  }
  return torch::Device(torch::kCPU);
}

void set_cpu_kernels(bool enabled) { g_cpu_kernels = enabled; }

namespace {
std::atomic<bool> g_aten_adafactor{false}, g_aten_loss{false}, g_aten_rms_norm{false};
}  // namespace

AtenParts parse_aten_parts(const std::vector<std::string>& names, const std::string& where, const std::string& hint) {
  AtenParts p;
  for (const std::string& name : names) {
    bool* part = name == "adafactor" ? &p.adafactor
                 : name == "loss"    ? &p.loss
                 : name == "rms_norm" ? &p.rms_norm
                                      : nullptr;
    if (!part)
      throw InputError(fmt::format("{}: {} is not a part; allowed: adafactor, loss, rms_norm{}", where,
                                   name.empty() ? "an empty name" : name, hint));
    *part = true;
  }
  return p;
}

std::vector<std::string> aten_part_names(AtenParts parts) {
  std::vector<std::string> names;
  if (parts.adafactor) names.push_back("adafactor");
  if (parts.loss) names.push_back("loss");
  if (parts.rms_norm) names.push_back("rms_norm");
  return names;
}

AtenParts aten_parts() {
  AtenParts p{g_aten_adafactor, g_aten_loss, g_aten_rms_norm};
  const char* env = std::getenv("THX_ATEN");
  if (!env || !*env) return p;
  // Parsed again only when the value changes (each RMS norm, loss and optimizer step asks; tests
  // change it): the last value and its parts, a copy a thread.
  thread_local std::string seen;
  thread_local AtenParts parsed;
  if (seen != env) {
    std::vector<std::string> names;
    std::stringstream list(env);
    for (std::string name; std::getline(list, name, ',');) names.push_back(name);
    parsed = parse_aten_parts(names, fmt::format("THX_ATEN={}", env),
                              " (comma-separated: these by ATen's composition, not thx's kernels)");
    seen = env;  // (after the parse: a bad value is refused again at its next reading)
  }
  return {p.adafactor || parsed.adafactor, p.loss || parsed.loss, p.rms_norm || parsed.rms_norm};
}

void set_aten_parts(AtenParts parts) {
  g_aten_adafactor = parts.adafactor, g_aten_loss = parts.loss, g_aten_rms_norm = parts.rms_norm;
}

// The sanitizers' death callback: present (non-null) only in a sanitizer build.
extern "C" void __sanitizer_set_death_callback(void (*)(void)) __attribute__((weak));

namespace {
// Writes "0x" and v in hex: async-signal-safe, unlike printf.
void put_hex(uintptr_t v) {
  char buf[2 + 2 * sizeof v];
  size_t n = sizeof buf;
  do {
    buf[--n] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v && n > 2);
  buf[--n] = 'x', buf[--n] = '0';
  (void)!::write(STDERR_FILENO, buf + n, sizeof buf - n);
}

void crash_report(int sig, siginfo_t* info, void* context) {
  // Only async-signal-safe calls: write(2) and backtrace_symbols_fd (backtrace itself was
  // called once at installation, so that its library is already loaded).
  const char* name = sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGILL ? "SIGILL"
                     : sig == SIGFPE ? "SIGFPE" : "SIGABRT";
  const auto put = [](const char* s) { (void)!::write(STDERR_FILENO, s, std::strlen(s)); };
  put("thx: fatal signal ");
  put(name);
  if (sig != SIGABRT) {
    put(" at address ");
    put_hex(reinterpret_cast<uintptr_t>(info->si_addr));
  }
#if defined(__x86_64__) && defined(__linux__)
  // The faulting instruction and the return address on top of the stack: the unwinder stops at
  // a frame without unwind information, such as a call through a bad pointer, and these two
  // still name the code that made it (module+offset: addr2line -f -C -e MODULE OFFSET).
  if (sig != SIGABRT) {
    const auto& regs = static_cast<const ucontext_t*>(context)->uc_mcontext.gregs;
    void* at[2] = {reinterpret_cast<void*>(regs[REG_RIP]), *reinterpret_cast<void* const*>(regs[REG_RSP])};
    put("; instruction, then the word on top of the stack:\n");
    ::backtrace_symbols_fd(at, 2, STDERR_FILENO);
  }
#endif
  put("; stack:\n");
  void* frames[64];
  ::backtrace_symbols_fd(frames, ::backtrace(frames, 64), STDERR_FILENO);
  ::signal(sig, SIG_DFL);  // and die of it (the handler was installed with SA_RESETHAND too)
  ::raise(sig);
}
}  // namespace

std::string signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGKILL: return "SIGKILL";
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    default: return fmt::format("signal {}", sig);
  }
}

void install_crash_report() {
  if (__sanitizer_set_death_callback) return;
  void* warm[1];
  (void)::backtrace(warm, 1);
  struct sigaction sa {};
  sa.sa_sigaction = crash_report;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (const int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) ::sigaction(sig, &sa, nullptr);
}

int64_t cgroup_quota_cores(const std::string& cpu_max, const std::string& cfs_quota, const std::string& cfs_period) {
  double quota = 0, period = 0;
  std::string word;
  if (!cpu_max.empty()) {
    std::istringstream in(cpu_max);
    if (!(in >> word >> period) || word == "max") return 0;
    quota = std::atof(word.c_str());
  } else {
    quota = std::atof(cfs_quota.c_str()), period = std::atof(cfs_period.c_str());
  }
  if (!(quota > 0 && period > 0)) return 0;
  return std::max<int64_t>(1, int64_t(std::floor(quota / period + 1e-9)));
}

int64_t cgroup_cores(const std::string& self_cgroup, const std::string& root) {
  int64_t cores = 0;
  for (const CgroupDir& d : cgroup_dirs(self_cgroup, "cpu", root)) {
    const int64_t q = d.version == 2 ? cgroup_quota_cores(read_file_if_any(d.path + "cpu.max"), "", "")
                                     : cgroup_quota_cores("", read_file_if_any(d.path + "cpu.cfs_quota_us"),
                                                          read_file_if_any(d.path + "cpu.cfs_period_us"));
    if (q > 0 && (cores == 0 || q < cores)) cores = q;
  }
  return cores;
}

int64_t available_cores() {
  static const int64_t cores = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    int64_t n = ::sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0
                    ? CPU_COUNT(&set)
                    : std::max<int64_t>(1, int64_t(std::thread::hardware_concurrency()));
    const int64_t quota = cgroup_cores(read_file_if_any("/proc/self/cgroup"), "/sys/fs/cgroup");
    if (quota > 0) n = std::min(n, quota);
    return n;
  }();
  return cores;
}

int64_t omp_num_threads_env() {
  const char* v = std::getenv("OMP_NUM_THREADS");
  if (!v || !*v) return 0;
  const std::string s = v, first = s.substr(0, s.find(','));
  if (first.empty() || first.size() > 4 || first.find_first_not_of("0123456789") != std::string::npos) return -1;
  const int64_t n = std::stoll(first);
  return n >= 1 && n <= kMaxThreads ? n : -1;
}

std::string omp_num_threads_env_error() {
  if (omp_num_threads_env() >= 0) return "";
  return fmt::format("OMP_NUM_THREADS={}: not a count of threads from 1 to {} (the default of --threads outside "
                     "torchrun); unset it or set --threads", std::getenv("OMP_NUM_THREADS"), kMaxThreads);
}

void configure_runtime(int64_t threads) {
  static bool malloc_done = false;
  if (!malloc_done) keep_freed_memory(), malloc_done = true;
  std::string from = "--threads";
  if (threads <= 0) {
    // Under torchrun, the node's cores are shared by its LOCAL_WORLD_SIZE ranks.
    const char* local = std::getenv("LOCAL_WORLD_SIZE");
    if (!local && omp_num_threads_env() > 0) {
      threads = omp_num_threads_env(), from = "OMP_NUM_THREADS=" + std::string(std::getenv("OMP_NUM_THREADS"));
      thx::log("runtime")->debug("{} threads, as {} says (--threads sets another count)", threads, from);
    } else {
      threads = std::max<int64_t>(1, available_cores() / std::max<int64_t>(1, local ? std::atoll(local) : 1));
    }
  }
  if (threads > available_cores()) {
    const int64_t cores = available_cores();
    thx::log("runtime")->warn("{}: more than the {} core{} this process may run on; past them threads only wait on "
                              "each other", from == "--threads" ? "--threads " + std::to_string(threads) : from, cores,
                              cores == 1 ? "" : "s");
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

namespace {
// The core OpenBLAS's runtime detection chose ("Prescott", "SkylakeX", ...), or nullptr where the
// BLAS LibTorch uses is not OpenBLAS.
const char* openblas_core() {
  using Name = char* (*)();
  auto name = reinterpret_cast<Name>(::dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  return name ? name() : nullptr;
}
}  // namespace

namespace {
// OpenBLAS's names of the cores before AVX (and of none: "Unknown"); Sandybridge on would use AVX.
bool before_avx(const std::string& core) {
  static const char* const kOld[] = {"Katmai", "Coppermine", "Northwood", "Prescott", "Banias", "Atom",
                                     "Core2",  "Penryn",     "Dunnington", "Nehalem",  "Unknown"};
  bool old = false;
  for (const char* k : kOld) old = old || ::strcasecmp(core.c_str(), k) == 0;
  return old;
}

// This CPU's vector units as OpenBLAS's kernels use them: AVX-512 (F, CD, BW, DQ and VL), and AVX2
// with FMA.
std::pair<bool, bool> cpu_avx512_avx2() {
  __builtin_cpu_init();  // (the test binaries call this from a static initializer: before libgcc's own)
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl");
  return {avx512, __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")};
}
}  // namespace

const char* openblas_core_for(const std::string& detected, bool avx512, bool avx2) {
  // The AVX2 and AVX-512 cores are OpenBLAS's own choice to keep.
  if (!before_avx(detected)) return nullptr;
  return avx512 ? "SkylakeX" : avx2 ? "Haswell" : nullptr;
}

const char* openblas_core_leaves_unused(const std::string& core, bool avx512, bool avx2) {
  const auto named = [&](std::initializer_list<const char*> names) {
    for (const char* k : names)
      if (::strcasecmp(core.c_str(), k) == 0) return true;
    return false;
  };
  if (avx512 && !named({"SkylakeX", "Cooperlake", "SapphireRapids"})) return "AVX-512";
  // The cores with AVX but not AVX2: Intel's Sandy Bridge, AMD's Bulldozer family to Steamroller.
  const bool before_avx2 = before_avx(core) || named({"Sandybridge", "Bulldozer", "Piledriver", "Steamroller"});
  return avx2 && before_avx2 ? "AVX2" : nullptr;
}

namespace {
// Sets OPENBLAS_CORETYPE (and THX_OPENBLAS_DETECTED) where OpenBLAS chose a core before AVX on a
// CPU with AVX2 or AVX-512 and the user has not set it; true when it did.
bool set_openblas_coretype() {
  const char* detected = openblas_core();
  if (!detected || std::getenv("OPENBLAS_CORETYPE")) return false;
  const auto [avx512, avx2] = cpu_avx512_avx2();
  const char* core = openblas_core_for(detected, avx512, avx2);
  if (!core) return false;
  ::setenv("THX_OPENBLAS_DETECTED", detected, 1);
  ::setenv("OPENBLAS_CORETYPE", core, 1);
  return true;
}
}  // namespace

void reexec_with_thread_environment(char** argv) {
  bool changed = set_openblas_coretype();
  for (auto [key, value] : {std::pair{"OMP_WAIT_POLICY", "PASSIVE"},
                            std::pair{"OPENBLAS_THREAD_TIMEOUT", "4"}})
    if (!std::getenv(key)) {
      ::setenv(key, value, 1);
      changed = true;
    }
  if (changed) ::execv("/proc/self/exe", argv);  // returns only on failure: run as we are
}

void reexec_for_openblas_kernels() {
  if (!set_openblas_coretype()) return;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  for (std::string arg; std::getline(in, arg, '\0');) args.push_back(arg);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (args.size() > 0) ::execv("/proc/self/exe", argv.data());  // returns only on failure
}

namespace {
// What blas_description adds to a core set before thx started that leaves vector units unused.
std::string coretype_note(const char* core) {
  const auto [avx512, avx2] = cpu_avx512_avx2();
  const char* unused = openblas_core_leaves_unused(core, avx512, avx2);
  if (!unused) return "";
  return fmt::format(", set before thx started: its kernels leave this CPU's {} unused; unset it for the CPU's own",
                     unused);
}
}  // namespace

std::string blas_description() {
  const char* core = openblas_core();
  if (!core) return "";
  std::string out = fmt::format("OpenBLAS {} kernels", core);
  const char* set = std::getenv("OPENBLAS_CORETYPE");
  if (const char* detected = std::getenv("THX_OPENBLAS_DETECTED"); detected && set)
    out += fmt::format(" (OPENBLAS_CORETYPE={}: OpenBLAS took this CPU for a {})", set, detected);
  else if (set)  // the user's, or a shell's from another machine: kept, and said where it holds the CPU back
    out += fmt::format(" (OPENBLAS_CORETYPE={}{})", set, coretype_note(core));
  return out;
}

namespace {
double status_mb(const char* field) {  // "VmRSS:     1234 kB"
  std::ifstream in("/proc/self/status");
  const size_t n = std::strlen(field);
  for (std::string line; std::getline(in, line);)
    if (line.compare(0, n, field) == 0) return std::atof(line.c_str() + n) / 1024.0;
  return 0;
}
}  // namespace

double rss_mb() { return status_mb("VmRSS:"); }
void trim_heap() { malloc_trim(0); }

void keep_freed_memory() {
  mallopt(M_MMAP_MAX, 0);         // large blocks from the heap, not fresh mmaps
  mallopt(M_TRIM_THRESHOLD, -1);  // and no trimming of its top on free (mallopt(3): -1 turns it off)
}
std::string kept_heap_environment() {  // (trim_threshold SIZE_MAX is mallopt's -1)
  return "GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=18446744073709551615"
         "${GLIBC_TUNABLES:+:$GLIBC_TUNABLES} ";
}
double peak_rss_mb() { return status_mb("VmHWM:"); }
void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

double physical_memory_bytes() {
  // MemTotal, or the limit of the cgroup this process is in (its own directory, then the root)
  // where lower: what the host-memory check counts against (common/host_memory.h).
  if (const double total = host_memory().total; total > 0) return total;
  const double bytes = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  return bytes > 0 ? bytes : 0;
}

double memory_bytes(const torch::Device& device) {
  if (device.is_cpu()) return physical_memory_bytes();
#if THX_CUDA
  if (device.is_cuda()) return double(at::cuda::getDeviceProperties(device.index())->totalGlobalMem);
#endif
  return 0;
}

std::string device_description(const torch::Device& device) {
#if THX_CUDA
  if (device.is_cuda()) {
    const auto* p = at::cuda::getDeviceProperties(device.index());
    return fmt::format("GPU: {}, {:.0f} GB", p->name, double(p->totalGlobalMem) / 1e9);
  }
#endif
  if (!device.is_cpu()) return "device " + device.str();
  const std::string blas = blas_description();
  const int threads = torch::get_num_threads();
  return fmt::format("CPU: {}; {} thread{}{}", cpu_bf16().describe(), threads, threads == 1 ? "" : "s",
                     blas.empty() ? "" : "; " + blas);
}

std::string memory_owner(const torch::Device& device) {
  return device.is_cpu() ? host_memory().owner : fmt::format("GPU {}'s", device.has_index() ? device.index() : 0);
}

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.has_index() ? device.index() : -1);
}

namespace {
// The caching allocator's bytes held by tensors on a GPU, now or at their peak, in MB; 0 on the CPU.
double allocated_mb(const torch::Device& device, bool peak) {
#if THX_CUDA
  if (device.is_cuda()) {  // [0]: the aggregate over pool kinds (StatType::AGGREGATE)
    const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0];
    return double(peak ? s.peak : s.current) / 1e6;
  }
#endif
  (void)peak;
  return 0;
}
}  // namespace

double device_peak_mb(const torch::Device& device) { return allocated_mb(device, true); }
double device_allocated_mb(const torch::Device& device) { return allocated_mb(device, false); }

void empty_device_cache(const torch::Device& device) {
#if THX_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

void reset_device_peak(const torch::Device& device) {
#if THX_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#endif
}

}  // namespace thx
