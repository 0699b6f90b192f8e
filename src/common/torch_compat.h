// torch_compat.h: every difference between the two LibTorch versions thx builds against, in one
// place. Debian's libtorch-dev 1.13 (CPU; c10d with Gloo) on the development machines and CI;
// the LibTorch inside a PyTorch 2 wheel (CUDA) on GPU machines (scripts/gpu_build.sh). Each
// difference below was read in PyTorch's sources, not guessed; where the 2.x signature moved
// between minor releases, the candidates are tried in order at compile time
// (std::is_constructible), and a LibTorch that matches none fails to compile here, naming the
// function, rather than somewhere inside c10d. `scripts/cuda_build_check.sh LIBTORCH` compiles
// all of thx against a LibTorch 2.x's headers on a machine without a GPU (2.10 and 2.14 passed).
//
//   c10d::ProcessGroup     1.13: ProcessGroupGloo *is* a ProcessGroup. 2.x: it is a Backend,
//                          attached to a ProcessGroup(store, rank, size[, options]) with
//                          setBackend(device type, backend type, backend) per device type.
//   c10d::Reducer          1.13..2.4: (params, buckets, per-bucket limits, group, sparse, cap,
//                          find_unused, as_view, names, first cap); 2.5+ adds two flags
//                          (skip_all_reduce_unused_params, use_python_reducer); later ones drop
//                          the per-bucket limits (some then take a list of byte caps).
//   scaled_dot_product_attention   2.x only (THX_HAVE_SDPA).
//   at::bmm(a, b, out_dtype)        2.8+ (bmm.dtype in native_functions.yaml, a CUDA kernel only):
//                                   a bf16 or fp16 product written in fp32, as cuBLAS sums it.
//                                   Found by overload, not by version (bmm_wide below).
//   CUDA memory statistics          c10::cuda::CUDACachingAllocator, only where LibTorch has CUDA
//                                   (THX_CUDA, set by CMake when it finds torch_cuda).
//   Kineto's events (KinetoEvent)   1.13: startUs(), durationUs() in microseconds; 2.x: startNs(),
//                                   durationNs() in nanoseconds. Found by member, not by version
//                                   (kineto_start_ns below).
//   c10::Allocator                  1.13: allocate(n) const; later 2.x (2.11 among them): allocate(n),
//                                   not const, and copy_data(dest, src, n) const, pure virtual
//                                   (c10/core/Allocator.h).
//                                   Found by allocate's type (WrappingAllocator below).
//
// thx does not use LibTorch's autocast (common/precision.h casts explicitly), so autocast's
// 1.13 -> 2.x changes (set_autocast_enabled(device_type, ...)) do not reach it.
#pragma once
#include <torch/torch.h>
#include <torch/version.h>

#include <cstring>
#include <type_traits>
#include <utility>

#if TORCH_VERSION_MAJOR >= 2
#define THX_TORCH2 1
#define THX_HAVE_SDPA 1
#else
#define THX_TORCH2 0
#define THX_HAVE_SDPA 0
#endif

