#include "models/loss.h"

#include <ATen/record_function.h>

#include <cstring>

#include "attention/kernels.h"
#include "common/parallel.h"
#include "common/precision.h"
#include "common/runtime.h"
#ifdef THX_CUDA_KERNELS
#include "models/loss_cuda.h"
#endif

// Shapes: N rows (target positions, padding included), V vocabulary.
namespace thx {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Logits are fp32 or bf16; a bf16 row is converted to fp32 before anything is summed, so
// logsumexp, the losses and the softmax of the backward pass are fp32 either way. The
// gradient has the logits' dtype.
struct CrossEntropyZFn : torch::autograd::Function<CrossEntropyZFn> {
  // Row i of x as fp32: in place, or converted into buf.
  static const float* row(const kernels::Ops& k, const Tensor& x, int64_t i, int64_t V, std::vector<float>& buf) {
    if (x.scalar_type() == torch::kFloat32) return x.data_ptr<float>() + i * V;
    k.bf16_to_float(reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>()) + i * V, buf.data(), V);
    return buf.data();
  }

  static variable_list forward(AutogradContext* ctx, const Tensor& logits_in, const Tensor& targets_in,
                               double z) {
    const Tensor x = logits_in.contiguous(), t = targets_in.to(torch::kInt64).contiguous();  // [N,V], [N]
    const int64_t N = x.size(0), V = x.size(1);
    Tensor lse = torch::empty({N}, x.options().dtype(torch::kFloat32));  // [N] logsumexp per row
    Tensor target_logit = torch::empty({N}, x.options().dtype(torch::kFloat32));  // [N]
    const int64_t* pt = t.data_ptr<int64_t>();
    float *pl = lse.data_ptr<float>(), *ptl = target_logit.data_ptr<float>();
    const kernels::Ops& k = kernels::best_ops();
    thx::parallel_for(0, N, 16, [&](int64_t a, int64_t b) {
      std::vector<float> buf(x.scalar_type() == torch::kFloat32 ? 0 : V);
      for (int64_t i = a; i < b; ++i) {
        const float* xi = row(k, x, i, V, buf);
        pl[i] = k.logsumexp(xi, V);
        ptl[i] = pt[i] > 0 && pt[i] < V ? xi[pt[i]] : 0.f;
      }
    });
    double nll = 0, zz = 0;
    for (int64_t i = 0; i < N; ++i) {
      if (pt[i] == 0) continue;
      TORCH_CHECK(pt[i] > 0 && pt[i] < V, "cross_entropy: target ", pt[i], " outside [0, ", V, ")");
      nll += double(pl[i]) - ptl[i];
      zz += double(pl[i]) * pl[i];
    }
    ctx->save_for_backward({x, t, lse});
    ctx->saved_data["z"] = z;
    auto scalar = [&](double v) { return torch::tensor(float(v), x.options().dtype(torch::kFloat32)); };
    return {scalar(nll + z * zz), scalar(nll), lse};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const Tensor &x = s[0], &t = s[1], &lse = s[2];  // [N,V], [N], [N]
    const double z = ctx->saved_data["z"].toDouble();
    const float g_loss = grads[0].defined() ? grads[0].item<float>() : 0.f;
    const float g_nll = grads[1].defined() ? grads[1].item<float>() : 0.f;
    const int64_t N = x.size(0), V = x.size(1);
    const bool fp32 = x.scalar_type() == torch::kFloat32;
    Tensor dx = torch::empty_like(x);  // [N,V], the logits' dtype
    const float* pl = lse.data_ptr<float>();
    const int64_t* pt = t.data_ptr<int64_t>();
    const kernels::Ops& k = kernels::best_ops();
    thx::parallel_for(0, N, 16, [&](int64_t a, int64_t b) {
      std::vector<float> buf(fp32 ? 0 : V);
      for (int64_t i = a; i < b; ++i) {
        float* d = fp32 ? dx.data_ptr<float>() + i * V : buf.data();
        if (pt[i] == 0) {
          std::memset(d, 0, sizeof(float) * V);
        } else {
          if (fp32) std::memcpy(d, x.data_ptr<float>() + i * V, sizeof(float) * V);
          else k.bf16_to_float(reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>()) + i * V, d, V);
          k.softmax(d, nullptr, nullptr, V);  // p
          const float scale = g_loss + g_nll + float(2 * z) * g_loss * pl[i];
          for (int64_t j = 0; j < V; ++j) d[j] *= scale;
          d[pt[i]] -= g_loss + g_nll;
        }
        if (!fp32) k.float_to_bf16(d, reinterpret_cast<uint16_t*>(dx.data_ptr<at::BFloat16>()) + i * V, V);
      }
    });
    return {dx, Tensor(), Tensor()};
  }
};

