// The backends of the bf16 core's head products (kernels.h, amx) that this CPU runs: AMX tiles
// (Sapphire and Emerald Rapids) and VDPBF16PS on the same packed tiles (those, and AMD Zen 4
// and 5). A test runs its body once under each, and skips, saying why, where there is none.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "attention/kernels.h"

namespace thx::test {

inline const char* backend_name(kernels::amx::Backend b) {
  switch (b) {
    case kernels::amx::Backend::tiles: return "AMX tiles";
    case kernels::amx::Backend::avx512_bf16: return "VDPBF16PS";
    default: return "none";
  }
}

// Runs body() under each backend this CPU has, restoring the one before; false where none ran.
inline bool for_each_tile_backend(const std::function<void()>& body) {
  namespace amx = kernels::amx;
  const amx::Backend before = amx::backend();
  bool ran = false;
  for (amx::Backend b : {amx::Backend::tiles, amx::Backend::avx512_bf16}) {
    if (!amx::set_backend(b)) continue;
    SCOPED_TRACE(backend_name(b));
    body();
    ran = true;
  }
  amx::set_backend(before);
  return ran;
}

// Why a test of them skips where available() is false.
constexpr const char* kNoTileBackend =
    "this CPU has neither AMX-BF16 nor AVX512-BF16 (or Linux grants no tile data): the bf16 head products run in "
    "fp32 here";

}  // namespace thx::test
