#!/usr/bin/env bash
# gpu_build.sh: build thx on a GPU machine against the LibTorch inside its PyTorch 2 wheel
# (../shared/notes/gpu.md). Such machines reach no package registry, so it runs in two halves:
#
#   scripts/gpu_build.sh fetch   on a Debian 12 machine with apt (this one): downloads the
#                                .deb files of every other dependency into gpu-carry/debs
#                                (ignored by git; scripts/gpu_session.sh prepare carries the
#                                rest of what a session needs there too);
#   scripts/gpu_build.sh build   on the GPU machine: unpacks them with dpkg -x into
#                                gpu-carry/root (no root needed), configures against
#                                python3's torch and builds into build-gpu/ (headers and
#                                libraries of the unpacked packages found by -isystem, -L and
#                                an rpath: some have no CMake config), going on past
#                                errors so that one log shows all of them. THX_DISTRIBUTED=OFF
#                                builds thx without c10d (one process), THX_CUDA_KERNELS=OFF
#                                without thx's own CUDA kernels (src/models/*.cu and
#                                src/attention/cuda/*.cu, nvcc), THX_NCCL=OFF without NCCL
#                                (on where the wheel's nccl.h is found).
#
# Status: `fetch` is tested on Debian 12; `build` has run on an H200 and an H100 (PyTorch 2.11,
# CUDA 13); the CUDA kernels compile with nvcc on the CPU machines (CudaKernels.*) but have not
# been built there yet; NCCL (THX_NCCL) neither.
set -euo pipefail
cd "$(dirname "$0")/.."
DEPS=gpu-carry/debs
ROOT=gpu-carry/root
PACKAGES=(
  libyaml-cpp-dev libyaml-cpp0.7 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  libhdf5-dev libhdf5-103-1 libhdf5-hl-100 libhdf5-cpp-103-1 libsz2 libaec0 libcurl4 libssh2-1 libldap-2.5-0 libsasl2-2 libsasl2-modules-db libcli11-dev nlohmann-json3-dev
  libsentencepiece-dev libsentencepiece0 libprotobuf-dev libprotobuf32 protobuf-compiler libprotoc32
  libboost1.74-dev libgloo-dev libgtest-dev libgmock-dev libicu-dev libicu72 zlib1g-dev
)

case "${1:-}" in
  fetch)
    mkdir -p "$DEPS"
    (cd "$DEPS" && apt-get download "${PACKAGES[@]}")
    du -sh "$DEPS"
    ;;
  build)
    # The machine's PyTorch (TORCH_CMAKE_PREFIX_PATH overrides: another LibTorch).
    torch_cmake=${TORCH_CMAKE_PREFIX_PATH:-$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')}
    mkdir -p "$ROOT"
    for deb in "$DEPS"/*.deb; do dpkg -x "$deb" "$ROOT"; done
    root=$(cd "$ROOT" && pwd)
    lib="$root/usr/lib/x86_64-linux-gnu"
    export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export PATH="$root/usr/bin:$PATH"   # protoc
    # A PyTorch 2 wheel ships its own fmt (11) and protobuf headers among its own, found before
    # the carried ones; Debian 12's spdlog needs its fmt 9, and the generated tensorboard.pb.h
    # its protoc's headers (3.21). -I directories are searched before every -isystem one: one
    # that holds only these makes every translation unit use Debian's.
    mkdir -p "$root/first"
    for dir in fmt spdlog google; do ln -sfn "../usr/include/$dir" "$root/first/$dir"; done
    # NCCL's header, for data parallel on GPUs (THX_NCCL): the wheel keeps it in its nvidia
    # packages (nvidia/nccl/include, or nvidia/cu13/include), else CUDA's own include folder.
    nccl_inc=$(python3 - <<'PY' 2>/dev/null || true
import glob, os
roots = []
try:
    import nvidia
    roots += list(nvidia.__path__)
except ImportError:
    pass
roots += ["/usr/local/cuda/include", "/usr/include"]
hits = [h for r in roots for h in glob.glob(os.path.join(r, "**", "nccl.h"), recursive=True)]
print(os.path.dirname(hits[0]) if hits else "")
PY
)
    local_nccl=OFF
    [ -n "$nccl_inc" ] && local_nccl=ON
    echo "nccl.h: ${nccl_inc:-not found}"
    # libstdc++ first among an executable's needed libraries, so that its std::filesystem is not
    # the wheel's libtorch.so's copy (pytorch/pytorch#133437). CMakeLists.txt asks for the same
    # with add_link_options, yet the fourth session's build (an H200) had no libstdc++ among them
    # at all (Linking.*); the linker flags CMake puts at the front of every executable's link
    # line say it again.
    stdcxx_first="-Wl,--push-state,--no-as-needed,-lstdc++,--pop-state"
    generator=$(command -v ninja >/dev/null && echo Ninja || echo 'Unix Makefiles')
    # The machine's own C++ compiler (GCC by default), the one the wheel's LibTorch was built
    # for; the CPU build's clang 14 is Debian's and need not be there.
    cmake -S . -B build-gpu -G "$generator" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CXX_COMPILER="${CXX:-c++}" -DCMAKE_C_COMPILER="${CC:-cc}" \
      -DCMAKE_PREFIX_PATH="$torch_cmake;$root/usr" -DTHX_DISTRIBUTED="${THX_DISTRIBUTED:-ON}" \
      -DTHX_CUDA_KERNELS="${THX_CUDA_KERNELS:-ON}" -DTHX_NCCL="${THX_NCCL:-$local_nccl}" \
      -DTHX_NCCL_INCLUDE_DIR="$nccl_inc" \
      -DHDF5_ROOT="$lib/hdf5/serial" -DHDF5_C_INCLUDE_DIR="$root/usr/include/hdf5/serial" \
      -DICU_ROOT="$root/usr" -DProtobuf_PROTOC_EXECUTABLE="$root/usr/bin/protoc" \
      -DCMAKE_CXX_FLAGS="-I$root/first -isystem $root/usr/include" \
      -DCMAKE_EXE_LINKER_FLAGS="$stdcxx_first -L$lib -Wl,-rpath,$lib" \
      -DCMAKE_SHARED_LINKER_FLAGS="-L$lib -Wl,-rpath,$lib" \
      -DCMAKE_MODULE_LINKER_FLAGS="-L$lib -Wl,-rpath,$lib"
    if [ "$generator" = Ninja ]; then keep_going=(-- -k 0); else keep_going=(-- -k); fi
    cmake --build build-gpu -j "$(nproc)" "${keep_going[@]}"
    echo "built build-gpu/thx; run with LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    ;;
  *)
    echo "usage: scripts/gpu_build.sh fetch | build" >&2
    exit 2
    ;;
esac
