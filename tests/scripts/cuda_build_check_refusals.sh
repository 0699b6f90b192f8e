#!/bin/sh
# scripts/cuda_build_check.sh's refusals, which come before it builds anything: a second
# argument, a folder that is not a LibTorch, and a LibTorch that is not 2.x (Debian's 1.13 is
# checked without an argument). Each is one line on stderr naming what was given and what is
# allowed, exit 2, and no build folder made. Exit 77 (ctest: skipped) where nvcc is missing,
# which the script refuses first.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
script=$root/scripts/cuda_build_check.sh
if ! command -v nvcc > /dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "SKIP: no nvcc here (the script refuses that first)"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# A LibTorch 1.x tree: only its version header, as the script reads it.
mkdir -p "$dir/old/include/torch/csrc/api/include/torch"
printf '#define TORCH_VERSION_MAJOR 1\n#define TORCH_VERSION_MINOR 13\n#define TORCH_VERSION_PATCH 0\n' \
  > "$dir/old/include/torch/csrc/api/include/torch/version.h"
before=$(ls -d "$root"/build-cudacheck* 2> /dev/null || true)
fail=0
expect() {  # expect WORDS ARGS...: exit 2, one line on stderr that holds WORDS
  words=$1; shift
  rc=0
  "$script" "$@" > "$dir/out" 2> "$dir/err" || rc=$?
  lines=$(wc -l < "$dir/err")
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$words" "$dir/err" || [ -s "$dir/out" ]; then
    echo "FAIL: cuda_build_check.sh $*: exit $rc, $lines lines on stderr, expected 2, 1 holding '$words':"
    cat "$dir/err" "$dir/out"
    fail=1
  else
    echo "ok: $(cat "$dir/err")"
  fi
}
expect "takes at most one argument, a LibTorch 2.x folder (got 2: 'a b')" a b
expect "$dir/none: not a LibTorch folder" "$dir/none"
expect "is LibTorch '1.13.0'; the argument is for a LibTorch 2.x" "$dir/old"
after=$(ls -d "$root"/build-cudacheck* 2> /dev/null || true)
if [ "$before" != "$after" ]; then
  echo "FAIL: a refusal made a build folder: $after"
  fail=1
fi
exit $fail