#ifdef THX_CUDA_KERNELS
// The same on a GPU: thx's own CUDA kernels (loss_cuda.h). The rows' sums are added in float64 by
// ATen on the device, in a fixed order; the gradients of the two sums reach the backward kernel
// on the device, so no step waits for a copy to the host there.
struct CrossEntropyZCudaFn : torch::autograd::Function<CrossEntropyZCudaFn> {
  static variable_list forward(AutogradContext* ctx, const Tensor& logits_in, const Tensor& targets_in,
                               double z) {
    const Tensor x = logits_in.contiguous(), t = targets_in.to(x.device(), torch::kInt64).contiguous();  // [N,V], [N]
    const int64_t N = x.size(0), V = x.size(1);
    const Tensor bad = (t < 0) | (t >= V);  // [N]: the CPU's check, one read of the targets
    if (bad.any().item<bool>())
      TORCH_CHECK(false, "cross_entropy: target ", t.masked_select(bad)[0].item<int64_t>(), " outside [0, ", V, ")");
    const auto f32 = x.options().dtype(torch::kFloat32);
    Tensor lse = torch::empty({N}, f32), nll = torch::empty({N}, f32), zz = torch::empty({N}, f32);  // [N] each
    thx::cuda::cross_entropy_forward(x, t, lse, nll, zz);
    ctx->save_for_backward({x, t, lse});
    ctx->saved_data["z"] = z;
    const Tensor nll_sum = nll.to(torch::kFloat64).sum(), zz_sum = zz.to(torch::kFloat64).sum();
    return {(nll_sum + z * zz_sum).to(torch::kFloat32), nll_sum.to(torch::kFloat32), lse};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const Tensor &x = s[0], &t = s[1], &lse = s[2];  // [N,V], [N], [N]
    auto scalar = [&](const Tensor& g) {
      return g.defined() ? g.reshape({1}).to(torch::kFloat32) : torch::zeros({1}, lse.options());
    };
    const Tensor g = torch::cat({scalar(grads[0]), scalar(grads[1])});  // [2] on the device
    Tensor dx = torch::empty_like(x);                                    // [N,V], the logits' dtype
    thx::cuda::cross_entropy_backward(x, t, lse, g, ctx->saved_data["z"].toDouble(), dx);
    return {dx, Tensor(), Tensor()};
  }
};
#endif

}  // namespace

LossSums cross_entropy_z_loss_reference(const Tensor& logits_in, const Tensor& targets, double z) {
  const Tensor logits = to_fp32(logits_in);  // [N,V]: the sums run in fp32 whatever the logits' dtype
  const Tensor lse = torch::logsumexp(logits, -1);                                  // [N]
  const Tensor target_logit = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1);  // [N]
  const Tensor w = (targets != 0).to(logits.scalar_type());
  LossSums r;
  r.nll_sum = ((lse - target_logit) * w).sum();
  r.loss_sum = r.nll_sum + z * (lse.pow(2) * w).sum();
  r.lse = lse.detach();
  return r;
}

LossSums cross_entropy_z_loss(const Tensor& logits, const Tensor& targets, double z) {
  RECORD_USER_SCOPE("thx::loss");  // (a profile's phase: experiments/step_profile.h)
  const bool dtype = logits.scalar_type() == torch::kFloat32 || logits.scalar_type() == torch::kBFloat16;
  const bool kernels = dtype && logits.dim() == 2 && cpu_kernels_enabled() && !aten_parts().loss;
  if (kernels && logits.device().is_cpu()) {
    auto out = CrossEntropyZFn::apply(logits, targets, z);
    return {out[0], out[1], out[2]};
  }
#ifdef THX_CUDA_KERNELS
  if (kernels && logits.is_cuda()) {
    auto out = CrossEntropyZCudaFn::apply(logits, targets, z);
    return {out[0], out[1], out[2]};
  }
#endif
  return cross_entropy_z_loss_reference(logits, targets, z);
}

}  // namespace thx
