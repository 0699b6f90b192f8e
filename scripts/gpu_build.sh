#!/usr/bin/env bash
# gpu_build.sh: build thx on a GPU machine against the LibTorch inside its PyTorch 2 wheel
# (../shared/notes/gpu.md). Such machines reach no package registry, so it runs in two halves:
#
#   scripts/gpu_build.sh fetch   on a Debian 12 machine with apt (this one): downloads the
#                                .deb files of every other dependency into gpu-deps/ (ignored
#                                by git; carry it to the GPU machine);
#   scripts/gpu_build.sh build   on the GPU machine: unpacks them with dpkg -x into
#                                gpu-deps/root (no root needed), configures against
#                                python3's torch and builds into build-gpu/.
#
# Status: `fetch` is tested on Debian 12; `build` has not run on a GPU machine yet.
set -euo pipefail
cd "$(dirname "$0")/.."
DEPS=gpu-deps
PACKAGES=(
  libyaml-cpp-dev libyaml-cpp0.7 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  libhdf5-dev libhdf5-103-1 libhdf5-hl-100 libsz2 libaec0 libcurl4 libcli11-dev nlohmann-json3-dev
  libsentencepiece-dev libsentencepiece0 libprotobuf-dev libprotobuf32 protobuf-compiler libprotoc32
  libboost1.74-dev libgloo-dev libgtest-dev libgmock-dev
)

case "${1:-}" in
  fetch)
    mkdir -p "$DEPS"
    (cd "$DEPS" && apt-get download "${PACKAGES[@]}")
    du -sh "$DEPS"
    ;;
  build)
    torch_cmake=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
    mkdir -p "$DEPS/root"
    for deb in "$DEPS"/*.deb; do dpkg -x "$deb" "$DEPS/root"; done
    root=$(cd "$DEPS/root" && pwd)
    export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export PATH="$root/usr/bin:$PATH"   # protoc
    cmake -S . -B build-gpu -G "$(command -v ninja >/dev/null && echo Ninja || echo 'Unix Makefiles')" \
      -DCMAKE_PREFIX_PATH="$torch_cmake;$root/usr" -DCMAKE_BUILD_TYPE=Release
    cmake --build build-gpu -j "$(nproc)"
    echo "built build-gpu/thx; run with LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    ;;
  *)
    echo "usage: scripts/gpu_build.sh fetch | build" >&2
    exit 2
    ;;
esac
