#!/usr/bin/env bash
# cuda_build_check.sh: the CUDA build, as far as a machine without a GPU can take it, before a GPU
# session spends its minutes on it. This project's CPU machines have CUDA 13's nvcc but no
# LibTorch with CUDA (Debian's is CPU-only), so CMake is given Debian's LibTorch with a stand-in
# torch_cuda target. Then CMakeLists.txt takes its CUDA branch (THX_CUDA, THX_CUDA_KERNELS, nvcc
# for the .cu files) and every object compiles as the GPU build compiles it: its unity batches,
# its flags, the host code under `#if THX_CUDA` in place. The links run with unresolved symbols
# reported, not fatal: the check passes when every one is a function of LibTorch's CUDA libraries
# (c10::cuda, at::cuda), which Debian does not ship, so that nothing of thx's is missing from the
# CUDA build either. What differs in LibTorch 2.x is not seen here (torch_compat.h).
#
#   scripts/cuda_build_check.sh        4 to 6 minutes on 2 cores (clang 14 and nvcc, as the
#                                      README's build); its folder: build-cudacheck/ (ignored)
#
# Exit 0 when the check passes; 1 with the failing lines; 2 where nvcc or Debian's LibTorch is
# missing, or given an argument. CudaHostCode.* (the test suite) checks the host code under `#if THX_CUDA` in 40 s;
# this is the whole build, for before a GPU session.
set -euo pipefail
if [ $# -gt 0 ]; then
  echo "cuda_build_check.sh: takes no arguments (got '$1'); it builds build-cudacheck/ (4 to 6 minutes)" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || { echo "cuda_build_check.sh: no nvcc here (CUDA's toolkit: /usr/local/cuda)" >&2; exit 2; }
torch_config=$(ls /usr/lib/*/cmake/Torch/TorchConfig.cmake 2> /dev/null | head -n 1)
[ -n "$torch_config" ] ||
  { echo "cuda_build_check.sh: no Debian LibTorch (libtorch-dev; scripts/setup.sh)" >&2; exit 2; }
cuda_include=$(cd "$(dirname "$nvcc")/../include" && pwd)
dir=$(pwd)/build-cudacheck
mkdir -p "$dir/stand-in/c10/cuda/impl"
# The stand-in: Debian's TorchConfig, and a torch_cuda target that links nothing.
printf 'include(%s)\nif(NOT TARGET torch_cuda)\n  add_library(torch_cuda INTERFACE IMPORTED)\nendif()\n' \
  "$torch_config" > "$dir/stand-in/TorchConfig.cmake"
# A generated header of c10's CUDA half that Debian's CPU LibTorch lacks (as CudaKernels.* writes it).
printf '#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n' > "$dir/stand-in/c10/cuda/impl/cuda_cmake_macros.h"
echo "[cuda_build_check] configuring $dir (CUDA branch: Debian's LibTorch with a stand-in torch_cuda, $nvcc)"
cmake -S . -B "$dir/build" -G Ninja -DTorch_DIR="$dir/stand-in" -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DCMAKE_CXX_FLAGS="-isystem $cuda_include -isystem $dir/stand-in" -DCMAKE_CUDA_FLAGS="-isystem $dir/stand-in" \
  -DCMAKE_EXE_LINKER_FLAGS="-Wl,--warn-unresolved-symbols" > "$dir/configure.log" 2>&1 ||
  { tail -n 30 "$dir/configure.log"; exit 1; }
grep -q "THX_CUDA_KERNELS=1" "$dir/build/build.ninja" ||
  { echo "cuda_build_check.sh: CMake did not take its CUDA branch (no THX_CUDA_KERNELS)"; exit 1; }
echo "[cuda_build_check] building (every object; links with unresolved symbols reported)"
# (ninja's exit code is not the verdict: the test executables' post-build step runs each to list
# its tests, which cannot load without LibTorch's CUDA libraries; the log's errors are.)
cmake --build "$dir/build" -- -k 0 > "$dir/build.log" 2>&1 || true
cuda_objects=$(grep -c "Building CUDA object" "$dir/build.log" || true)
# A compiler's or the linker's error (a link's unresolved symbols are warnings here, below).
errors=$(grep -E ": error: |error: linker command failed|collect2: error|multiple definition of|^ninja: error" \
  "$dir/build.log" || true)
# Every unresolved symbol that is not LibTorch's CUDA libraries'.
grep -E "undefined reference to" "$dir/build.log" | sed 's/.*undefined reference to .//; s/.$//' | sort -u \
  > "$dir/unresolved.txt" || true
foreign=$(grep -vE "^(c10::cuda::|at::cuda::)" "$dir/unresolved.txt" || true)
echo "[cuda_build_check] $cuda_objects CUDA objects; $(wc -l < "$dir/unresolved.txt") symbols unresolved, all" \
  "expected to be LibTorch's CUDA libraries' (c10::cuda, at::cuda)"
if [ -n "$errors" ] || [ -n "$foreign" ]; then
  [ -n "$errors" ] && head -n 40 <<< "$errors"
  [ -n "$foreign" ] && printf 'unresolved, and not LibTorch CUDA'"'"'s:\n%s\n' "$foreign"
  echo "cuda_build_check: FAILED (the build's log: $dir/build.log)"
  exit 1
fi
for exe in thx thx_tests thx_dist_tests; do
  [ -x "$dir/build/$exe" ] || { echo "cuda_build_check: FAILED: $exe was not linked"; exit 1; }
done
echo "cuda_build_check: passed: every object of the CUDA build compiles, and thx, thx_tests and thx_dist_tests" \
  "link but for LibTorch's CUDA libraries"