namespace thx::compat {

template <class...>
inline constexpr bool kNever = false;

// ---- a bf16 product's sums kept in fp32 ----------------------------------------------------
// bmm_wide(a, b, out): the batched product a b in dtype `out`, its sums never rounded to the
// operands' narrower dtype. Where LibTorch has bmm.dtype and a, b are bf16 or fp16 on CUDA and
// `out` is fp32, cuBLAS's fp32 sums are written as they are (bgemm<bf16, float>: one rounding, to
// fp32). Elsewhere (the CPU, where bmm.dtype has no kernel; 1.13, which has none at all) the
// operands are widened to `out` first and multiplied there: a bf16 product is exact in fp32, so
// that is the same model (fp32 sums of exact products, in another order), at the cost of a wide
// copy of each operand. The overload is found at compile time: a LibTorch without it takes the
// fallback, whatever its version says.
namespace detail {
template <class T>
auto bmm_out_dtype(const T& a, const T& b, at::ScalarType out, int) -> decltype(at::bmm(a, b, out)) {
  return at::bmm(a, b, out);
}
template <class T>
at::Tensor bmm_out_dtype(const T& a, const T& b, at::ScalarType out, long) {
  return at::bmm(a, b).to(out);
}
template <class T>
constexpr auto has_bmm_out_dtype(int) -> decltype(at::bmm(std::declval<T>(), std::declval<T>(), at::kFloat), true) {
  return true;
}
template <class T>
constexpr bool has_bmm_out_dtype(long) {
  return false;
}
}  // namespace detail

// Whether this LibTorch has bmm.dtype (true on the GPU machines' 2.11, false on Debian's 1.13).
inline constexpr bool kHaveBmmOutDtype = detail::has_bmm_out_dtype<at::Tensor>(0);

inline at::Tensor bmm_wide(const at::Tensor& a, const at::Tensor& b, at::ScalarType out) {
  const auto in = a.scalar_type();
  const bool reduced = in == at::kBFloat16 || in == at::kHalf;
  if (a.is_cuda() && reduced && out == at::kFloat && kHaveBmmOutDtype) return detail::bmm_out_dtype(a, b, out, 0);
  if (in == out) return at::bmm(a, b);
  return at::bmm(a.to(out), b.to(out));
}

// ---- a Kineto event's times ------------------------------------------------------------------
// E is torch::autograd::profiler::KinetoEvent (a template, so that this header need not include the
// profiler's): whether it has 2.x's nanosecond members is found by member, as bmm_wide's overload.
template <class E, class = void>
struct KinetoNanoseconds : std::false_type {};
template <class E>
struct KinetoNanoseconds<E, std::void_t<decltype(std::declval<const E&>().startNs())>> : std::true_type {};

// The start in nanoseconds of the profiler's clock, an integer: above 2^60 on 2.x's clock (since 1970),
// where a double keeps only every 256th; subtract a start near it before converting.
template <class E>
int64_t kineto_start_ns(const E& e) {
  if constexpr (KinetoNanoseconds<E>::value) return int64_t(e.startNs());
  else return int64_t(e.startUs()) * 1000;
}
template <class E>
double kineto_duration_us(const E& e) {
  if constexpr (KinetoNanoseconds<E>::value) return double(e.durationNs()) / 1e3;
  else return double(e.durationUs());
}

// ---- an allocator that wraps another -------------------------------------------------------
// WrappingAllocator<After>: allocates through `base` and hands each new block (its pointer and
// bytes) to `after` before anything can read it; frees through base's deleter. The tests' poisoned
// CPU memory (tests/test_util.h) is one. Its overrides are those of this LibTorch's Allocator.
namespace detail {
inline constexpr bool kConstAllocate =
    std::is_same_v<decltype(&c10::Allocator::allocate), c10::DataPtr (c10::Allocator::*)(size_t) const>;
template <class After, bool Const, class Base = c10::Allocator>  // (Base: so that only the one used is checked)
struct Wrapping;
template <class After, class Base>
struct Wrapping<After, true, Base> : Base {  // 1.13
  Wrapping(c10::Allocator* b, After f) : base(b), after(std::move(f)) {}
  c10::DataPtr allocate(size_t n) const override {
    c10::DataPtr p = base->allocate(n);
    if (n > 0) after(p.get(), n);
    return p;
  }
  c10::DeleterFnPtr raw_deleter() const override { return base->raw_deleter(); }
  c10::Allocator* base;
  After after;
};
template <class After, class Base>
struct Wrapping<After, false, Base> : Base {  // later 2.x
  Wrapping(c10::Allocator* b, After f) : base(b), after(std::move(f)) {}
  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr p = base->allocate(n);
    if (n > 0) after(p.get(), n);
    return p;
  }
  c10::DeleterFnPtr raw_deleter() const override { return base->raw_deleter(); }
  void copy_data(void* dest, const void* src, size_t count) const override { std::memcpy(dest, src, count); }
  c10::Allocator* base;
  After after;
};
}  // namespace detail
template <class After>
using WrappingAllocator = detail::Wrapping<After, detail::kConstAllocate>;

}  // namespace thx::compat

