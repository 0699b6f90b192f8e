#!/usr/bin/env bash
# Fine-tune one mini pretrained model on the quality-evidence tasks and time each step.
#   scripts/finetune_mini.sh albert|t5 PRETRAINED_RUN OUT [THREADS [--set KEY=VALUE ...]]
# albert: configs/mini/finetune-albert.yaml, one run per task group (SST-2; RTE, MRPC, CoLA,
#         STS-B; SQuAD v1.1; RACE), each task from the pretrained weights.
# t5:     configs/mini/finetune-t5.yaml, one examples-proportional mixture of every task.
# Writes OUT/<group>/<task>.json (+ predictions) and OUT/times.tsv (group, seconds).
# SST2_STEPS (default 1000) sets the SST-2 run's length; it is evaluated every quarter.
# FINETUNE_GROUPS (albert; default "sst2 glue-small squad11 race") picks the groups. Arguments
# after THREADS go to every `thx finetune` (e.g. --set finetune.freeze_embedding=true).
set -euo pipefail
kind=$1 pretrained=$2 out=$3 threads=${4:-2}
extra=("${@:5}")
thx=${THX:-build/thx}
mkdir -p "$out"
run() {  # group, then --set overrides
  local group=$1; shift
  local start=$SECONDS
  "$thx" --threads "$threads" finetune --config "configs/mini/finetune-$kind.yaml" \
    --set finetune.pretrained="$pretrained" "$@" ${extra[@]+"${extra[@]}"} --out "$out/$group"
  printf '%s\t%s\n' "$group" $((SECONDS - start)) >> "$out/times.tsv"
}
if [[ $kind == albert ]]; then
  sst2_steps=${SST2_STEPS:-1000}
  groups=" ${FINETUNE_GROUPS:-sst2 glue-small squad11 race} "
  if [[ $groups == *" sst2 "* && ! -f $out/sst2/sst2.json ]]; then
    run sst2 --set 'finetune.tasks=[sst2]' --set finetune.steps="$sst2_steps" --set finetune.eval_every=$((sst2_steps / 4))
  fi
  if [[ $groups == *" glue-small "* ]]; then
    run glue-small --set 'finetune.tasks=[rte, mrpc, cola, stsb]' --set finetune.steps=250 --set finetune.eval_every=125
  fi
  if [[ $groups == *" squad11 "* ]]; then
    run squad11 --set 'finetune.tasks=[squad11]' --set finetune.steps=600 --set finetune.eval_every=300
  fi
  if [[ $groups == *" race "* ]]; then
    run race --set 'finetune.tasks=[race]' --set finetune.steps=200 --set finetune.eval_every=100 --set finetune.batch_size=16
  fi
else
  run mixture
fi
