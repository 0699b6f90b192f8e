#!/bin/sh
# Cross-check `thx attention-probe` files with an implementation outside thx: Debian's
# python3 recomputes each layer from the paper (tests/scripts/probe_check.py).
# Exit 77 (ctest: skipped) when Debian's python3 lacks numpy, h5py or torch.
set -eu
thx="$1"
py=/usr/bin/python3
here=$(cd "$(dirname "$0")" && pwd)
if ! "$py" -c 'import numpy, h5py, torch' 2>/dev/null; then
  echo "SKIP: $py lacks numpy, h5py or torch (scripts/setup.sh installs them)"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
probe() {
  name=$1; shift
  "$thx" --log-level warn attention-probe --d-model 24 --n 6 --m 6 --batch 2 "$@" --out "$dir/$name.h5"
}
probe mh --set attention.h=4 --mask padding --bias
probe th --set attention.variant=talking_heads --set attention.h_k=3 --set attention.h=5 \
  --set attention.h_v=2 --set attention.d_k=4 --set attention.d_v=6 --mask causal --bias
probe pl --set attention.variant=project_logits --set attention.h_k=3 --set attention.h=4 --mask padding
probe pw --set attention.variant=project_weights --set attention.h=4 --set attention.h_v=6 --bias
probe gb --set attention.variant=general_bilinear --set attention.h=3 --mask padding --bias
probe dyn --set attention.variant=talking_heads --set attention.h=4 \
  --set "attention.dynamic=[X_l,M_l,X_w,M_w]" --mask causal --bias --seed 3
# (not exec: the trap above removes the folder when the shell exits)
"$py" "$here/probe_check.py" "$dir"/*.h5
