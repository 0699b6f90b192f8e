#!/usr/bin/env bash
# kill_campaign.sh: SIGKILL a pretraining run at random moments, resume it each time, and check
# that no checkpoint was ever corrupt and that the run ends bit-identical to one never killed.
#
#   scripts/kill_campaign.sh [KILLS] [CONFIG]     default 20 kills of configs/t5/mini.yaml
#
# Needs build/thx and the quickstart's prepared data (scripts/quickstart.sh makes it); writes
# into runs/kill-campaign/. Checkpoints are written every 10 steps; every other kill is aimed at
# the moment a checkpoint's temporary file appears, so that some land inside a write. Every
# checkpoint present after a kill is checked by Debian's python3 on its own: the CRC-32 in its
# user block recomputed with zlib, and the file opened with h5py. The final parameters are
# compared with the uninterrupted run's, tensor by tensor, bitwise.
set -euo pipefail
cd "$(dirname "$0")/.."
kills=${1:-20}
config=${2:-configs/t5/mini.yaml}
thx=build/thx
out=runs/kill-campaign
prepared=${PREPARED:-data/prepared/quickstart}
[ -x "$thx" ] || { echo "kill_campaign.sh: build thx first" >&2; exit 2; }
[ -f "$prepared/manifest.json" ] || { echo "kill_campaign.sh: no prepared data in $prepared (run scripts/prepare_data.sh quickstart, or set PREPARED)" >&2; exit 2; }
rm -rf "$out"
mkdir -p "$out"
sets=(--set data.prepared="$prepared" --set train.steps=400 --set checkpoint.every=10 --set checkpoint.keep=3
      --set eval.every=200)
export OMP_WAIT_POLICY=PASSIVE

check_checkpoints() {  # every checkpoint file: CRC-32 recomputed, opened with h5py
  /usr/bin/python3 - "$1" <<'EOF'
import glob, sys, zlib, h5py
bad = 0
for f in sorted(glob.glob(sys.argv[1] + "/step-*.h5")):
    b = open(f, "rb").read()
    head = b[:512].split(b"\0")[0].decode().split("\n")
    crc, size = int(head[1].split()[1], 16), int(head[2].split()[1])
    ok = size == len(b) and zlib.crc32(b[512:]) == crc
    if ok:
        with h5py.File(f, "r") as h:
            ok = "params" in h and "state" in h
    if not ok:
        print("CORRUPT", f); bad += 1
sys.exit(1 if bad else 0)
EOF
}

echo "[kill] uninterrupted run"
start=$SECONDS
"$thx" --threads 1 pretrain --config "$config" "${sets[@]}" --run-dir "$out/straight" > "$out/straight.log" 2>&1
per_run=$((SECONDS - start))
echo "[kill] $per_run s; now $kills kills, half at random moments, half aimed at checkpoint writes"
survived=0 corrupt=0 in_write=0
for i in $(seq 1 "$kills"); do
  [ -d "$out/killed" ] && resume=--resume || resume=
  "$thx" --threads 1 pretrain --config "$config" "${sets[@]}" --run-dir "$out/killed" $resume >> "$out/killed.log" 2>&1 &
  pid=$!
  if [ $((i % 2)) -eq 0 ]; then
    # aimed: the moment a checkpoint's temporary file appears (the write under way), after a
    # random delay so that different writes are hit
    sleep "$(/usr/bin/python3 -c "import random; print(round(random.uniform(0.5, 5.0), 2))")"
    for _ in $(seq 1 20000); do
      compgen -G "$out/killed/checkpoints/*.tmp-*" > /dev/null && break
      kill -0 "$pid" 2> /dev/null || break
    done
  else
    sleep "$(/usr/bin/python3 -c "import random; print(round(random.uniform(1.0, $per_run / 3.0), 2))")"
  fi
  if compgen -G "$out/killed/checkpoints/*.tmp-*" > /dev/null; then in_write=$((in_write + 1)); fi
  kill -9 "$pid" 2> /dev/null || true
  wait "$pid" 2> /dev/null || true
  if check_checkpoints "$out/killed/checkpoints"; then survived=$((survived + 1)); else corrupt=$((corrupt + 1)); fi
done
echo "[kill] finishing the killed run"
"$thx" --threads 1 pretrain --config "$config" "${sets[@]}" --run-dir "$out/killed" --resume >> "$out/killed.log" 2>&1
/usr/bin/python3 - "$out/straight/checkpoints/step-00000400.h5" "$out/killed/checkpoints/step-00000400.h5" <<'EOF'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = []
a.visit(lambda n: names.append(n) if isinstance(a[n], h5py.Dataset) and n.startswith(("params", "optimizer")) else None)
diff = [n for n in names if not np.array_equal(a[n][()], b[n][()])]
print(f"[kill] final parameters and optimizer state: {len(names)} tensors, {len(diff)} differ")
sys.exit(1 if diff else 0)
EOF
left=$(find "$out"/killed/checkpoints/ -maxdepth 1 -name '*tmp-*' | wc -l)
echo "[kill] $kills SIGKILLs ($in_write while a temporary checkpoint file existed): $survived left only intact checkpoints, $corrupt corrupt; $left temporary files left in the finished run"
[ "$corrupt" -eq 0 ] && [ "$left" -eq 0 ]
