// rms_norm_cuda.cu: rms_norm_cuda.h's kernels. One block of 256 threads per row forward; backward,
// a grid of blocks each striding over rows, each keeping its share of dscale in shared memory
// (one column per thread: no atomics), written out as [blocks, d] partial sums that one ATen
// sum adds. Sums are fp32; a block's sum is a warp-shuffle tree, then one warp over the warps.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/util/BFloat16.h>

#include <algorithm>

#include "models/rms_norm_cuda.h"

namespace thx::cuda {
namespace {

constexpr int kThreads = 256;

// The block's sum of v, returned to every thread. shm holds one float per warp.
__device__ float block_sum(float v, float* shm) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();  // shm may still be read by a previous call
  if (lane == 0) shm[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? shm[lane] : 0.f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) shm[0] = v;
  }
  __syncthreads();
  return shm[0];
}

template <typename X, typename Y>
__global__ void forward_kernel(const X* __restrict__ x, const float* __restrict__ scale, Y* __restrict__ y,
                               float* __restrict__ r, int64_t d) {
  __shared__ float shm[32];
  const int64_t row = blockIdx.x;
  const X* xr = x + row * d;
  float ss = 0.f;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float v = static_cast<float>(xr[j]);
    ss += v * v;
  }
  const float ri = rsqrtf(block_sum(ss, shm) / float(d) + 1e-6f);
  if (threadIdx.x == 0) r[row] = ri;
  Y* yr = y + row * d;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) yr[j] = static_cast<Y>(static_cast<float>(xr[j]) * ri * scale[j]);
}

template <typename X, typename Y>
__global__ void backward_kernel(const X* __restrict__ x, const float* __restrict__ scale, const float* __restrict__ r,
                                const Y* __restrict__ dy, X* __restrict__ dx, float* __restrict__ dscale_part,
                                int64_t rows, int64_t d) {
  __shared__ float shm[32];
  extern __shared__ float ds[];  // [d]: this block's share of dscale, column j kept by one thread
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) ds[j] = 0.f;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const X* xr = x + row * d;
    const Y* gr = dy + row * d;
    const float ri = r[row];
    float dot = 0.f;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const float xv = static_cast<float>(xr[j]), gv = static_cast<float>(gr[j]);
      dot += gv * scale[j] * xv;
      ds[j] += gv * xv * ri;
    }
    const float k = ri * ri * block_sum(dot, shm) / float(d);
    X* o = dx + row * d;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
      o[j] = static_cast<X>(ri * (static_cast<float>(gr[j]) * scale[j] - static_cast<float>(xr[j]) * k));
  }
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) dscale_part[blockIdx.x * d + j] = ds[j];
}

// f(X{}, Y{}) with X and Y the element types of x's and y's dtypes (fp32 or bf16 each).
template <typename F>
void with_dtypes(at::ScalarType xt, at::ScalarType yt, F&& f) {
  const bool xb = xt == at::kBFloat16, yb = yt == at::kBFloat16;
  TORCH_CHECK((xt == at::kFloat || xb) && (yt == at::kFloat || yb), "rms_norm_cuda: fp32 or bf16 only");
  if (xb && yb) f(c10::BFloat16{}, c10::BFloat16{});
  else if (xb) f(c10::BFloat16{}, float{});
  else if (yb) f(float{}, c10::BFloat16{});
  else f(float{}, float{});
}

}  // namespace

void rms_norm_forward(const at::Tensor& x, const at::Tensor& scale, at::Tensor& y, at::Tensor& r) {
  const int64_t d = x.size(-1), rows = x.numel() / d;
  if (rows == 0) return;
  const auto stream = at::cuda::getCurrentCUDAStream();
  with_dtypes(x.scalar_type(), y.scalar_type(), [&](auto xv, auto yv) {
    using X = decltype(xv);
    using Y = decltype(yv);
    forward_kernel<X, Y><<<unsigned(rows), kThreads, 0, stream>>>(
        static_cast<const X*>(x.data_ptr()), scale.data_ptr<float>(), static_cast<Y*>(y.data_ptr()),
        r.data_ptr<float>(), d);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

void rms_norm_backward(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& r, const at::Tensor& dy,
                       at::Tensor& dx, at::Tensor& dscale) {
  const int64_t d = x.size(-1), rows = x.numel() / d;
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(rows, 4 * int64_t(sms)));
  at::Tensor part = at::empty({blocks, d}, scale.options());
  const auto stream = at::cuda::getCurrentCUDAStream();
  TORCH_CHECK(d * int64_t(sizeof(float)) <= 48 * 1024, "rms_norm_cuda: d = ", d, " needs more shared memory than 48 KB");
  if (rows > 0)
    with_dtypes(x.scalar_type(), dy.scalar_type(), [&](auto xv, auto yv) {
      using X = decltype(xv);
      using Y = decltype(yv);
      backward_kernel<X, Y><<<unsigned(blocks), kThreads, size_t(d) * sizeof(float), stream>>>(
          static_cast<const X*>(x.data_ptr()), scale.data_ptr<float>(), r.data_ptr<float>(),
          static_cast<const Y*>(dy.data_ptr()), static_cast<X*>(dx.data_ptr()), part.data_ptr<float>(), rows, d);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  else
    part.zero_();
  dscale = part.sum(0);
}

}  // namespace thx::cuda
