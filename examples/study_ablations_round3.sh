#!/usr/bin/env bash
# Third round of one-at-a-time GRPO ablations (seed 0, real dynamics, strict_progress, from the warm
# start in $WARM), three streams of one thread each. First the baseline, advantages divided by the
# group's standard deviation (DeepSeekMath's GRPO) and rejected calls charged in the reward (150
# steps); then the step size: lr 1e-4, a 25-step lr warmup, and both (100 steps). $STUDY_ARGS (default
# none) adds rehearsal_study.py options to every run, before its own: tests/project/test_examples.py
# runs it tiny so.
set -u
WARM=${WARM:-runs/warm3}
OUT=${OUT:-runs/ablate3}
run() {  # name, steps, then the settings that differ from the study's
  local name=$1 steps=$2; shift 2
  STUDY_THREADS=1 python "$(dirname "$0")/rehearsal_study.py" --warm-from "$WARM" --seeds 0 \
    --conditions real --reward strict_progress --steps "$steps" --eval-every 50 --fidelity-every 150 \
    --out "$OUT/$name" ${STUDY_ARGS:-} "$@" > "$OUT/$name.log" 2>&1
}
mkdir -p "$OUT"
if [ "${PART:-1}" = 1 ]; then
  run baseline 150 & run scaled 150 --scale-advantages & run charged 150 --charge-rejected & wait
else
  run lr1e-4 100 --lr 1e-4 & run warmup25 100 --warmup-steps 25 & run warmup25-lr1e-4 100 --warmup-steps 25 --lr 1e-4 & wait
fi
