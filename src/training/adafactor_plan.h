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

// Scratch a group's step needs, in floats (each written before it is read: none is zeroed).
struct ScratchSizes {
  int64_t sums_r = 0, sums_c = 0, sums_rm = 0, vrm = 0, stat_parts = 0, stats = 0;
  int64_t total() const { return sums_r + sums_c + sums_rm + vrm + stat_parts + stats; }
};

inline int64_t ceil_div(int64_t n, int64_t per) { return std::max<int64_t>(1, (n + per - 1) / per); }
// The blocks stats_kernel and apply_kernel stride with over a member's elements.
inline int64_t element_blocks(int64_t len) { return std::min<int64_t>(ceil_div(len, kThreads), 1024); }

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
  z.stats = 2 * n, z.stat_parts = 2 * n * element_blocks(f.len);
  if (f.factored) {
    z.sums_r = n * ceil_div(f.d0.size, kChunk) * f.r_len, z.sums_c = n * ceil_div(f.d1.size, kChunk) * f.c_len;
    z.sums_rm = n * ceil_div(f.d1.size, kChunk) * f.rm_len, z.vrm = n * f.rm_len;
  }
  return z;
}

// Scratch of `z`'s sizes carved from one buffer of z.total() floats, in the plan's order.
struct Scratch {
  float *sums_r, *sums_c, *sums_rm, *vrm, *stat_parts, *stats;
  Scratch(float* p, const ScratchSizes& z)
      : sums_r(p), sums_c(sums_r + z.sums_r), sums_rm(sums_c + z.sums_c), vrm(sums_rm + z.sums_rm),
        stat_parts(vrm + z.vrm), stats(stat_parts + z.stat_parts) {}
};

struct Grid {
  unsigned x = 1, y = 1, z = 1;
};

// The step, slice by slice of kMembers. L: launch(kernel, grid, threads, args...) in stream order;
// scratch: scratch_sizes(s)'s buffers.
template <class L>
void run_group_step(L& launch, const GroupStep& s, const Scratch& scratch) {
  const Factors whole = factors_of(s);
  auto blocks = [](int64_t n, int64_t per) { return unsigned(ceil_div(n, per)); };
  // The mean over dim d of src (the gradients' squares, or a state; len elements a member) into
  // state, by partial sums in parts.
  auto mean = [&](const Members& mem, int count, const float* from_state, int64_t len, Dim d, bool square,
                  float* parts, float* state, float decay) {
    const int64_t inner = d.stride, n = d.size, outer = len / (n * inner), outputs = outer * inner;
    const Grid grid{inner == 1 ? blocks(outer, kThreads / 32) : blocks(outputs, kThreads), unsigned(count),
                    blocks(n, kChunk)};
    launch(reduce_kernel, grid, kThreads, mem, from_state, len, parts, outer, n, inner, int(square), s.h.eps1);
    launch(average_kernel, Grid{blocks(count * outputs, kThreads)}, kThreads, state, (const float*)parts,
           int64_t(count), outputs, int64_t(grid.z), float(n), decay);
  };
  for (size_t first = 0; first < s.w.size(); first += kMembers) {
    const int count = int(std::min<size_t>(kMembers, s.w.size() - first));
    Members mem{};
    for (int i = 0; i < count; ++i) mem.w[i] = s.w[first + size_t(i)], mem.g[i] = s.g[first + size_t(i)];
    Factors f = whole;
    const int64_t at = int64_t(first);
    if (f.factored) {
      f.vr = s.vr + at * f.r_len, f.vc = s.vc + at * f.c_len, f.vrm = scratch.vrm;
      mean(mem, count, nullptr, f.len, f.d0, true, scratch.sums_r, f.vr, s.h.decay);
      mean(mem, count, nullptr, f.len, f.d1, true, scratch.sums_c, f.vc, s.h.decay);
      mean(mem, count, f.vr, f.r_len, f.d1_in_vr, false, scratch.sums_rm, f.vrm, 0.f);
    } else {
      f.v = s.v + at * f.len;
    }
    const int64_t element = element_blocks(f.len);
    const Grid grid{unsigned(element), unsigned(count), 1};
    launch(stats_kernel, grid, kThreads, mem, f, s.h.decay, s.h.eps1, scratch.stat_parts);
    launch(finish_stats_kernel, Grid{unsigned(count)}, kThreads, (const float*)scratch.stat_parts, element,
           scratch.stats);
    launch(apply_kernel, grid, kThreads, mem, f, (const float*)scratch.stats, s.h,
           s.m ? s.m + at * f.len : (float*)nullptr);
  }
}

}  // namespace thx::cuda::adafactor
