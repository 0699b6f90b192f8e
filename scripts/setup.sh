#!/usr/bin/env bash
# setup.sh: install everything thx needs on Debian 12 (bookworm), and nothing else.
# Idempotent: packages already present are not touched, and a second run does no apt work.
# This is the only install step; the build, the tests and the Dockerfile all go through it.
set -euo pipefail

PACKAGES=(
  # toolchain: clang 14 compiles thx (CMakeLists.txt picks it: a clean build in a third of GCC's
  # CPU time); g++ is its C++ library and the fallback
  g++ clang-14 cmake make ninja-build pkg-config
  # LibTorch 1.13 (CPU) and an optimized BLAS: without libopenblas0-pthread apt may pick the
  # reference BLAS, and every matmul then runs ~50x slower.
  libtorch-dev libopenblas0-pthread
  # product libraries
  libsentencepiece-dev sentencepiece libyaml-cpp-dev libspdlog-dev libfmt-dev
  libhdf5-dev libcli11-dev nlohmann-json3-dev
  # zlib: the CRC-32 every HDF5 file thx writes carries (src/common/h5.h)
  zlib1g-dev
  # TensorBoard event files: the Event/Summary messages are protobuf (src/training/tensorboard)
  libprotobuf-dev protobuf-compiler
  # data-parallel training: LibTorch exports c10d (ProcessGroupGloo, TCPStore); these are the
  # Gloo headers it needs (src/distributed)
  libgloo-dev
  # ICU: the SQuAD/ReCoRD answer normalization lowercases as Python's str.lower() does (full
  # Unicode case mapping, final sigma)
  libicu-dev
  # Boost.CRC (header-only): the CRC-32C of the TensorBoard files' TFRecord framing
  libboost-dev
  # tests; Universal Ctags: the end line of every function of src/, which a test holds to
  # 80 lines (tests/common/function_length_test.cpp)
  libgtest-dev universal-ctags
  # fixture generators and probe checkers use Debian's own /usr/bin/python3
  python3-torch python3-numpy python3-h5py
  # the independent TensorBoard reader of the tests (tests/scripts/tb_check.py): Google's
  # protobuf runtime and a CRC-32C of its own
  python3-protobuf python3-crc32c
  # plots (scripts/plot_curves.py, scripts/plot_figure1.py)
  python3-matplotlib
  # the quickstart corpus: the Linux kernel's documentation sources, 24 MB of English prose
  # (reStructuredText, GPL-2) under /usr/share/doc/linux-doc-6.1/html/_sources
  linux-doc-6.1
)

# scripts/setup.sh --fuzz adds the fuzzing toolchain of scripts/fuzz.sh: clang 14's sanitizer
# and libFuzzer runtimes (libclang_rt.fuzzer) and its OpenMP; --memcheck adds Valgrind, for
# scripts/memcheck.sh.
for a in "$@"; do
  case "$a" in
    --fuzz) PACKAGES+=(clang-14 libclang-rt-14-dev libomp-14-dev) ;;
    --memcheck) PACKAGES+=(valgrind) ;;
    *) echo "setup.sh: unknown option '$a' (--fuzz adds the fuzzing toolchain, --memcheck Valgrind)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup.sh: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "[setup] installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "[setup] all ${#PACKAGES[@]} packages present"
fi

# LibTorch links libblas.so.3 through Debian's alternatives; make sure it resolves to OpenBLAS.
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
for lib in libblas.so.3 liblapack.so.3; do
  want=/usr/lib/$arch/openblas-pthread/$lib
  alt=$lib-$arch
  if [ -e "$want" ] && [ "$(readlink -f /usr/lib/$arch/$lib)" != "$(readlink -f "$want")" ]; then
    echo "[setup] pointing $lib at OpenBLAS"
    $SUDO update-alternatives --set "$alt" "$want" >/dev/null
  fi
done
echo "[setup] BLAS: $(readlink -f /usr/lib/$arch/libblas.so.3)"
