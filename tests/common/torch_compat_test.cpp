// compat::bmm_wide (common/torch_compat.h): a batched product written in a wider dtype. Off the
// GPU (and on a LibTorch without bmm.dtype) it is the product of the operands widened, bit for
// bit. On a GPU with LibTorch 2.8+ a bf16 product comes back with cuBLAS's fp32 sums:
// within fp32's rounding of the float64 product, where the same product rounded to bf16 is 2^7
// times farther (the control: the fallback would fail the bound). The overload's detection is
// checked against the version that added it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include <c10/core/CPUAllocator.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include "common/torch_compat.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

using torch::Tensor;

double max_error(const Tensor& a, const Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

TEST(TorchCompat, BmmOutDtypeIsFoundWhereLibTorchAddedIt) {
  const bool added = TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8);
  EXPECT_EQ(compat::kHaveBmmOutDtype, added) << "LibTorch " << TORCH_VERSION;
}

TEST(TorchCompat, BmmWideOnTheCpuIsTheProductOfTheOperandsWidened) {
  torch::manual_seed(3);
  const Tensor a = torch::randn({3, 5, 64}).to(torch::kBFloat16), b = torch::randn({3, 64, 1}).to(torch::kBFloat16);
  const Tensor wide = compat::bmm_wide(a, b, torch::kFloat32);
  EXPECT_EQ(wide.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::equal(wide, torch::bmm(a.to(torch::kFloat32), b.to(torch::kFloat32))));
  EXPECT_FALSE(torch::equal(wide, torch::bmm(a, b).to(torch::kFloat32)));  // not rounded to bf16 first
  const Tensor a64 = a.to(torch::kFloat64), b64 = b.to(torch::kFloat64);
  EXPECT_TRUE(torch::equal(compat::bmm_wide(a64, b64, torch::kFloat64), torch::bmm(a64, b64)));
}

// Kineto's event times from either LibTorch's members: 1.13's (startUs, durationUs) and 2.x's
// (startNs, durationNs), each read with its unit (stand-in events of both forms), the start as
// integer nanoseconds: 2.x's clock counts them since 1970, above 2^60, where a double keeps every
// 256th (the control below). This LibTorch's own KinetoEvent takes the form its version has.
struct EventUs {
  uint64_t startUs() const { return 1500; }
  uint64_t durationUs() const { return 20; }
};
struct EventNs {
  uint64_t start = 1500250;
  uint64_t startNs() const { return start; }
  uint64_t durationNs() const { return 20500; }
};

TEST(TorchCompat, KinetoTimesFromEitherVersionsMembers) {
  EXPECT_EQ(compat::kineto_start_ns(EventUs{}), 1500000);
  EXPECT_EQ(compat::kineto_duration_us(EventUs{}), 20.0);
  EXPECT_EQ(compat::kineto_start_ns(EventNs{}), 1500250);
  EXPECT_EQ(compat::kineto_duration_us(EventNs{}), 20.5);
  const uint64_t now = 1'796'000'000'000'000'001;  // (2026-11-29 in 2.x's clock, and a nanosecond)
  EXPECT_EQ(compat::kineto_start_ns(EventNs{now}) - compat::kineto_start_ns(EventNs{now - 1}), 1);
  EXPECT_EQ(double(now) / 1e3 - double(now - 100) / 1e3, 0.0) << "the control: 100 ns lost in microseconds";
  EXPECT_EQ(compat::KinetoNanoseconds<torch::autograd::profiler::KinetoEvent>::value, bool(THX_TORCH2));
}

