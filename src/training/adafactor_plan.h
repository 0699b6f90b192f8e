// adafactor_plan.h: the order of adafactor_kernels.cuh's launches for one group (host code),
// shared by CUDA's launcher (adafactor_cuda.cu) and the emulator's (the tests), which differ only
// in how a kernel is launched and where the scratch lives.
#pragma once
#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "training/adafactor_kernels.cuh"
#include "training/adafactor_step.h"

namespace thx::cuda::adafactor {

// Scratch a group's step needs, in floats (zeroed by the plan where it must be).
struct ScratchSizes {
  int64_t sums_r = 0, sums_c = 0, sums_rm = 0, vrm = 0, stats = 0;
};

inline Dim dim_of(const std::vector<int64_t>& view, int64_t d) {
  Dim r;
  r.size = view[size_t(d)];
  for (size_t i = size_t(d) + 1; i < view.size(); ++i) r.stride *= view[i];
  return r;
}

// The member-independent part of Factors (no state pointers), from the view and dims.
inline Factors factors_of(const GroupStep& s) {
  Factors f;
  f.len = 1;
  for (int64_t n : s.view) f.len *= n;
  if (!s.dims) return f;
  f.factored = 1;
  f.d0 = dim_of(s.view, s.dims->first), f.d1 = dim_of(s.view, s.dims->second);
  f.d1_in_vr = f.d1;
  if (f.d1.stride > f.d0.stride) f.d1_in_vr.stride /= f.d0.size;  // d1 lies before d0: d0's size leaves its stride
  f.r_len = f.len / f.d0.size, f.c_len = f.len / f.d1.size, f.rm_len = f.r_len / f.d1.size;
  return f;
}

inline ScratchSizes scratch_sizes(const GroupStep& s) {
  const Factors f = factors_of(s);
  const int64_t n = int64_t(std::min<size_t>(s.w.size(), kMembers));
  ScratchSizes z;
  z.stats = 2 * n;
  if (f.factored) z.sums_r = n * f.r_len, z.sums_c = n * f.c_len, z.sums_rm = n * f.rm_len, z.vrm = n * f.rm_len;
  return z;
}

struct Grid {
  unsigned x = 1, y = 1, z = 1;
};

// The step, slice by slice of kMembers. L: launch(kernel, grid, threads, args...) and
// zero(float*, count), in stream order. scratch: scratch_sizes(s)'s buffers.
template <class L>
void run_group_step(L& launch, const GroupStep& s, float* sums_r, float* sums_c, float* sums_rm, float* vrm,
                    float* stats) {
  const Factors whole = factors_of(s);
  auto blocks = [](int64_t n, int64_t per) { return unsigned(std::max<int64_t>(1, (n + per - 1) / per)); };
  // Reduce src (the gradients, or a state) over dim d of `shape` (elements a member: len) into sums.
  auto reduce = [&](const Members& mem, int count, const float* from_state, int64_t len, Dim d, bool square,
                    float* sums) {
    const int64_t inner = d.stride, n = d.size, outer = len / (n * inner), outputs = outer * inner;
    const Grid grid{inner == 1 ? blocks(outer, kThreads / 32) : blocks(outputs, kThreads), unsigned(count),
                    blocks(n, kChunk)};
    launch(reduce_kernel, grid, kThreads, mem, from_state, len, sums, outputs, outer, n, inner, int(square),
           s.h.eps1);
  };
  for (size_t first = 0; first < s.w.size(); first += kMembers) {
    const int count = int(std::min<size_t>(kMembers, s.w.size() - first));
    Members mem{};
    for (int i = 0; i < count; ++i) mem.w[i] = s.w[first + size_t(i)], mem.g[i] = s.g[first + size_t(i)];
    Factors f = whole;
    const int64_t at = int64_t(first);
    launch.zero(stats, 2 * count);
    if (f.factored) {
      f.vr = s.vr + at * f.r_len, f.vc = s.vc + at * f.c_len, f.vrm = vrm;
      launch.zero(sums_r, count * f.r_len), launch.zero(sums_c, count * f.c_len);
      launch.zero(sums_rm, count * f.rm_len);
      reduce(mem, count, nullptr, f.len, f.d0, true, sums_r);
      launch(average_kernel, Grid{blocks(count * f.r_len, kThreads)}, kThreads, f.vr, (const float*)sums_r,
             count * f.r_len, float(f.d0.size), s.h.decay);
      reduce(mem, count, nullptr, f.len, f.d1, true, sums_c);
      launch(average_kernel, Grid{blocks(count * f.c_len, kThreads)}, kThreads, f.vc, (const float*)sums_c,
             count * f.c_len, float(f.d1.size), s.h.decay);
      reduce(mem, count, f.vr, f.r_len, f.d1_in_vr, false, sums_rm);
      launch(average_kernel, Grid{blocks(count * f.rm_len, kThreads)}, kThreads, f.vrm, (const float*)sums_rm,
             count * f.rm_len, float(f.d1.size), 0.f);
    } else {
      f.v = s.v + at * f.len;
    }
    const Grid grid{std::min(blocks(f.len, kThreads), 1024u), unsigned(count), 1};
    launch(stats_kernel, grid, kThreads, mem, f, s.h.decay, s.h.eps1, stats);
    launch(apply_kernel, grid, kThreads, mem, f, (const float*)stats, s.h, s.m ? s.m + at * f.len : (float*)nullptr);
  }
}

}  // namespace thx::cuda::adafactor
