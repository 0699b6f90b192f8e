// kernels.h: the CPU inner loops of the fused attention core (fused.h), on raw float rows, and
// the bf16 <-> fp32 row conversions of the bf16 paths, in three builds: AVX-512
// (kernels_avx512.cpp) and AVX2+FMA (kernels_avx2.cpp), each chosen when the CPU has it, and
// portable loops (kernels.cpp). Tests check each against the portable loops and against ATen.
//
// Row layout: a "row" is len consecutive floats; consecutive rows are `stride` apart.
// No torch here, so the SIMD files compile without the torch precompiled header.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace thx::kernels {

struct Ops {
  const char* name;
  // out[o*out_stride + j] (+)= sum_i C[o*c_o + i*c_i] * in[i*in_stride + j], o < O, j < len:
  // a small GEMM whose left factor may be read transposed (c_o = 1). With accumulate the
  // sum is added to out, else it replaces it.
  void (*mix)(float* out, int64_t out_stride, const float* in, int64_t in_stride,
              const float* C, int64_t c_o, int64_t c_i, int64_t O, int64_t I, int64_t len,
              bool accumulate);
  // G[a*NB + c] += sum_j A[a*a_stride + j] * B[c*b_stride + j], for a < NA, c < NB.
  void (*gram)(float* G, const float* A, int64_t a_stride, int64_t NA, const float* B,
               int64_t b_stride, int64_t NB, int64_t len);
  // In place: x = softmax(x + bias) over len, with x = -1e9 where mask[j] == 0.
  // bias and mask may be null.
  void (*softmax)(float* x, const float* bias, const uint8_t* mask, int64_t len);
  // log(sum_j exp(x[j])), computed stably.
  float (*logsumexp)(const float* x, int64_t len);
  // dx = w * (g - sum(w * g)), and 0 where mask[j] == 0 (mask may be null).
  void (*softmax_backward)(float* dx, const float* w, const float* g, const uint8_t* mask,
                           int64_t len);
  // bf16 (its 16 bits, as c10::BFloat16 stores them) to fp32: exact.
  void (*bf16_to_float)(const uint16_t* in, float* out, int64_t len);
  // fp32 to bf16, rounded to nearest even as c10::BFloat16 does (NaN stays NaN).
  void (*float_to_bf16)(const float* in, uint16_t* out, int64_t len);
};

const Ops& generic_ops();
const Ops* avx2_ops();    // null when this build has no AVX2 kernels
const Ops* avx512_ops();  // null when this build has no AVX-512 kernels
// AVX-512 (F, BW, VL) when the CPU supports it, else AVX2+FMA, else the portable loops. The
// environment variable THX_KERNELS (generic | avx2 | avx512) picks one of those the CPU can
// run instead (to compare them on one machine); it is read once. THX_KERNELS=amx is the
// default where the CPU has AMX: AVX-512 plus the tiles below.
const Ops& best_ops();
// Every build this CPU can run, the portable loops first (tests compare them).
std::vector<const Ops*> available_ops();
// What is wrong with THX_KERNELS, in one line, or "" when it is unset or names a build this CPU
// runs (amx where amx::cpu_has_amx()). thx refuses a bad value before any work (cli/main.cpp);
// best_ops() alone would fall back to the best build.
std::string kernels_env_error();

// AMX-BF16 tile products (kernels_amx.cpp) for the bf16 core's head mixings and grams: bf16
// factors, fp32 sums. At 48 heads, on one Emerald Rapids core, packing included: a mixing at
// about twice the AVX-512 fp32 kernels' rate, a gram at about four times; at 12 heads slower
// (docs/benchmarks.md). A factor given in fp32 (the projections) is rounded to bf16 once, by pack().
// Where the CPU has no AMX but AVX512-BF16 (AMD Zen 4 and 5), the same packed tiles run through
// VDPBF16PS: the same products and sums, in another order.
namespace amx {
// The fewest heads (in and out of a mixing, each side of a gram) at which pays() takes the tiles.
constexpr int64_t kMinHeads = 24;
// The CPU has AMX-BF16 and AVX-512 F/BW/VL, the OS keeps the tile state, and Linux granted this
// process the tile data. Checked once. (Valgrind's CPU reports no AMX.)
bool cpu_has_amx();
// AVX512-BF16 and AVX-512 F/BW/VL, and the OS keeps their state. Checked once.
bool cpu_has_avx512_bf16();
// What runs the products: AMX tiles where cpu_has_amx(), else VDPBF16PS where
// cpu_has_avx512_bf16(), else none (use() is then off). set_backend (tests) picks one this CPU
// runs, or none, and returns false, changing nothing, for one it does not.
enum class Backend { none, tiles, avx512_bf16 };
Backend backend();
bool set_backend(Backend b);
bool available();  // backend() != none
// Where the bf16 core uses the tiles. `where_it_pays`: for the products whose sizes measured
// faster than the AVX-512 fp32 kernels (pays()); the default where available(), unless
// THX_KERNELS names another build than "amx" (read once). Tests set `always` (every size) and
// `off`.
enum class Use { off, where_it_pays, always };
Use use();
void set_use(Use u);
// Whether a product of this size runs on tiles: a mixing [O x I] . [I x len] or a gram
// [NA x len] . [len x NB] (I = 0).
bool pays(int64_t O, int64_t I, int64_t NB);

struct Packed {  // a left factor [rows x cols] in bf16, as 16 x 32 tiles
  std::vector<uint16_t> tiles;
  int64_t rows = 0, cols = 0, row_tiles = 0, k_tiles = 0;
};
struct Scratch {  // packed right (and gram left) factors, reused from call to call
  std::vector<uint16_t> a, b;
};
// mix and gram run tile or VDPBF16PS instructions: call them only where available() returned
// true (cpu_has_amx() asks Linux for the tile data; without it the first tile instruction is
// SIGILL).
// A[o, i] = bf16(C[o*c_o + i*c_i]), rounded to nearest even, o < O, i < I.
Packed pack(const float* C, int64_t c_o, int64_t c_i, int64_t O, int64_t I);
// out[o*out_stride + j] = sum_i A[o, i] * X[i*x_stride + j], o < A.rows, i < A.cols, j < len;
// X in bf16 bits.
void mix(float* out, int64_t out_stride, const Packed& A, const uint16_t* X, int64_t x_stride, int64_t len,
         Scratch& s);
// The same, out in bf16 (rounded to nearest even, as c10::BFloat16).
void mix_bf16(uint16_t* out, int64_t out_stride, const Packed& A, const uint16_t* X, int64_t x_stride, int64_t len,
              Scratch& s);
// G[a*NB + c] += sum_j A[a*a_stride + j] * B[c*b_stride + j], a < NA, c < NB; A, B bf16 bits.
void gram(float* G, const uint16_t* A, int64_t a_stride, int64_t NA, const uint16_t* B, int64_t b_stride, int64_t NB,
          int64_t len, Scratch& s);
}  // namespace amx

}  // namespace thx::kernels
