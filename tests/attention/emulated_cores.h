// emulated_cores.h: attention cores that run thx's CUDA kernels on the CPU emulator
// (common/cuda_compat.h), for test files that do not compile the kernels themselves.
#pragma once
#include <torch/torch.h>

namespace thx {
namespace cuda_th {
struct RowsLauncher;
}
}  // namespace thx

namespace thx::test {

// The row kernels' launcher on the emulator (static: 32 threads a block, bf16 on tensor cores up
// to 48 heads, else the FMAs), and how many launches of any emulated row kernel there have been.
// Defined in th_rows_emu_test.cpp.
const cuda_th::RowsLauncher* emulated_rows_launcher();
int emulated_row_launches();

// The heads-major path (heads_gemm.h) with its softmax by the row kernels on the emulator (32
// threads a block; bf16 on tensor cores up to 48 heads, else FMAs), as `--th-path gemm` runs on a
// GPU. Defined in th_rows_emu_test.cpp, which compiles the emulated kernels.
torch::Tensor heads_gemm_on_emulated_rows(const torch::Tensor& Q, const torch::Tensor& K, const torch::Tensor& V,
                                          const torch::Tensor& P_l, const torch::Tensor& P_w,
                                          const torch::Tensor& bias, const torch::Tensor& mask);

}  // namespace thx::test
