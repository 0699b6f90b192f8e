// kernel_tiles.h: what the SIMD builds of kernels.h share beyond their instructions.
#pragma once
#include <cstdint>
#include <type_traits>

namespace thx::kernels {

// The remainder of a loop over tiles of N: calls f(std::integral_constant<int, r>()) for the
// run-time r in [1, N), nothing for 0, so that a tile size stays a compile-time constant.
template <int N, class F>
inline void with_remainder(int64_t r, F&& f) {
  if constexpr (N > 1) {
    if (r == N - 1) return f(std::integral_constant<int, N - 1>());
    with_remainder<N - 1>(r, f);
  }
}

}  // namespace thx::kernels
