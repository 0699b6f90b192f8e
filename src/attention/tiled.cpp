#include "attention/tiled.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "attention/cuda/th_rows_args.h"
#include "attention/optional_tensor.h"
#include "attention/th_problem.h"
#include "common/torch_compat.h"

namespace thx {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Tensor as_fp32(const Tensor& t) { return t.scalar_type() == torch::kFloat64 ? t : t.to(torch::kFloat32); }

// t (broadcastable to [b,h,n,m]) as 4 dims, and its rows [i0, i0+ni) where it has rows.
Tensor four(const Tensor& t) {
  Tensor r = t;
  while (r.defined() && r.dim() < 4) r = r.unsqueeze(0);
  return r;
}
Tensor rows(const Tensor& t, int64_t i0, int64_t ni) { return t.size(2) == 1 ? t : t.narrow(2, i0, ni); }


// What a block of rows' element-wise work (between J = Q K^T and U V) leaves for the products and
// the projections' gradients: U (in V's dtype); backward also dJ (in Q's dtype), and either the
// block's gradients of P_l and P_w (the row kernels sum them) or what ATen sums them from: W and
// dL (fp32) and the fp32 copies of J and dU; dL (fp32) where the bias needs it.
struct Rows {
  Tensor U, dJ, W, dL, J32, dU32, dP_l, dP_w;  // (J32, dU32: in the operands' dtype where narrow)
};

// The problem in heads-major views: Qh [b,h_k,n,d_k], Kh [b,h_k,m,d_k], Vh [b,h_v,m,d_v].
struct Problem {
  Tensor Qh, Kh, Vh, P_l, P_w, bias, mask;  // P_l, P_w, bias fp32 (or fp64); bias and mask 4-d
  int64_t block;
  const cuda_th::RowsLauncher* kernels;  // the row kernels (th_rows_args.h), or null: ATen
  int64_t h;
  // ATen's element-wise work in the operands' dtype (`--th-path tiled-gemm`): J, the logits, W, U
  // and their gradients as the products give them, the mixings products of that dtype (P_l and
  // P_w rounded to it), the softmax's statistics in fp32 (ATen's), the bias's and the mixings'
  // gradient sums in fp32. Else (the default) all of it in fp32.
  bool narrow = false;
  // Where narrow and the operands are bf16 (or fp16): P_l, P_l^T, P_w, P_w^T as mix_heads_aligned
  // takes them (aligned_mixing), made once for every block; else undefined.
  Tensor A_l, A_lt, A_w, A_wt;
  // Where narrow and a launcher was given: its softmax kernels for the bias, the mask and the
  // softmax alone (rows_softmax), between the mixings' products; else null.
  const cuda_th::RowsLauncher* softmax = nullptr;

  // T mixed by P (fp32; A: P's aligned form) in T's dtype where narrow (for fp32 and fp64 T,
  // mix_heads: the same bits as without the switch), else in fp32.
  Tensor mix(const Tensor& T, const Tensor& P, const Tensor& A) const {
    const bool reduced = T.scalar_type() != torch::kFloat32 && T.scalar_type() != torch::kFloat64;
    if (!narrow || !reduced) return mix_heads(T, P);
    const bool made = A.defined() && A.scalar_type() == T.scalar_type();
    return mix_heads_aligned(T, made ? A : aligned_mixing(P, T.scalar_type()));
  }
  // A product's output (J, dU) as the element-wise work takes it: in Q's dtype where narrow (one
  // dtype for all of it where V's differs), else in fp32.
  Tensor work(const Tensor& t) const { return narrow ? t.to(Qh.scalar_type()) : as_fp32(t); }

  // Heads-major copies, once, for the blocks of rows (not for the flash kernels): a batched product
  // cannot take [b,n,h,d] transposed as one batch stride, and would copy it again for every block.
  void heads_major(const Tensor& Q, const Tensor& K, const Tensor& V) {
    Qh = Q.transpose(1, 2).contiguous(), Kh = K.transpose(1, 2).contiguous(), Vh = V.transpose(1, 2).contiguous();
  }
  // J = Q K^T of rows [i0, i0+ni), [b,h_k,I,m] in the operands' dtype.
  Tensor products(int64_t i0, int64_t ni) const { return torch::matmul(Qh.narrow(2, i0, ni), Kh.transpose(2, 3)); }
  // The weights W [b,h,I,m] of rows [i0, i0+ni) from J (fp32, fp64, or the operands' dtype where
  // narrow): the logits L (J mixed by P_l, which keeps J for P_l's gradient; else J itself, a
  // block's own product, which nothing reads again), then the bias, the mask and the softmax over
  // the keys: one launch of thx's softmax kernels (rows_softmax) where `softmax` is given and
  // there is a bias or a mask, else ATen's, in place (masked_softmax_in_place, th_problem.h). A
  // row with every key masked gets 0. The backward recomputes them the same way, so nothing is kept.
  Tensor weights(const Tensor& J, int64_t i0, int64_t ni) const {
    const Tensor L = P_l.defined() ? mix(J, P_l, A_l) : J;
    const Tensor b = bias.defined() ? rows(bias, i0, ni) : bias, m = mask.defined() ? rows(mask, i0, ni) : mask;
    const Tensor W = softmax && (b.defined() || m.defined()) ? rows_softmax(L, b, m, softmax) : Tensor();
    return W.defined() ? W : masked_softmax_in_place(L, b, m);
  }

