#!/usr/bin/env bash
# One-at-a-time GRPO ablations on the study's seed 0 (real dynamics, strict_progress reward,
# 100 steps from the warm start of an earlier study in $WARM): two streams of one thread each.
# Each run writes runs/ablate/<name>/seed0/results.json after every evaluation. $STUDY_ARGS (default
# none) adds rehearsal_study.py options to every run, before its own: STUDY_ARGS=--dry-run checks
# every run's settings and warm start without training (tests/project/test_examples.py does so).
set -u
WARM=${WARM:-runs/study}
OUT=${OUT:-runs/ablate}
run() {  # name, then the settings that differ from the study's
  local name=$1; shift
  STUDY_THREADS=1 python "$(dirname "$0")/rehearsal_study.py" --warm-from "$WARM" --seeds 0 \
    --conditions real --reward strict_progress --steps 100 --eval-every 50 --fidelity-every 100 \
    --out "$OUT/$name" ${STUDY_ARGS:-} "$@" > "$OUT/$name.log" 2>&1
}
mkdir -p "$OUT"
{ run lr1e-3 --lr 1e-3; run temp0.7 --temperature 0.7; run clip0.1 --clip-eps 0.1; } &
{ run group16 --group-size 16 --tasks-per-step 1; run kl0.05 --kl-coef 0.05; run lr1e-4 --lr 1e-4; } &
wait
