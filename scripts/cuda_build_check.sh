#!/usr/bin/env bash
# cuda_build_check.sh: the CUDA build, as far as a machine without a GPU can take it, before a GPU
# session spends its minutes on it. This project's CPU machines have CUDA 13's nvcc but no
# LibTorch with CUDA (Debian's is CPU-only), so CMake is given a LibTorch with a stand-in
# torch_cuda target. Then CMakeLists.txt takes its CUDA branch (THX_CUDA, THX_CUDA_KERNELS, nvcc
# for the .cu files) and every object compiles as the GPU build compiles it: its unity batches,
# its flags, the host code under `#if THX_CUDA` in place.
#
#   scripts/cuda_build_check.sh           Debian's LibTorch 1.13, clang 14 (the README's build),
#                                         4 to 8 minutes on 2 cores; build-cudacheck/ (ignored).
#                                         The links run with unresolved symbols reported, not
#                                         fatal: it passes when every one is a function of
#                                         LibTorch's CUDA libraries (c10::cuda, at::cuda), which
#                                         Debian does not ship, so that nothing of thx's is
#                                         missing from the CUDA build either.
#   scripts/cuda_build_check.sh LIBTORCH  the headers of a LibTorch 2.x instead (LIBTORCH: its
#                                         folder, with include/; a libtorch zip from pytorch.org
#                                         unpacked, or a wheel's torch/), what torch_compat.h
#                                         guards, with GCC (the GPU machines' compiler) and NCCL
#                                         (nccl.h in CUDA's include folder), as scripts/
#                                         gpu_build.sh builds: -I ahead of the wheel's own fmt,
#                                         spdlog and protobuf headers. 10 to 18 minutes on 2
#                                         cores; build-cudacheck-<its version>/ (ignored). Only
#                                         headers are used, so the verdict is the compiles': no
#                                         library of that LibTorch is linked, and every symbol of
#                                         it is unresolved. 2.10 and 2.14 passed (2026-11-30);
#                                         2.14 again at ced899e, with the command line a
#                                         library (thx_cli), in 686 s (2026-12-02).
#
# Exit 0 when the check passes; 1 with the failing lines; 2 where nvcc or the LibTorch is
# missing, or given a second argument. CudaHostCode.* (the test suite) checks the host code under
# `#if THX_CUDA` in 40 s; this is the whole build, for before a GPU session.
set -euo pipefail
if [ $# -gt 1 ]; then
  echo "cuda_build_check.sh: takes at most one argument, a LibTorch 2.x folder (got $#: '$*')" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || { echo "cuda_build_check.sh: no nvcc here (CUDA's toolkit: /usr/local/cuda)" >&2; exit 2; }
cuda_include=$(cd "$(dirname "$nvcc")/../include" && pwd)
libtorch=${1:-}
if [ -z "$libtorch" ]; then
  torch_config=$(ls /usr/lib/*/cmake/Torch/TorchConfig.cmake 2> /dev/null | head -n 1)
  [ -n "$torch_config" ] ||
    { echo "cuda_build_check.sh: no Debian LibTorch (libtorch-dev; scripts/setup.sh)" >&2; exit 2; }
  dir=$(pwd)/build-cudacheck
  what="Debian's LibTorch"
else
  version_h=$libtorch/include/torch/headeronly/version.h
  [ -f "$version_h" ] || version_h=$libtorch/include/torch/csrc/api/include/torch/version.h
  [ -f "$version_h" ] || { echo "cuda_build_check.sh: $libtorch: not a LibTorch folder" \
    "(no include/torch/csrc/api/include/torch/version.h in it)" >&2; exit 2; }
  version=$(awk '/define TORCH_VERSION_(MAJOR|MINOR|PATCH) / {v = v (v ? "." : "") $3} END {print v}' "$version_h")
  case "$version" in
    2.*) ;;
    *) echo "cuda_build_check.sh: $libtorch is LibTorch '${version:-of no version}'; the argument is for" \
         "a LibTorch 2.x (without one, Debian's 1.13 is checked)" >&2; exit 2 ;;
  esac
  libtorch=$(cd "$libtorch" && pwd)
  dir=$(pwd)/build-cudacheck-$version
  what="LibTorch $version's headers"
fi
mkdir -p "$dir/stand-in/c10/cuda/impl"
if [ -z "$libtorch" ]; then
  # The stand-in: Debian's TorchConfig, and a torch_cuda target that links nothing.
  printf 'include(%s)\nif(NOT TARGET torch_cuda)\n  add_library(torch_cuda INTERFACE IMPORTED)\nendif()\n' \
    "$torch_config" > "$dir/stand-in/TorchConfig.cmake"
  compilers=()
  cxx_flags="-isystem $cuda_include -isystem $dir/stand-in"
  nccl=()
else
  # The stand-in: torch, its headers and no library; torch_cuda, nothing. The wheel's own
  # TorchConfig finds its libraries, which a headers-only tree lacks.
  cat > "$dir/stand-in/TorchConfig.cmake" <<CMAKE
set(TORCH_INCLUDE_DIRS "$libtorch/include" "$libtorch/include/torch/csrc/api/include")
add_library(torch INTERFACE IMPORTED)
set_target_properties(torch PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "\${TORCH_INCLUDE_DIRS}")
add_library(torch_cuda INTERFACE IMPORTED)
set(TORCH_LIBRARIES torch)
set(TORCH_CXX_FLAGS "")
set(Torch_FOUND TRUE)
CMAKE
  # Debian's fmt, spdlog and protobuf ahead of the wheel's copies, as gpu_build.sh orders them.
  mkdir -p "$dir/first"
  for sub in fmt spdlog google; do ln -sfn "/usr/include/$sub" "$dir/first/$sub"; done
  compilers=(-DCMAKE_CXX_COMPILER=g++ -DCMAKE_C_COMPILER=gcc)
  cxx_flags="-I$dir/first -isystem $cuda_include -isystem $dir/stand-in"
  nccl=()
  [ -f "$cuda_include/nccl.h" ] && nccl=(-DTHX_NCCL=ON -DTHX_NCCL_INCLUDE_DIR="$cuda_include")
fi
# A generated header of c10's CUDA half that a CPU LibTorch lacks (CudaKernels.* takes it too).
cp cmake/stand-in/c10/cuda/impl/cuda_cmake_macros.h "$dir/stand-in/c10/cuda/impl/"
echo "[cuda_build_check] configuring $dir (CUDA branch: $what with a stand-in torch_cuda, $nvcc)"
cmake -S . -B "$dir/build" -G Ninja -DTorch_DIR="$dir/stand-in" -DCMAKE_CUDA_COMPILER="$nvcc" \
  "${compilers[@]}" "${nccl[@]}" -DCMAKE_CXX_FLAGS="$cxx_flags" -DCMAKE_CUDA_FLAGS="-isystem $dir/stand-in" \
  -DCMAKE_EXE_LINKER_FLAGS="-Wl,--warn-unresolved-symbols" > "$dir/configure.log" 2>&1 ||
  { tail -n 30 "$dir/configure.log"; exit 1; }
grep -q "THX_CUDA_KERNELS=1" "$dir/build/build.ninja" ||
  { echo "cuda_build_check.sh: CMake did not take its CUDA branch (no THX_CUDA_KERNELS)"; exit 1; }
echo "[cuda_build_check] building (every object; links with unresolved symbols reported)"
# (ninja's exit code is not the verdict: the test executables' post-build step runs each to list
# its tests, which cannot load without LibTorch's CUDA libraries; the log's errors are.)
cmake --build "$dir/build" -- -k 0 > "$dir/build.log" 2>&1 || true
cuda_objects=$(find "$dir/build" -name '*.cu.o' | wc -l)  # (the log names only those a rerun rebuilt)
# A compiler's or the linker's error (a link's unresolved symbols are warnings here, below).
errors=$(grep -E ": error: |error: linker command failed|collect2: error|multiple definition of|^ninja: error" \
  "$dir/build.log" || true)
grep -E "undefined reference to" "$dir/build.log" | sed 's/.*undefined reference to .//; s/.$//' | sort -u \
  > "$dir/unresolved.txt" || true
if [ -z "$libtorch" ]; then
  # Every unresolved symbol that is not LibTorch's CUDA libraries'.
  foreign=$(grep -vE "^(c10::cuda::|at::cuda::)" "$dir/unresolved.txt" || true)
  expected="LibTorch's CUDA libraries' (c10::cuda, at::cuda)"
else
  # No library of that LibTorch is linked: every unresolved symbol that is thx's, or no LibTorch's
  # (a namespace of its, whole: fmt::format:: is not at::).
  ns='(^|[^A-Za-z0-9_])'
  foreign=$({ grep -E "${ns}thx::" "$dir/unresolved.txt"
              grep -vE "${ns}(c10|at|torch|caffe2|c10d)::" "$dir/unresolved.txt"; } | sort -u || true)
  expected="LibTorch's (c10, at, torch, caffe2, c10d), whose libraries this check does not link"
fi
echo "[cuda_build_check] $cuda_objects CUDA objects; $(wc -l < "$dir/unresolved.txt") symbols unresolved, all" \
  "expected to be $expected"
if [ -n "$errors" ] || [ -n "$foreign" ]; then
  [ -n "$errors" ] && head -n 40 <<< "$errors"
  [ -n "$foreign" ] && printf 'unresolved, and not of those:\n%s\n' "$foreign"
  echo "cuda_build_check: FAILED (the build's log: $dir/build.log)"
  exit 1
fi
for exe in thx thx_tests thx_dist_tests; do
  [ -x "$dir/build/$exe" ] || { echo "cuda_build_check: FAILED: $exe was not linked"; exit 1; }
done
echo "cuda_build_check: passed: every object of the CUDA build compiles against $what, and thx, thx_tests" \
  "and thx_dist_tests link but for $expected"