// The wrapping allocator (for the tests' PoisonedCpuMemory, test_util.h) overrides this LibTorch's
// Allocator: allocate is const in 1.13, not in 2.11. In the scope new CPU
// tensors are NaN (every floating type) or -1 (integers), what was asked to be zero is; after it, the
// allocator is the previous one again, and the scope's tensors free and resize as any other.
TEST(TorchCompat, WrappingAllocatorPoisonsNewCpuTensorsInItsScope) {
  if (TORCH_VERSION_MAJOR < 2) {  // (the two LibTorches thx builds with)
    EXPECT_TRUE(compat::detail::kConstAllocate);
  }
  if (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 11) {
    EXPECT_FALSE(compat::detail::kConstAllocate);
  }
  c10::Allocator* before = c10::GetCPUAllocator();
  Tensor f, grown;
  {
    const PoisonedCpuMemory poison;
    EXPECT_NE(c10::GetCPUAllocator(), before);
    f = torch::empty({1000});
    EXPECT_TRUE(f.isnan().all().item<bool>());
    EXPECT_TRUE(torch::empty({77}, torch::kBFloat16).isnan().all().item<bool>());
    EXPECT_TRUE(torch::empty({5}, torch::kFloat64).isnan().all().item<bool>());
    EXPECT_TRUE(torch::empty({9}, torch::kLong).eq(-1).all().item<bool>());
    EXPECT_TRUE(torch::zeros({1000}).eq(0).all().item<bool>());
    {
      const PoisonedCpuMemory nested;
      EXPECT_TRUE(torch::empty({10}).isnan().all().item<bool>());
    }
    EXPECT_TRUE(torch::empty({10}).isnan().all().item<bool>()) << "an inner scope ended the outer one's";
    grown = torch::ones({4});
  }
  EXPECT_EQ(c10::GetCPUAllocator(), before);
  EXPECT_TRUE(f.isnan().all().item<bool>());
  grown.resize_({1 << 20});  // (through the wrapping allocator, which now passes it through)
  grown.narrow(0, 4, (1 << 20) - 4).fill_(2);
  EXPECT_EQ(grown.sum().item<double>(), 4 + 2.0 * ((1 << 20) - 4));
}

// The wrapping allocator's other branch, which no LibTorch here compiles: over a stand-in base with
// the virtual functions of 2.11's c10::Allocator (c10/core/Allocator.h: allocate(n) not const and
// pure, copy_data(dest, src, n) const and pure, raw_deleter() const), so that a signature it fails to
// override (`override`), or a pure function it leaves (abstract), stops this build, not a GPU
// machine's. Through the base, as c10 calls it: each new block goes to `after` before it is
// returned, an empty one does not, and copy_data and raw_deleter are the wrapped allocator's.
struct Allocator211 {
  virtual ~Allocator211() = default;
  virtual c10::DataPtr allocate(size_t n) = 0;
  virtual c10::DeleterFnPtr raw_deleter() const { return nullptr; }
  virtual void copy_data(void* dest, const void* src, size_t count) const = 0;
};

TEST(TorchCompat, WrappingAllocatorOverridesTheAllocatorOf211) {
  int blocks = 0;
  size_t bytes = 0;
  auto after = [&](void* p, size_t n) {
    ++blocks, bytes += n;
    std::memset(p, 0x5A, n);
  };
  using Wrapped = compat::detail::Wrapping<decltype(after), /*Const=*/false, Allocator211>;
  static_assert(!std::is_abstract_v<Wrapped>, "the 2.x branch leaves one of 2.11's pure functions");
  Wrapped wrapping(c10::GetCPUAllocator(), after);
  Allocator211& a = wrapping;
  const c10::DataPtr p = a.allocate(64), empty = a.allocate(0);
  EXPECT_EQ(blocks, 1);
  EXPECT_EQ(bytes, 64u);
  const auto* b = static_cast<const unsigned char*>(p.get());
  EXPECT_TRUE(std::all_of(b, b + 64, [](unsigned char c) { return c == 0x5A; }));
  std::vector<unsigned char> copy(64, 0);
  a.copy_data(copy.data(), p.get(), 64);
  EXPECT_TRUE(std::equal(copy.begin(), copy.end(), b));
  EXPECT_EQ(a.raw_deleter(), c10::GetCPUAllocator()->raw_deleter());
}

TEST(TorchCompatOnCuda, BmmWideKeepsCublasFp32Sums) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (!compat::kHaveBmmOutDtype) GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no bmm.dtype";
  torch::manual_seed(3);
  const auto bf16 = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  for (const auto& [sa, sb] : {std::pair<std::vector<int64_t>, std::vector<int64_t>>{{8, 12, 4096}, {8, 4096, 1}},
                               {{8, 1, 4096}, {8, 4096, 12}}}) {
    const Tensor a = torch::randn(sa, bf16), b = torch::randn(sb, bf16);
    const Tensor exact = torch::bmm(a.to(torch::kFloat64), b.to(torch::kFloat64));
    const Tensor wide = compat::bmm_wide(a, b, torch::kFloat32);
    ASSERT_EQ(wide.scalar_type(), torch::kFloat32);
    const double scale = exact.abs().max().item<double>();
    EXPECT_LE(max_error(wide, exact), std::ldexp(scale, -16));
    EXPECT_GT(max_error(torch::bmm(a, b), exact), std::ldexp(scale, -16)) << "the control: bf16's rounding";
  }
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