  // ATen's element-wise work; forward fills U only.
  Rows aten_rows(const Tensor& J, const Tensor& dU, int64_t i0, int64_t ni) const {
    Rows r;
    r.J32 = work(J);
    const Tensor W = weights(r.J32, i0, ni);  // [b,h,I,m]
    r.U = (P_w.defined() ? mix(W, P_w, A_w) : W).to(Vh.scalar_type());
    if (!dU.defined()) return r;
    r.dU32 = work(dU);
    const Tensor dW = P_w.defined() ? mix(r.dU32, P_w.t(), A_wt) : r.dU32;  // [b,h,I,m]
    r.W = W;
    r.dL = at::_softmax_backward_data(dW, W, -1, W.scalar_type());  // W * (dW - sum W dW)
    r.dJ = (P_l.defined() ? mix(r.dL, P_l.t(), A_lt) : r.dL).to(Qh.scalar_type());
    return r;
  }

  // The row kernels' element-wise work: forward writes the rows' LSE into lse [b,h,n], the
  // backward reads it.
  template <typename T>
  Rows kernel_rows(const Tensor& J, const Tensor& dU, int64_t i0, int64_t ni, const Tensor& lse) const;
  Rows element_wise(const Tensor& J, const Tensor& dU, int64_t i0, int64_t ni, const Tensor& lse) const {
    if (!kernels) return aten_rows(J, dU, i0, ni);
    return J.scalar_type() == torch::kBFloat16 ? kernel_rows<thx_bf16>(J, dU, i0, ni, lse)
                                               : kernel_rows<float>(J, dU, i0, ni, lse);
  }
};

// The strides of t (4-d, broadcastable to [b,h,n,m]) as the row kernels read it: 0 along a dim of size 1.
void broadcast_strides(const Tensor& t, int64_t (&s)[4]) {
  for (int d = 0; d < 4; ++d) s[d] = t.size(d) == 1 ? 0 : t.stride(d);
}
// The same for a contiguous tensor of these sizes, before it is allocated.
void contiguous_broadcast_strides(at::IntArrayRef sizes, int64_t (&s)[4]) {
  int64_t step = 1;
  for (int d = 3; d >= 0; --d) s[d] = sizes[d] == 1 ? 0 : step, step *= sizes[d];
}

template <typename T>
Rows Problem::kernel_rows(const Tensor& J, const Tensor& dU, int64_t i0, int64_t ni, const Tensor& lse) const {
  const bool backward = dU.defined();
  const int64_t b = J.size(0), h_k = J.size(1), m = J.size(3), h_v = P_w.defined() ? P_w.size(1) : h;
  const auto planes = J.options();
  Rows r;
  r.U = torch::empty({b, h_v, ni, m}, planes);
  cuda_th::RowsArgs<T> a;
  a.J = static_cast<const T*>(J.data_ptr());
  if (P_l.defined()) a.P_l = P_l.data_ptr<float>();
  if (P_w.defined()) a.P_w = P_w.data_ptr<float>();
  if (bias.defined()) a.bias = rows(bias, i0, ni).data_ptr<float>(), broadcast_strides(bias, a.bias_stride);
  if (mask.defined()) {
    a.mask = reinterpret_cast<const uint8_t*>(rows(mask, i0, ni).data_ptr<bool>());
    broadcast_strides(mask, a.mask_stride);
  }
  a.lse = lse.data_ptr<float>(), a.lse_n = lse.size(2), a.lse_row0 = i0;
  a.U = static_cast<T*>(r.U.data_ptr());
  a.b = int(b), a.h_k = int(h_k), a.h = int(h), a.h_v = int(h_v), a.rows = int(ni), a.m = int(m);
  // The grid: the examples along x, fastest, so that the blocks running together take the same
  // rows of many examples and share their rows of a bias that broadcasts over the examples (T5's
  // [1,h,n,m]) in L2; the blocks of rows along y, at most 65,535 of them.
  a.rows_per_block = int(std::max<int64_t>(b * ni >= kernels->group_rows_from ? 4 : 1, (ni + 65534) / 65535));
  const unsigned gx = unsigned(b), gy = unsigned((ni + a.rows_per_block - 1) / a.rows_per_block);
  const int H = cuda_th::row_heads_bucket(int(std::max({h_k, h, h_v}))), threads = kernels->threads;
  // bf16 on tensor cores where the launcher has them, up to 48 heads and where their 32-bit offsets
  // hold (the same in the forward and the backward of a block): they sum the projections' gradients
  // at every such H.
  const bool tc = std::is_same_v<T, thx_bf16> && kernels->forward_bf16_tc && kernels->backward_bf16_tc &&
                  H <= cuda_th::kRowTcHeadsMax &&
                  cuda_th::rows_tc_offsets_fit(std::max({h_k, h, h_v}), ni, m, h, a.bias_stride, a.mask_stride);
  const bool sum_here = tc || cuda_th::rows_sum_projections(H);  // else ATen sums them from W and dL
  const int64_t sums = cuda_th::rows_partial_sums(a.h_k, a.h, a.h_v, a.P_l, a.P_w);
  Tensor partial;  // [blocks, sums]: each block's sums of the projections' gradients
  if (backward) {
    const auto fp32 = planes.dtype(torch::kFloat32);
    r.dJ = torch::empty({b, h_k, ni, m}, planes);
    if (!sum_here && P_w.defined()) r.W = torch::empty({b, h, ni, m}, fp32);
    if (bias.defined() || (!sum_here && P_l.defined())) r.dL = torch::empty({b, h, ni, m}, fp32);
    if (sum_here && sums > 0) partial = torch::empty({int64_t(gx) * gy, sums}, fp32);
    a.dU = static_cast<const T*>(dU.data_ptr()), a.dJ = static_cast<T*>(r.dJ.data_ptr());
    a.W = r.W.defined() ? r.W.data_ptr<float>() : nullptr, a.dL = r.dL.defined() ? r.dL.data_ptr<float>() : nullptr;
    a.dP = partial.defined() ? partial.data_ptr<float>() : nullptr;
  }
  const int64_t bytes =
      tc ? cuda_th::rows_tc_layout(H, threads / 32, a.P_l, a.P_w, backward, a.dP).bytes
         : cuda_th::rows_shared_bytes(H, a.h_k, a.h, a.h_v, a.P_l, a.P_w, threads, backward);
  if constexpr (std::is_same_v<T, float>)
    (backward ? kernels->backward_f32 : kernels->forward_f32)(a, H, gx, gy, threads, bytes);
  else if (tc)
    (backward ? kernels->backward_bf16_tc : kernels->forward_bf16_tc)(a, H, gx, gy, threads, bytes);
  else
    (backward ? kernels->backward_bf16 : kernels->forward_bf16)(a, H, gx, gy, threads, bytes);
  if (partial.defined()) {
    const Tensor total = partial.sum(0);
    const int64_t nl = P_l.defined() ? h_k * h : 0;
    if (P_l.defined()) r.dP_l = total.narrow(0, 0, nl).view({h_k, h});
    if (P_w.defined()) r.dP_w = total.narrow(0, nl, h * h_v).view({h, h_v});
  }
  return r;
}

Problem problem(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l, const Tensor& P_w,
                const Tensor& bias, const Tensor& mask, int64_t block_rows, const cuda_th::RowsLauncher* kernels,
                bool narrow) {
  TORCH_CHECK(Q.dim() == 4 && K.dim() == 4 && V.dim() == 4, "tiled attention: Q, K, V must be [b,n,heads,dim]");
  // (the row and flash kernels index every plane by these counts: a mismatch would read and write past them)
  const int64_t h_k = Q.size(2), h = P_l.defined() ? P_l.size(1) : h_k, h_v = V.size(2);
  TORCH_CHECK(K.size(2) == h_k && (!P_l.defined() || P_l.size(0) == h_k) &&
                  (P_w.defined() ? P_w.size(0) == h && P_w.size(1) == h_v : h_v == h),
              "tiled attention: heads of Q ", h_k, ", K ", K.size(2), ", V ", h_v, " do not fit P_l ",
              P_l.defined() ? P_l.sizes() : at::IntArrayRef{}, " and P_w ",
              P_w.defined() ? P_w.sizes() : at::IntArrayRef{}, " (without P_l, h = Q's heads; without P_w, V's = h)");
  check_broadcasts("tiled attention", "bias", bias, {Q.size(0), h, Q.size(1), K.size(1)});
  check_broadcasts("tiled attention", "mask", mask, {Q.size(0), h, Q.size(1), K.size(1)});
  // Where narrow, the launcher's softmax takes the bias, mask and softmax alone where it takes the
  // block (rows_softmax says), and the row kernels nothing.
  const cuda_th::RowsLauncher* softmax = narrow ? kernels : nullptr;
  if (narrow || (kernels && !tiled_rows_unsupported(Q, K, V, P_l, mask).empty())) kernels = nullptr;
  // The row kernels read P_l, P_w and the bias in fp32 (contiguous matrices; the bias through its
  // strides). The heads-major copies come with heads_major, where the blocks of rows need them.
  auto wide = [&](const Tensor& t) { return !t.defined() ? t : kernels ? t.to(torch::kFloat32) : as_fp32(t); };
  auto matrix = [&](const Tensor& t) { return kernels && t.defined() ? wide(t).contiguous() : wide(t); };
  Problem p;
  p.P_l = matrix(P_l), p.P_w = matrix(P_w), p.bias = four(wide(bias)), p.mask = four(mask);
  p.block = block_rows, p.kernels = kernels, p.h = P_l.defined() ? P_l.size(1) : Q.size(2);
  p.narrow = narrow, p.softmax = softmax;
  const int64_t n = Q.size(1), m = K.size(1);
  if (p.block <= 0) {
    const int64_t heads = std::max({Q.size(2), V.size(2), p.h});
    const int64_t per_row = std::max<int64_t>(1, Q.size(0) * heads * m * 4);
    p.block = std::max<int64_t>(16, (int64_t{512} << 20) / per_row);
  }
  p.block = std::min(p.block, std::max<int64_t>(n, 1));
  const auto dt = Q.scalar_type();
  if (p.narrow && dt != torch::kFloat32 && dt != torch::kFloat64) {
    if (p.P_l.defined()) p.A_l = aligned_mixing(p.P_l, dt), p.A_lt = aligned_mixing(p.P_l.t(), dt);
    if (p.P_w.defined()) p.A_w = aligned_mixing(p.P_w, dt), p.A_wt = aligned_mixing(p.P_w.t(), dt);
  }
  return p;
}

// X [b,m,heads,d] as X^T [b,heads,d,m8], zero from key m on (the flash kernels' B operand whose k
// is the keys: V's forward, K's backward).
Tensor keys_transposed(const Tensor& X, int64_t m8) {
  Tensor t = torch::zeros({X.size(0), X.size(2), X.size(3), m8}, X.options());
  t.narrow(3, 0, X.size(1)).copy_(X.permute({0, 2, 3, 1}));
  return t;
}

// What both flash kernels take from the problem: Q, K (contiguous), the mixings, the bias and mask
// with their strides, the rows' LSE, and the sizes.
cuda_th::FlashArgs<thx_bf16> flash_args(const Problem& p, const Tensor& Q, const Tensor& K, const Tensor& V,
                                        const Tensor& lse) {
  cuda_th::FlashArgs<thx_bf16> a;
  if (p.bias.defined()) a.bias = p.bias.data_ptr<float>(), broadcast_strides(p.bias, a.bias_stride);
  if (p.mask.defined())
    a.mask = reinterpret_cast<const uint8_t*>(p.mask.data_ptr<bool>()), broadcast_strides(p.mask, a.mask_stride);
  if (p.P_l.defined()) a.P_l = p.P_l.data_ptr<float>();
  if (p.P_w.defined()) a.P_w = p.P_w.data_ptr<float>();
  a.Q = static_cast<const thx_bf16*>(Q.data_ptr()), a.K = static_cast<const thx_bf16*>(K.data_ptr());
  a.lse = lse.data_ptr<float>();
  a.b = int(Q.size(0)), a.n = int(Q.size(1)), a.m = int(K.size(1)), a.m8 = (a.m + 7) / 8 * 8;
  a.h_k = int(Q.size(2)), a.h = int(p.h), a.h_v = int(V.size(2)), a.d_k = int(Q.size(3)), a.d_v = int(V.size(3));
  return a;
}
bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

// O [b,n,h_v,d_v] by the flash forward in one launch, with the rows' LSE into lse, where the
// launcher has it and it takes the problem (th_flash_args.h); else undefined.
Tensor flash_forward(const Problem& p, const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& lse) {
  if (!p.kernels->flash_forward || Q.scalar_type() != torch::kBFloat16) return Tensor();
  const Tensor Qc = Q.contiguous(), Kc = K.contiguous();
  cuda_th::FlashArgs<thx_bf16> a = flash_args(p, Qc, Kc, V, lse);
  Tensor O = torch::empty({a.b, a.n, a.h_v, a.d_v}, V.options());
  if (!cuda_th::flash_unsupported(a.h_k, a.h, a.h_v, a.d_k, a.d_v, a.n, a.m, a.bias_stride, a.mask_stride,
                                  aligned16(Qc) && aligned16(Kc) && aligned16(O), p.kernels->flash_shared_limit)
           .empty())
    return Tensor();
  const Tensor Vt = keys_transposed(V, a.m8);
  a.Vt = static_cast<const thx_bf16*>(Vt.data_ptr()), a.O = static_cast<thx_bf16*>(O.data_ptr());
  const cuda_th::FlashBucket B = cuda_th::flash_bucket(std::max({a.h_k, a.h, a.h_v}), a.d_v);
  // The grid as the row kernels': the examples along x, fastest (a bias broadcast over them read from L2).
  const unsigned row_blocks = unsigned((a.n + cuda_th::kFlashRows - 1) / cuda_th::kFlashRows);
  const int64_t bytes = cuda_th::flash_layout(B.H, a.h_k, a.d_k, B.DV).bytes;
  p.kernels->flash_forward(a, B.H, B.DV, unsigned(a.b), row_blocks, bytes);
  return O;
}

// The gradients (dQ, dK, dV, dP_l, dP_w, dbias, in the inputs' dtypes and shapes) by the flash
// backward where the launcher has it and it takes the problem (th_flash_args.h); else empty. Its
// forward was the flash forward, whose LSE it reads.
torch::autograd::variable_list flash_backward(const Problem& p, const std::vector<Tensor>& saved, const Tensor& dO) {
  const Tensor &Q = saved[0], &K = saved[1], &V = saved[2], &lse = saved[7];
  if (!p.kernels->flash_backward || dO.scalar_type() != torch::kBFloat16) return {};
  const Tensor Qc = Q.contiguous(), Kc = K.contiguous(), Vc = V.contiguous(), dOc = dO.contiguous();
  cuda_th::FlashBackArgs<thx_bf16> a;
  a.f = flash_args(p, Qc, Kc, Vc, lse);
  const cuda_th::FlashArgs<thx_bf16>& f = a.f;
  const int64_t b = f.b, n = f.n, m = f.m, h_k = f.h_k, d_k = f.d_k, h_v = f.h_v, d_v = f.d_v;
  const auto fp32 = Q.options().dtype(torch::kFloat32);
  // (the bias's gradient allocated only once the kernels take the problem: at 48 heads and n = m =
  // 2048 it is 800 MB, which a fallback would hold for nothing)
  if (p.bias.defined()) contiguous_broadcast_strides(p.bias.sizes(), a.dbias_stride);
  if (!cuda_th::flash_back_unsupported(f.h_k, f.h, f.h_v, f.d_k, f.d_v, b, n, m, f.bias_stride, f.mask_stride,
                                       a.dbias_stride,
                                       aligned16(Qc) && aligned16(Kc) && aligned16(Vc) && aligned16(dOc),
                                       p.kernels->flash_shared_limit)
           .empty())
    return {};
  Tensor dbias = p.bias.defined() ? torch::zeros(p.bias.sizes(), fp32) : Tensor();
  if (dbias.defined()) broadcast_strides(dbias, a.dbias_stride);
  const Tensor Kt = keys_transposed(Kc, f.m8);
  Tensor D = torch::zeros({b, p.h, n}, fp32), dQ = torch::zeros({b, n, h_k, d_k}, fp32);
  Tensor dK = torch::empty({b, m, h_k, d_k}, K.options()), dV = torch::empty({b, m, h_v, d_v}, V.options());
  const unsigned gx = unsigned((m + 15) / 16), gy = unsigned(b);
  const int64_t sums = cuda_th::rows_partial_sums(f.h_k, f.h, f.h_v, p.P_l.defined(), p.P_w.defined());
  Tensor partial = sums > 0 ? torch::empty({int64_t(gx) * gy, sums}, fp32) : Tensor();
  a.V = static_cast<const thx_bf16*>(Vc.data_ptr()), a.dO = static_cast<const thx_bf16*>(dOc.data_ptr());
  a.Kt = static_cast<const thx_bf16*>(Kt.data_ptr()), a.D = D.data_ptr<float>(), a.dQ = dQ.data_ptr<float>();
  a.dK = static_cast<thx_bf16*>(dK.data_ptr()), a.dV = static_cast<thx_bf16*>(dV.data_ptr());
  if (dbias.defined()) a.dbias = dbias.data_ptr<float>();
  if (partial.defined()) a.dP = partial.data_ptr<float>();
  const cuda_th::FlashBucket B = cuda_th::flash_bucket(int(std::max({h_k, p.h, h_v})), int(std::max(d_k, d_v)));
  // The bias's gradient four keys at a time where it is aligned for that and its stage fits.
  auto layout = [&](bool staged) {
    return cuda_th::flash_back_layout(B.H, int(h_k), int(d_k), int(h_v), int(d_v), staged,
                                      cuda_th::flash_back_keys_staged(B.DV))
        .bytes;
  };
  a.bias_staged = dbias.defined() && cuda_th::flash_bias_vectors(a.dbias_stride, m) && aligned16(dbias) &&
                  layout(true) <= p.kernels->flash_shared_limit;
  p.kernels->flash_backward(a, B.H, B.DV, false, gx, gy, layout(false));                // pass D (no stage)
  p.kernels->flash_backward(a, B.H, B.DV, true, gx, gy, layout(a.bias_staged != 0));  // pass G
  Tensor dP_l, dP_w;
  if (partial.defined()) {
    const Tensor total = partial.sum(0);
    const int64_t nl = p.P_l.defined() ? h_k * p.h : 0;
    if (p.P_l.defined()) dP_l = total.narrow(0, 0, nl).view({h_k, p.h}).to(saved[3].scalar_type());
    if (p.P_w.defined()) dP_w = total.narrow(0, nl, p.h * h_v).view({p.h, h_v}).to(saved[4].scalar_type());
  }
  if (dbias.defined()) dbias = dbias.sum_to_size(saved[5].sizes()).to(saved[5].scalar_type());
  return {dQ.to(Q.scalar_type()), dK, dV, dP_l, dP_w, dbias, Tensor(), Tensor(), Tensor(), Tensor()};
}

struct TiledFn : torch::autograd::Function<TiledFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l_in,
                        const Tensor& P_w_in, const Tensor& bias_in, const Tensor& mask_in, int64_t block_rows,
                        int64_t kernels_in, bool narrow) {
    const Tensor P_l = present(P_l_in), P_w = present(P_w_in), bias = present(bias_in), mask = present(mask_in);
    const auto* kernels = reinterpret_cast<const cuda_th::RowsLauncher*>(static_cast<intptr_t>(kernels_in));
    Problem p = problem(Q, K, V, P_l, P_w, bias, mask, block_rows, kernels, narrow);
    const int64_t b = Q.size(0), n = Q.size(1);
    // The rows' LSE where the row kernels run (they keep it for their backward), else nothing.
    const Tensor lse = p.kernels ? torch::empty({b, p.h, n}, Q.options().dtype(torch::kFloat32)) : Tensor();
    ctx->saved_data["block"] = p.block;
    ctx->saved_data["narrow"] = narrow;
    // (with the softmax's kernels too: the backward makes W again as the forward made it)
    ctx->saved_data["kernels"] = p.kernels || p.softmax ? kernels_in : int64_t{0};
    const Tensor flash = p.kernels ? flash_forward(p, Q, K, V, lse) : Tensor();
    ctx->saved_data["flash"] = flash.defined();
    if (flash.defined()) {
      ctx->save_for_backward({Q, K, V, P_l_in, P_w_in, bias_in, mask_in, lse});
      return flash;
    }
    p.heads_major(Q, K, V);
    Tensor O = torch::empty({b, V.size(2), n, V.size(3)}, V.options());  // [b,h_v,n,d_v]
    for (int64_t i0 = 0; i0 < n; i0 += p.block) {
      const int64_t ni = std::min(p.block, n - i0);
      const Rows r = p.element_wise(p.products(i0, ni), Tensor(), i0, ni, lse);
      O.narrow(2, i0, ni).copy_(torch::matmul(r.U, p.Vh));
    }
    ctx->save_for_backward({Q, K, V, P_l_in, P_w_in, bias_in, mask_in, placeholder(lse)});
    return O.transpose(1, 2);  // [b,n,h_v,d_v]
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const Tensor &Q = s[0], &K = s[1], &V = s[2], lse = present(s[7]);
    const Tensor P_l = present(s[3]), P_w = present(s[4]), bias = present(s[5]), mask = present(s[6]);
    const auto* kernels =
        reinterpret_cast<const cuda_th::RowsLauncher*>(static_cast<intptr_t>(ctx->saved_data["kernels"].toInt()));
    Problem p = problem(Q, K, V, P_l, P_w, bias, mask, ctx->saved_data["block"].toInt(), kernels,
                        ctx->saved_data["narrow"].toBool());
    TORCH_CHECK(!p.kernels == !lse.defined(), "tiled attention: the backward's path differs from its forward's");
    // (the flash backward adds by atomics: not under deterministic algorithms, common/determinism.h)
    if (ctx->saved_data["flash"].toBool() && !at::globalContext().deterministicAlgorithms()) {
      variable_list flash = flash_backward(p, s, grads[0]);
      if (!flash.empty()) return flash;
    }
    p.heads_major(Q, K, V);
    const Tensor dOh = grads[0].transpose(1, 2).contiguous();  // [b,h_v,n,d_v]
    const int64_t n = Q.size(1);
    const auto wide = Q.options().dtype(p.Qh.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32);
    Tensor dQh = torch::empty_like(p.Qh, at::MemoryFormat::Contiguous);
    Tensor dKh = torch::zeros(p.Kh.sizes(), wide), dVh = torch::zeros(p.Vh.sizes(), wide);
    Tensor dP_l = P_l.defined() ? torch::zeros_like(p.P_l) : Tensor(), dP_w = P_w.defined() ? torch::zeros_like(p.P_w) : Tensor();
    Tensor dbias = bias.defined() ? torch::zeros_like(p.bias) : Tensor();
    for (int64_t i0 = 0; i0 < n; i0 += p.block) {
      const int64_t ni = std::min(p.block, n - i0);
      const Tensor dOi = dOh.narrow(2, i0, ni), J = p.products(i0, ni);
      const Tensor dU = torch::matmul(dOi, p.Vh.transpose(2, 3));  // [b,h_v,I,m] in the operands' dtype
      const Rows r = p.element_wise(J, dU, i0, ni, lse);
      dVh.add_(torch::matmul(r.U.transpose(2, 3), dOi));
      if (P_w.defined())
        dP_w.add_(r.dP_w.defined() ? r.dP_w : projection_grad(r.W, r.dU32.defined() ? r.dU32 : as_fp32(dU)));
      if (bias.defined()) {
        Tensor share = r.dL;  // summed over the dims the bias broadcasts along (in fp32 where narrow)
        for (int64_t d : {0, 1, 3})
          if (p.bias.size(d) == 1) share = share.sum(d, true, dbias.scalar_type());
        if (p.bias.size(2) == 1) dbias.add_(share.sum(2, true, dbias.scalar_type()));
        else dbias.narrow(2, i0, ni).add_(share);
      }
      if (P_l.defined())
        dP_l.add_(r.dP_l.defined() ? r.dP_l : projection_grad(r.J32.defined() ? r.J32 : as_fp32(J), r.dL));
      dQh.narrow(2, i0, ni).copy_(torch::matmul(r.dJ, p.Kh));
      dKh.add_(torch::matmul(r.dJ.transpose(2, 3), p.Qh.narrow(2, i0, ni)));
    }
    if (dbias.defined()) dbias = dbias.sum_to_size(s[5].sizes()).to(s[5].scalar_type());
    return {dQh.transpose(1, 2), dKh.to(K.scalar_type()).transpose(1, 2), dVh.to(V.scalar_type()).transpose(1, 2),
            P_l.defined() ? dP_l.to(s[3].scalar_type()) : Tensor(), P_w.defined() ? dP_w.to(s[4].scalar_type()) : Tensor(),
            dbias, Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

}  // namespace

Tensor mix_heads(const Tensor& T, const Tensor& P) {
  const int64_t b = T.size(0), g = T.size(1), i = T.size(2), m = T.size(3);
  return torch::matmul(P.t(), T.reshape({b, g, i * m})).view({b, P.size(1), i, m});
}

Tensor projection_grad(const Tensor& A, const Tensor& B) {
  const int64_t b = A.size(0), im = A.size(2) * A.size(3);
  const Tensor A3 = A.reshape({b, A.size(1), im}), B3t = B.reshape({b, B.size(1), im}).transpose(1, 2);
  if (A.scalar_type() == torch::kFloat32 || A.scalar_type() == torch::kFloat64) return torch::matmul(A3, B3t).sum(0);
  return compat::bmm_wide(A3, B3t, torch::kFloat32).sum(0);
}

Tensor aligned_mixing(const Tensor& P, torch::ScalarType dtype) {
  const int64_t g = P.size(0), g2 = P.size(1);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor padded = torch::full({g, (g2 + 7) / 8 * 8}, nan, P.options().dtype(dtype));
  return padded.narrow(1, 0, g2).copy_(P).t();  // [g2, g], leading dimension 8k
}

Tensor mix_heads_aligned(const Tensor& T, const Tensor& Pt) {
  TORCH_CHECK(Pt.scalar_type() == T.scalar_type() && Pt.size(1) == T.size(1), "mix_heads_aligned: P^T ", Pt.sizes(),
              " ", Pt.scalar_type(), " for T ", T.sizes(), " ", T.scalar_type());
  const int64_t b = T.size(0), g = Pt.size(1), g2 = Pt.size(0), i = T.size(2), m = T.size(3);
  return torch::bmm(Pt.expand({b, g2, g}), T.reshape({b, g, i * m})).view({b, g2, i, m});
}

std::string tiled_rows_unsupported(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l,
                                   const Tensor& mask) {
  const auto t = Q.scalar_type();
  if (t != torch::kFloat32 && t != torch::kBFloat16) return "Q is neither fp32 nor bf16";
  if (K.scalar_type() != t || V.scalar_type() != t) return "Q, K and V differ in dtype";
  const int64_t h = P_l.defined() ? P_l.size(1) : Q.size(2);
  if (std::max({Q.size(2), h, V.size(2)}) > cuda_th::kRowHeadsMax)
    return "more than " + std::to_string(cuda_th::kRowHeadsMax) + " heads";
  if (std::max(Q.size(1), K.size(1)) > std::numeric_limits<int>::max() / 2) return "too many rows or keys";
  if (mask.defined() && mask.scalar_type() != torch::kBool) return "the mask is not bool";
  return "";
}

Tensor tiled_attention_core(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P_l, const Tensor& P_w,
                            const Tensor& bias, const Tensor& mask, int64_t block_rows,
                            const cuda_th::RowsLauncher* kernels, bool narrow) {
  return TiledFn::apply(Q, K, V, placeholder(P_l), placeholder(P_w), placeholder(bias), placeholder(mask), block_rows,
                        static_cast<int64_t>(reinterpret_cast<intptr_t>(kernels)), narrow);
}

namespace {
// rows_softmax's launch for L's dtype T: W like L, a warp a row.
template <typename T>
Tensor softmax_launch(const Tensor& L, const Tensor& bias, const Tensor& mask, const cuda_th::RowsLauncher& k) {
  const int64_t b = L.size(0), h = L.size(1), n = L.size(2), m = L.size(3);
  Tensor W = torch::empty_like(L);
  cuda_th::RowsArgs<T> a;
  a.J = static_cast<const T*>(L.data_ptr()), a.U = static_cast<T*>(W.data_ptr());
  if (bias.defined()) a.bias = bias.data_ptr<float>(), broadcast_strides(bias, a.bias_stride);
  if (mask.defined()) {
    a.mask = reinterpret_cast<const uint8_t*>(mask.data_ptr<bool>());
    broadcast_strides(mask, a.mask_stride);
  }
  a.b = int(b), a.h_k = a.h = a.h_v = int(h), a.rows = int(n), a.m = int(m);
  // Keys in pairs where every row starts at a pair's alignment: m even, L and W so aligned.
  const auto pair_aligned = [](const Tensor& t) {
    return reinterpret_cast<uintptr_t>(t.data_ptr()) % (2 * sizeof(T)) == 0;
  };
  const bool pairs = m % 2 == 0 && pair_aligned(L) && pair_aligned(W);
  constexpr int64_t warps = cuda_th::kSoftmaxThreads / 32;
  const auto grid = unsigned((b * h * n + warps - 1) / warps);
  const int cache = cuda_th::softmax_cache(m, pairs);
  if constexpr (std::is_same_v<T, float>) k.softmax_f32(a, cache, pairs, grid);
  else k.softmax_bf16(a, cache, pairs, grid);
  return W;
}
}  // namespace

Tensor rows_softmax(const Tensor& L, const Tensor& bias, const Tensor& mask, const cuda_th::RowsLauncher* kernels) {
  const auto t = L.scalar_type();
  const bool bf16 = t == torch::kBFloat16;
  if (!kernels || !(bf16 ? kernels->softmax_bf16 != nullptr : kernels->softmax_f32 != nullptr) || L.dim() != 4 ||
      (t != torch::kFloat32 && !bf16) || !L.is_contiguous() || L.numel() == 0 ||
      (mask.defined() && mask.scalar_type() != torch::kBool) ||
      std::max({L.size(0), L.size(1), L.size(2), L.size(3)}) > std::numeric_limits<int>::max() / 2 ||
      L.numel() / L.size(3) / (cuda_th::kSoftmaxThreads / 32) >= std::numeric_limits<int>::max())
    return Tensor();
  check_broadcasts("rows_softmax", "bias", bias, L.sizes());
  check_broadcasts("rows_softmax", "mask", mask, L.sizes());
  const Tensor b = four(bias.defined() ? bias.to(torch::kFloat32) : bias), m = four(mask);
  return bf16 ? softmax_launch<thx_bf16>(L, b, m, *kernels) : softmax_launch<float>(L, b, m, *kernels);
}

namespace {
// Whether the launcher's mixing kernels take T [b,g,n,m] mixed to g2 heads.
bool mix_kernels_take(const Tensor& T, int64_t g2, const cuda_th::RowsLauncher* k) {
  const auto t = T.scalar_type();
  const bool kernel = k && (t == torch::kBFloat16 ? k->mix_bf16 != nullptr : t == torch::kFloat32 && k->mix_f32);
  return kernel && T.dim() == 4 && T.is_contiguous() && T.numel() > 0 && T.size(1) <= cuda_th::kMixHeadsMax &&
         g2 >= 1 && g2 <= cuda_th::kMixHeadsMax && T.size(0) <= 65535 &&
         T.size(2) * T.size(3) / cuda_th::kMixThreads < std::numeric_limits<int>::max();
}
// Positions in pairs where every head's row starts at a pair's alignment: N even, the tensors so
// aligned (E: their dtype).
template <typename E>
bool mix_pairs(int64_t N, std::initializer_list<Tensor> tensors) {
  bool pairs = N % 2 == 0;
  for (const Tensor& t : tensors) pairs = pairs && reinterpret_cast<uintptr_t>(t.data_ptr()) % (2 * sizeof(E)) == 0;
  return pairs;
}
// The blocks an example (the grid's x) of the mixing or its gradient.
unsigned mix_grid(int64_t N, bool pairs, bool grad) {
  const int64_t block = int64_t(cuda_th::kMixThreads) * (pairs ? 2 : 1) *
                        (grad ? cuda_th::kMixGradSteps : cuda_th::kMixGroups);
  return unsigned((N + block - 1) / block);
}
template <typename E>
void mix_launch(const cuda_th::MixArgs<E>& a, bool grad, bool pairs, int64_t b, const cuda_th::RowsLauncher& k) {
  if constexpr (std::is_same_v<E, float>) k.mix_f32(a, grad, pairs, mix_grid(a.N, pairs, grad), unsigned(b));
  else k.mix_bf16(a, grad, pairs, mix_grid(a.N, pairs, grad), unsigned(b));
}
template <typename E>
Tensor mix_with(const Tensor& T, const Tensor& P, const cuda_th::RowsLauncher& k) {
  const Tensor w = P.to(T.scalar_type()).to(torch::kFloat32).contiguous();  // rounded as autocast rounds a weight
  Tensor out = torch::empty({T.size(0), P.size(1), T.size(2), T.size(3)}, T.options());
  cuda_th::MixArgs<E> a;
  a.A = static_cast<const E*>(T.data_ptr()), a.out = static_cast<E*>(out.data_ptr()), a.P = w.data_ptr<float>();
  a.g = int(T.size(1)), a.g2 = int(P.size(1)), a.N = T.size(2) * T.size(3);
  mix_launch(a, false, mix_pairs<E>(a.N, {T, out}), T.size(0), k);
  return out;
}
template <typename E>
Tensor mix_grad_with(const Tensor& A, const Tensor& B, const cuda_th::RowsLauncher& k) {
  cuda_th::MixArgs<E> a;
  a.g = int(A.size(1)), a.g2 = int(B.size(1)), a.N = A.size(2) * A.size(3);
  const bool pairs = mix_pairs<E>(a.N, {A, B});
  Tensor partial = torch::empty({A.size(0), mix_grid(a.N, pairs, true), a.g, a.g2}, A.options().dtype(torch::kFloat32));
  a.A = static_cast<const E*>(A.data_ptr()), a.B = static_cast<const E*>(B.data_ptr());
  a.partial = partial.data_ptr<float>();
  mix_launch(a, true, pairs, A.size(0), k);
  return partial.sum(std::vector<int64_t>{0, 1});
}
}  // namespace

Tensor rows_mix(const Tensor& T, const Tensor& P, const cuda_th::RowsLauncher* kernels) {
  if (!mix_kernels_take(T, P.dim() == 2 ? P.size(1) : 0, kernels)) return Tensor();
  TORCH_CHECK(P.size(0) == T.size(1), "rows_mix: P ", P.sizes(), " for T ", T.sizes());
  return T.scalar_type() == torch::kBFloat16 ? mix_with<thx_bf16>(T, P, *kernels) : mix_with<float>(T, P, *kernels);
}

Tensor rows_mix_grad(const Tensor& A, const Tensor& B, const cuda_th::RowsLauncher* kernels) {
  if (!mix_kernels_take(A, B.dim() == 4 ? B.size(1) : 0, kernels) || B.scalar_type() != A.scalar_type() ||
      !B.is_contiguous() || B.size(0) != A.size(0) || B.size(2) != A.size(2) || B.size(3) != A.size(3))
    return Tensor();
  return A.scalar_type() == torch::kBFloat16 ? mix_grad_with<thx_bf16>(A, B, *kernels)
                                             : mix_grad_with<float>(A, B, *kernels);
}

#if !THX_CUDA_KERNELS
const cuda_th::RowsLauncher* cuda_th_rows_launcher(bool, bool) { return nullptr; }
#endif

}  // namespace thx