// ---- c10d (only inside thx_distributed, which compiles with THX_C10D) ---------------------
#ifdef THX_C10D
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace thx::compat {

using GroupPtr = c10::intrusive_ptr<c10d::ProcessGroup>;

// The 2.x ProcessGroup that holds the backends: (store, rank, size) from 2.5 on, with Options
// (backend name, timeout) before. A template so that the branch not taken is never compiled.
template <class PG = c10d::ProcessGroup>
c10::intrusive_ptr<PG> make_process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                          std::chrono::milliseconds timeout) {
  if constexpr (std::is_constructible_v<PG, c10::intrusive_ptr<c10d::Store>, int, int>)
    return c10::make_intrusive<PG>(store, rank, size);  // 2.5 and later
  else
    return c10::make_intrusive<PG>(store, rank, size, c10::make_intrusive<typename PG::Options>("gloo", timeout));
}

// A process group of `size` ranks over `store` whose CPU tensors go through Gloo on `device`.
inline GroupPtr make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                std::chrono::milliseconds timeout,
                                const std::shared_ptr<::gloo::transport::Device>& device) {
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  opts->devices.push_back(device);
#if THX_TORCH2
  // As torch.distributed does: the group, and under its own prefix of the store, the backend.
  auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>("cpu/", store),
                                                          rank, size, opts);
  GroupPtr pg = make_process_group(store, rank, size, timeout);
  pg->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, c10::intrusive_ptr<c10d::Backend>(gloo));
  pg->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
  return pg;
#else
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
#endif
}

// DDP's Reducer over `params` with the given buckets (reversed, as DDP orders them), no sparse
// gradients, gradients not views of the buckets, no parameter names.
template <class R = c10d::Reducer>
std::unique_ptr<R> make_reducer(const std::vector<at::Tensor>& params, const std::vector<std::vector<size_t>>& buckets,
                                const std::vector<size_t>& limits, const GroupPtr& pg, int64_t bucket_bytes,
                                bool find_unused, int64_t first_bucket_bytes) {
  using Params = std::vector<at::Tensor>;
  using Buckets = std::vector<std::vector<size_t>>;
  using Limits = std::vector<size_t>;
  using Names = std::unordered_map<size_t, std::string>;
  const std::vector<bool> sparse(params.size(), false);
  if constexpr (std::is_constructible_v<R, Params, Buckets, Limits, GroupPtr, std::vector<bool>, int64_t, bool, bool,
                                        Names, int64_t>) {
    return std::make_unique<R>(params, buckets, limits, pg, sparse, bucket_bytes, find_unused, false, Names{},
                               first_bucket_bytes);
  } else if constexpr (std::is_constructible_v<R, Params, Buckets, Limits, GroupPtr, std::vector<bool>, int64_t, bool,
                                               bool, Names, int64_t, bool, bool>) {
    return std::make_unique<R>(params, buckets, limits, pg, sparse, bucket_bytes, find_unused, false, Names{},
                               first_bucket_bytes, /*skip_all_reduce_unused_params=*/false,
                               /*use_python_reducer=*/false);
  } else if constexpr (std::is_constructible_v<R, Params, Buckets, GroupPtr, std::vector<bool>, int64_t, bool, bool,
                                               Names, int64_t, bool, bool>) {
    return std::make_unique<R>(params, buckets, pg, sparse, bucket_bytes, find_unused, false, Names{},
                               first_bucket_bytes, false, false);
  } else if constexpr (std::is_constructible_v<R, Params, Buckets, GroupPtr, std::vector<bool>, int64_t, bool, bool,
                                               Names, int64_t, bool, bool, std::vector<int64_t>>) {
    return std::make_unique<R>(params, buckets, pg, sparse, bucket_bytes, find_unused, false, Names{},
                               first_bucket_bytes, false, false, std::vector<int64_t>(limits.begin(), limits.end()));
  } else {
    static_assert(kNever<R>, "thx::compat::make_reducer: this LibTorch's c10d::Reducer constructor matches none of "
                             "the known signatures (src/common/torch_compat.h)");
  }
}

}  // namespace thx::compat
#endif  // THX_C10D
