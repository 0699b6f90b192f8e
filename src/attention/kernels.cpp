#include "attention/kernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

namespace thx::kernels {
namespace {

void mix(float* out, int64_t os, const float* in, int64_t is, const float* C, int64_t co,
         int64_t ci, int64_t O, int64_t I, int64_t len, bool accumulate) {
  for (int64_t o = 0; o < O; ++o) {
    float* y = out + o * os;
    if (!accumulate) std::fill(y, y + len, 0.0f);
    for (int64_t i = 0; i < I; ++i) {
      const float c = C[o * co + i * ci];
      const float* x = in + i * is;
      for (int64_t j = 0; j < len; ++j) y[j] += c * x[j];
    }
  }
}

void gram(float* G, const float* A, int64_t as, int64_t NA, const float* B, int64_t bs,
          int64_t NB, int64_t len) {
  for (int64_t a = 0; a < NA; ++a)
    for (int64_t c = 0; c < NB; ++c) {
      float s = 0;
      for (int64_t j = 0; j < len; ++j) s += A[a * as + j] * B[c * bs + j];
      G[a * NB + c] += s;
    }
}

void softmax(float* x, const float* bias, const uint8_t* mask, int64_t len) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < len; ++j) {
    float v = x[j] + (bias ? bias[j] : 0.0f);
    if (mask && !mask[j]) v = -1e9f;
    x[j] = v;
    mx = std::max(mx, v);
  }
  float sum = 0;
  for (int64_t j = 0; j < len; ++j) sum += (x[j] = std::exp(x[j] - mx));
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < len; ++j) x[j] *= inv;
}

float logsumexp(const float* x, int64_t len) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < len; ++j) mx = std::max(mx, x[j]);
  double sum = 0;
  for (int64_t j = 0; j < len; ++j) sum += std::exp(x[j] - mx);
  return mx + float(std::log(sum));
}

void softmax_backward(float* dx, const float* w, const float* g, const uint8_t* mask,
                      int64_t len) {
  float dot = 0;
  for (int64_t j = 0; j < len; ++j) dot += w[j] * g[j];
  for (int64_t j = 0; j < len; ++j) dx[j] = (mask && !mask[j]) ? 0.0f : w[j] * (g[j] - dot);
}

void bf16_to_float(const uint16_t* in, float* out, int64_t len) {
  for (int64_t j = 0; j < len; ++j) {
    const uint32_t bits = uint32_t(in[j]) << 16;
    std::memcpy(out + j, &bits, sizeof bits);
  }
}

void float_to_bf16(const float* in, uint16_t* out, int64_t len) {
  for (int64_t j = 0; j < len; ++j) {
    if (std::isnan(in[j])) {
      out[j] = 0x7FC0;
      continue;
    }
    uint32_t bits;
    std::memcpy(&bits, in + j, sizeof bits);
    out[j] = uint16_t((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);  // round to nearest even
  }
}

const Ops kGeneric = {"generic", mix, gram, softmax, logsumexp, softmax_backward, bf16_to_float, float_to_bf16};

}  // namespace

const Ops& generic_ops() { return kGeneric; }

namespace {

bool can_run_avx512() {
  __builtin_cpu_init();
  return avx512_ops() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}
bool can_run_avx2() {
  __builtin_cpu_init();
  return avx2_ops() && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

}  // namespace

std::vector<const Ops*> available_ops() {
  std::vector<const Ops*> r = {&kGeneric};
  if (can_run_avx2()) r.push_back(avx2_ops());
  if (can_run_avx512()) r.push_back(avx512_ops());
  return r;
}

const Ops& best_ops() {
  static const Ops* best = [] {
    const std::vector<const Ops*> all = available_ops();
    if (const char* want = std::getenv("THX_KERNELS"))
      for (const Ops* o : all)
        if (std::string(o->name) == want) return o;
    return all.back();
  }();
  return *best;
}

std::string kernels_env_error() {
  const char* want = std::getenv("THX_KERNELS");
  if (!want || !*want) return "";
  std::string allowed;
  for (const Ops* o : available_ops()) {
    if (o->name == std::string(want)) return "";
    allowed += (allowed.empty() ? "" : ", ") + std::string(o->name);
  }
  if (amx::cpu_has_amx()) {
    if (std::string(want) == "amx") return "";
    allowed += ", amx";
  }
  return "THX_KERNELS=" + std::string(want) + ": not a build of thx's CPU kernels that this CPU runs; allowed here: " +
         allowed;
}

namespace amx {
namespace {
std::atomic<int> g_use{-1};  // -1: as THX_KERNELS says; else a Use set by set_use
// kMinHeads (kernels.h): where the tiles paid in one bf16 attention layer (d_model 768,
// n = m = 512, batch 4, T5's bias; docs/benchmarks.md, 2026-11-30, Emerald Rapids): at 24 and 48
// heads, both the mixings and the grams; at 12 heads neither (a 12-head mixing fills 12 of a
// tile's 32 k and 12 of its 16 rows: on tiles the layer's TH/MH was 1.24-1.29, against
// 1.21-1.26 on the fp32 kernels). Through VDPBF16PS (no AMX) the same threshold: at 24 and 48
// heads the mixings paid on a Zen 5 (2026-12-03); 12 heads were not measured there.
}  // namespace

Use use() {
  static const Use by_env = [] {
    const char* want = std::getenv("THX_KERNELS");
    return !want || !*want || std::string(want) == "amx" ? Use::where_it_pays : Use::off;
  }();
  if (!available()) return Use::off;
  const int u = g_use.load();
  return u < 0 ? by_env : Use(u);
}

void set_use(Use u) { g_use.store(int(u)); }

bool pays(int64_t O, int64_t I, int64_t NB) {
  switch (use()) {
    case Use::off: return false;
    case Use::always: return true;
    case Use::where_it_pays: break;
  }
  if (I == 0) return O * NB >= kMinHeads * kMinHeads;
  return I >= kMinHeads && O >= kMinHeads;
}
}  // namespace amx

}  // namespace thx::kernels
