// nccl.h: NCCL as the CUDA backend of thx's process group (nccl.cpp), in builds that carry it
// (THX_NCCL: a LibTorch with CUDA, and NCCL's header at build time; scripts/gpu_build.sh finds it
// in the PyTorch wheel's nvidia packages). Gloo stays the group's backend for CPU tensors (byte
// strings, metrics); c10d's ProcessGroup sends each collective to the backend of its tensors'
// device, so DDP's Reducer on CUDA gradients runs on NCCL.
#pragma once
#include <chrono>

#include "common/torch_compat.h"

namespace thx::dist {

// Registers a ProcessGroupNCCL (under the store prefix "cuda/", as torch.distributed does) as
// pg's backend for CUDA tensors. It opens no communicator until a collective needs one.
void add_nccl_backend(const compat::GroupPtr& pg, const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                      std::chrono::milliseconds timeout);

}  // namespace thx::dist
