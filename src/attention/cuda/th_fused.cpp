#include "attention/cuda/th_fused.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <type_traits>
#include <utility>

#include "attention/optional_tensor.h"

namespace thx {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using cuda_th::Args;
using cuda_th::Launcher;

Tensor four(Tensor t) {
  while (t.dim() < 4) t = t.unsqueeze(0);
  return t;
}

struct Dims {
  int64_t b, n, m, h_k, h, h_v, d_k, d_v;
};
Dims dims(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l, const Tensor& P_w) {
  const int64_t h = P_l.defined() ? P_l.size(1) : Q.size(2);
  return {Q.size(0), Q.size(1), K.size(1), Q.size(2), h, V.size(2), Q.size(3), V.size(3)};
}

// t's strides over [b,h,n,m] as it broadcasts (0 along a dim of size 1).
void broadcast_strides(const Tensor& t4, const Dims& d, int64_t* out) {
  const Tensor e = t4.expand({d.b, d.h, d.n, d.m});
  for (int i = 0; i < 4; ++i) out[i] = e.stride(i);
}

std::atomic<bool> g_tensor_cores{true}, g_padded_heads{true};
std::mutex g_launch_mu;
ThLaunch g_launch, g_last;  // set_th_launch's, and what the last launches used

ThLaunch launch_settings() {
  std::lock_guard<std::mutex> lock(g_launch_mu);
  return g_launch;
}
void record(bool backward, ThTiles tiles, int threads, cuda_th::KeySums key_sums, bool padded) {
  std::lock_guard<std::mutex> lock(g_launch_mu);
  (backward ? g_last.backward : g_last.forward) = tiles;
  (backward ? g_last.backward_padded : g_last.forward_padded) = padded;
  g_last.threads = threads;
  g_last.key_sums = key_sums;  // the backward's, as set when each kernel ran
}

cuda_th::Widths widths_for(bool bf16, bool tensor_cores, bool p_l, bool p_w, int threads) {
  cuda_th::Widths w;
  w.in = bf16 ? 2 : 4;
  w.j = bf16 && tensor_cores && p_l ? 2 : 4;
  w.u = bf16 && tensor_cores && p_w ? 2 : 4;
  w.threads = bf16 && tensor_cores ? threads : 0;
  return w;
}
cuda_th::Layout layout(const Dims& d, ThTiles t, const cuda_th::Widths& w, bool backward) {
  return cuda_th::kernel_layout({t.R, t.C, int(d.h_k), int(d.h), int(d.h_v), int(d.d_k), int(d.d_v)}, w, backward);
}

// "" where forced tiles t fit the launcher's shared memory, else why: the kernel, the tiles, and
// the KB they need (for `problem`) and have.
std::string tiles_unfit(const Dims& d, ThTiles t, const cuda_th::Widths& w, bool backward, int64_t limit,
                        const std::string& problem) {
  const int64_t need = layout(d, t, w, backward).bytes;
  if (need <= limit) return "";
  return std::string(backward ? "backward" : "forward") + " tiles " + std::to_string(t.R) + "x" + std::to_string(t.C) +
         " need " + std::to_string((need + 1023) / 1024) + " KB of shared memory" + problem + "; the GPU allows " +
         std::to_string(limit / 1024) + " KB";
}

// Everything but the typed pointers, which the caller sets for its dtype. tensor_cores: the
// forward's choice (tensor_cores_for), which its backward keeps.
template <typename T>
Args<T> args(const Dims& d, ThTiles tiles, const Tensor& P_l, const Tensor& P_w, const Tensor& bias4,
             const Tensor& mask4, bool tensor_cores, int threads, bool backward, int64_t limit) {
  Args<T> a{};
  a.p_l = P_l.defined() ? P_l.data_ptr<float>() : nullptr;
  a.p_w = P_w.defined() ? P_w.data_ptr<float>() : nullptr;
  if (bias4.defined()) a.bias = bias4.data_ptr<float>(), broadcast_strides(bias4, d, a.bias_stride);
  if (mask4.defined()) a.mask = mask4.data_ptr<bool>(), broadcast_strides(mask4, d, a.mask_stride);
  a.b = int(d.b), a.n = int(d.n), a.m = int(d.m), a.h_k = int(d.h_k), a.h = int(d.h), a.h_v = int(d.h_v);
  a.d_k = int(d.d_k), a.d_v = int(d.d_v), a.R = tiles.R, a.C = tiles.C;
  a.by_c = cuda_th::make_divider(tiles.C);
  a.tensor_cores = std::is_same_v<T, thx_bf16> && tensor_cores;
  a.widths = widths_for(sizeof(T) == 2, a.tensor_cores, P_l.defined(), P_w.defined(), threads);
  a.widths.pad = g_padded_heads && fused_th_pad_heads({tiles.R, tiles.C, a.h_k, a.h, a.h_v, a.d_k, a.d_v}, a.widths,
                                                       backward, limit);
  a.layout = layout(d, tiles, a.widths, backward);
  a.key_sums = cuda_th::KeySums::kVector;
  a.sums_in_registers = backward ? cuda_th::sums_in_registers(a.widths.threads, tiles.R, a.h_k, a.d_k, true)
                                 : cuda_th::sums_in_registers(a.widths.threads, tiles.R, a.h_v, a.d_v, false);
  return a;
}

// bf16 products on tensor cores: the launcher's device has them, its blocks (of `threads`) are
// whole warps and set_th_tensor_cores has not switched them off.
bool tensor_cores_for(const Launcher& l, int threads) { return l.tensor_cores && threads % 32 == 0 && g_tensor_cores; }

template <typename T>
T* ptr(const Tensor& t) {
  return reinterpret_cast<T*>(t.data_ptr());
}

struct Prepared {
  Tensor Q, K, V, P_l, P_w, bias4, mask4;
  Dims d;
  ThTiles tiles;
};
// tensor_cores: the forward's choice (tensor_cores_for), which with the threads per block sets
// what shared memory holds.
Prepared prepare(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l, const Tensor& P_w,
                 const Tensor& bias, const Tensor& mask, const Launcher& l, ThTiles tiles, bool backward,
                 bool tensor_cores, int threads) {
  Prepared p{Q.contiguous(), K.contiguous(), V.contiguous(),
             P_l.defined() ? P_l.to(torch::kFloat32).contiguous() : Tensor(),
             P_w.defined() ? P_w.to(torch::kFloat32).contiguous() : Tensor(),
             bias.defined() ? four(bias.to(torch::kFloat32)) : Tensor(),
             mask.defined() ? four(mask.to(torch::kBool)) : Tensor(),
             dims(Q, K, V, P_l, P_w), tiles};
  const bool bf16 = Q.scalar_type() == torch::kBFloat16;
  const cuda_th::Widths w = widths_for(bf16, tensor_cores, P_l.defined(), P_w.defined(), threads);
  const Dims& d = p.d;
  if (p.tiles.R <= 0 || p.tiles.C <= 0) {
    const ThLaunch forced = launch_settings();
    p.tiles = backward ? forced.backward : forced.forward;
    if (p.tiles.R > 0) {
      const std::string why = tiles_unfit(d, p.tiles, w, backward, l.shared_limit_bytes, "");
      TORCH_CHECK(why.empty(), "fused talking-heads: the forced ", why);
    }
  }
  if (p.tiles.R <= 0 || p.tiles.C <= 0)
    p.tiles = fused_th_tiles(int(d.h_k), int(d.h), int(d.h_v), int(d.d_k), int(d.d_v), l.shared_limit_bytes,
                             backward, w);
  TORCH_CHECK(p.tiles.R > 0 && p.tiles.C > 0, "fused talking-heads: no tile fits the shared memory");
  return p;
}

struct FusedThFn : torch::autograd::Function<FusedThFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l_in,
                        const Tensor& P_w_in, const Tensor& bias_in, const Tensor& mask_in, int64_t launcher,
                        int64_t R, int64_t C) {
    const Launcher& l = *reinterpret_cast<const Launcher*>(launcher);
    const int forced_threads = launch_settings().threads, threads = forced_threads > 0 ? forced_threads : l.threads;
    const bool tensor_cores = tensor_cores_for(l, threads);
    const Prepared p = prepare(Q, K, V, present(P_l_in), present(P_w_in), present(bias_in), present(mask_in), l,
                               {int(R), int(C)}, false, tensor_cores, threads);
    const Dims& d = p.d;
    Tensor O = torch::empty({d.b, d.n, d.h_v, d.d_v}, p.V.options());
    Tensor lse = torch::empty({d.b, d.h, d.n}, p.Q.options().dtype(torch::kFloat32));
    const unsigned gx = unsigned((d.n + p.tiles.R - 1) / p.tiles.R), gy = unsigned(d.b);
    bool padded = false;
    auto run = [&](auto tag, auto fn) {
      using T = decltype(tag);
      Args<T> a =
          args<T>(d, p.tiles, p.P_l, p.P_w, p.bias4, p.mask4, tensor_cores, threads, false, l.shared_limit_bytes);
      padded = a.widths.pad;
      a.q = ptr<T>(p.Q), a.k = ptr<T>(p.K), a.v = ptr<T>(p.V), a.o = ptr<T>(O), a.lse = lse.data_ptr<float>();
      fn(a, gx, gy, threads, a.layout.bytes);
    };
    if (Q.scalar_type() == torch::kBFloat16) run(thx_bf16{}, l.forward_bf16);
    else run(float{}, l.forward_f32);
    record(false, p.tiles, threads, launch_settings().key_sums, padded);
    ctx->save_for_backward({Q, K, V, P_l_in, P_w_in, bias_in, mask_in, lse});
    ctx->saved_data["launcher"] = launcher;
    ctx->saved_data["tensor_cores"] = tensor_cores;  // the backward rounds as the forward did
    ctx->saved_data["threads"] = int64_t(threads);
    ctx->saved_data["R"] = R;  // as asked: 0 lets the backward choose its own (it needs more memory)
    ctx->saved_data["C"] = C;
    return O;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // (attention_core does not route here under deterministic algorithms; a direct caller is refused)
    at::globalContext().alertNotDeterministic("thx's fused talking-heads backward (dK, dV and dbias by atomics)");
    const auto s = ctx->get_saved_variables();
    const Launcher& l = *reinterpret_cast<const Launcher*>(ctx->saved_data["launcher"].toInt());
    const Tensor bias = present(s[5]);
    const bool tensor_cores = ctx->saved_data["tensor_cores"].toBool();
    const int threads = int(ctx->saved_data["threads"].toInt());
    const cuda_th::KeySums key_sums = launch_settings().key_sums;
    const Prepared p = prepare(s[0], s[1], s[2], present(s[3]), present(s[4]), bias, present(s[6]), l,
                               {int(ctx->saved_data["R"].toInt()), int(ctx->saved_data["C"].toInt())}, true,
                               tensor_cores, threads);
    const Dims& d = p.d;
    const auto wide = s[7].options();
    const Tensor dO = grads[0].to(p.V.scalar_type()).contiguous();
    Tensor dQ = torch::empty_like(p.Q), dK = torch::zeros(p.K.sizes(), wide), dV = torch::zeros(p.V.sizes(), wide);
    const unsigned gx = unsigned((d.n + p.tiles.R - 1) / p.tiles.R), gy = unsigned(d.b);
    const int64_t blocks = int64_t(gx) * gy;
    Tensor dP_l = p.P_l.defined() ? torch::zeros({blocks, d.h_k, d.h}, wide) : Tensor();
    Tensor dP_w = p.P_w.defined() ? torch::zeros({blocks, d.h, d.h_v}, wide) : Tensor();
    Tensor dbias4 = p.bias4.defined() ? torch::zeros(p.bias4.sizes(), wide) : Tensor();
    bool padded = false;
    auto run = [&](auto tag, auto fn) {
      using T = decltype(tag);
      Args<T> a =
          args<T>(d, p.tiles, p.P_l, p.P_w, p.bias4, p.mask4, tensor_cores, threads, true, l.shared_limit_bytes);
      padded = a.widths.pad;
      a.q = ptr<T>(p.Q), a.k = ptr<T>(p.K), a.v = ptr<T>(p.V), a.lse = s[7].data_ptr<float>();
      a.grad_o = ptr<T>(dO), a.grad_q = ptr<T>(dQ), a.grad_k = dK.data_ptr<float>(), a.grad_v = dV.data_ptr<float>();
      if (dbias4.defined()) a.grad_bias = dbias4.data_ptr<float>(), broadcast_strides(dbias4, d, a.grad_bias_stride);
      a.grad_p_l = dP_l.defined() ? dP_l.data_ptr<float>() : nullptr;
      a.grad_p_w = dP_w.defined() ? dP_w.data_ptr<float>() : nullptr;
      a.key_sums = key_sums;
      fn(a, gx, gy, threads, a.layout.bytes);
    };
    if (p.Q.scalar_type() == torch::kBFloat16) run(thx_bf16{}, l.backward_bf16);
    else run(float{}, l.backward_f32);
    record(true, p.tiles, threads, key_sums, padded);
    auto back = [](const Tensor& g, const Tensor& like) { return g.defined() ? g.to(like.scalar_type()) : Tensor(); };
    return {dQ,
            dK.to(p.K.scalar_type()),
            dV.to(p.V.scalar_type()),
            dP_l.defined() ? back(dP_l.sum(0), s[3]) : Tensor(),
            dP_w.defined() ? back(dP_w.sum(0), s[4]) : Tensor(),
            bias.defined() ? back(dbias4.reshape(bias.sizes()), bias) : Tensor(),
            Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

bool broadcastable(const Tensor& t, const Dims& d) {
  if (t.dim() > 4) return false;
  const int64_t full[4] = {d.b, d.h, d.n, d.m};
  for (int64_t i = 0; i < t.dim(); ++i) {
    const int64_t s = t.size(t.dim() - 1 - i), f = full[3 - i];
    if (s != 1 && s != f) return false;
  }
  return true;
}

}  // namespace

ThTiles fused_th_tiles(int h_k, int h, int h_v, int d_k, int d_v, int64_t shared_limit_bytes, bool backward,
                       const cuda_th::Widths& widths) {
  static const std::pair<int, int> kTiles[] = {{64, 64}, {64, 32}, {32, 32}, {32, 16}, {16, 16}, {16, 8}, {8, 8},
                                               {8, 4},   {4, 4},   {4, 2},   {2, 2},   {2, 1},   {1, 1}};
  for (const auto& [R, C] : kTiles)
    if (cuda_th::kernel_layout({R, C, h_k, h, h_v, d_k, d_v}, widths, backward).bytes <= shared_limit_bytes)
      return {R, C};
  return {};
}

std::string fused_th_unsupported(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l,
                                 const Tensor& P_w, const Tensor& bias, const Tensor& mask, const Launcher& l) {
  if (Q.dim() != 4 || K.dim() != 4 || V.dim() != 4) return "Q, K, V are not [b,n,heads,dim]";
  const auto t = Q.scalar_type();
  if (t != torch::kFloat32 && t != torch::kBFloat16) return "dtype is not fp32 or bf16";
  if (K.scalar_type() != t || V.scalar_type() != t) return "Q, K and V differ in dtype";
  if (!P_l.defined() && !P_w.defined()) return "no head mixing (multi-head takes SDPA)";
  const Dims d = dims(Q, K, V, P_l, P_w);
  if (K.size(0) != d.b || V.size(0) != d.b || V.size(1) != d.m || K.size(2) != d.h_k || K.size(3) != d.d_k)
    return "Q, K, V shapes do not match";
  if (P_l.defined() && (P_l.dim() != 2 || P_l.size(0) != d.h_k)) return "P_l is not [h_k,h]";
  if (P_w.defined() && (P_w.dim() != 2 || P_w.size(0) != d.h || P_w.size(1) != d.h_v)) return "P_w is not [h,h_v]";
  if (!P_w.defined() && d.h_v != d.h) return "without P_w, h_v must equal h";
  if (!P_l.defined() && d.h_k != d.h) return "without P_l, h_k must equal h";
  if (bias.defined() && !broadcastable(bias, d)) return "bias does not broadcast to [b,h,n,m]";
  if (mask.defined() && (!broadcastable(mask, d) || mask.scalar_type() != torch::kBool))
    return "mask is not bool broadcastable to [b,h,n,m]";
  for (const Tensor* x : {&Q, &K, &V, &P_l, &P_w, &bias, &mask})
    if (x->defined() && x->device() != Q.device()) return "tensors on different devices";
  if (d.b > 65535) return "batch above 65,535 (grid y)";
  if (d.b == 0 || d.n == 0) return "no example or no query row (an empty grid)";
  // With fp32 planes, the most any run of this problem keeps (tensor cores may be switched off).
  const cuda_th::Widths widest = widths_for(t == torch::kBFloat16, false, false, false, 0);
  for (bool backward : {false, true})
    if (fused_th_tiles(int(d.h_k), int(d.h), int(d.h_v), int(d.d_k), int(d.d_v), l.shared_limit_bytes, backward,
                       widest).R == 0)
      return "one row and one key do not fit the shared memory";
  return "";
}

Tensor fused_th_attention_core(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l, const Tensor& P_w,
                               const Tensor& bias, const Tensor& mask, const Launcher& launcher, ThTiles tiles) {
  return FusedThFn::apply(Q, K, V, placeholder(P_l), placeholder(P_w), placeholder(bias), placeholder(mask),
                          reinterpret_cast<int64_t>(&launcher), int64_t(tiles.R), int64_t(tiles.C));
}

void set_th_tensor_cores(bool enabled) { g_tensor_cores = enabled; }
bool th_tensor_cores() { return g_tensor_cores; }
void set_th_padded_heads(bool enabled) { g_padded_heads = enabled; }

bool fused_th_pad_heads(const cuda_th::LayoutShape& x, cuda_th::Widths w, bool backward, int64_t limit) {
  if ((w.j != 2 && w.u != 2) || (x.h_k % 16 == 0 && x.h % 16 == 0 && x.h_v % 16 == 0)) return false;
  w.pad = false;
  const int64_t plain = cuda_th::kernel_layout(x, w, backward).bytes;
  w.pad = true;
  const int64_t padded = cuda_th::kernel_layout(x, w, backward).bytes;
  const int64_t most = backward ? cuda_th::kBackwardBlocksPerSM : cuda_th::kForwardBlocksPerSM;
  auto blocks = [&](int64_t bytes) { return std::min(most, (limit + 1024) / (bytes + 1024)); };
  return padded <= limit && blocks(padded) == blocks(plain);
}

void set_th_launch(const ThLaunch& launch) {
  TORCH_CHECK(launch.threads >= 0 && launch.threads <= cuda_th::kMaxThreads, "set_th_launch: threads ", launch.threads);
  std::lock_guard<std::mutex> lock(g_launch_mu);
  g_launch = launch;
}

ThLaunch fused_th_last_launch() {
  std::lock_guard<std::mutex> lock(g_launch_mu);
  return g_last;
}

std::string fused_th_launch_unfit(const ThLaunch& launch, int h, int d, bool bf16, const Launcher& l) {
  const int threads = launch.threads > 0 ? launch.threads : l.threads;
  const cuda_th::Widths w = widths_for(bf16, tensor_cores_for(l, threads), true, true, threads);
  const Dims dims{1, 1, 1, h, h, h, d, d};
  const std::string problem = " at h = " + std::to_string(h) + (bf16 ? " (bf16)" : " (fp32)");
  for (bool backward : {false, true}) {
    const ThTiles t = backward ? launch.backward : launch.forward;
    const std::string why = t.R > 0 ? tiles_unfit(dims, t, w, backward, l.shared_limit_bytes, problem) : "";
    if (!why.empty()) return why;
  }
  return "";
}

#if !THX_CUDA_KERNELS
const cuda_th::Launcher* cuda_th_launcher() { return nullptr; }
#endif

}  // namespace thx
