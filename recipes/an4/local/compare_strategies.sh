#!/usr/bin/env bash
# Train and decode AN4 once per distributed strategy with the same epochs and 2 learners,
# then print one line per strategy: name, test WER greedy and beam + LM, training wall time.
# A strategy whose decode already finished is reported, not retrained.
# Usage (from recipes/an4, after the demo has run stages 0-2):
#   local/compare_strategies.sh [--seed N] [overrides...]
# Seed 1 (the default) writes exp/an4_2l_<strategy>; seed N writes exp/an4_2l_<strategy>_seedN.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seed=1
if [[ ${1:-} == --seed ]]; then
  seed=${2:?--seed needs a number}
  shift 2
fi
suffix=""
[[ $seed == 1 ]] || suffix="_seed$seed"
runs=(
  "sync|strategy=sync"
  "adpsgd-fixed|strategy=adpsgd strategy.pattern=fixed"
  "adpsgd-random|strategy=adpsgd strategy.pattern=random"
  "delay-by-one|strategy=delay_by_one strategy.staleness=1"
  "hybrid|strategy=hybrid strategy.group_size=1"
)
# One line for strategy $1 (its experiment: exp/$exp): test WER greedy and with beam + LM,
# then $2 (time or note).
report() {
  echo "$1 (seed $seed): greedy $(grep -h '^%WER' "exp/$exp/decode_test/scoring/wer"); beam + LM $(grep -h '^%WER' "exp/$exp/decode_beam_lm_test/scoring/wer") ($2)"
}
for run in "${runs[@]}"; do
  name=${run%%|*}
  exp="an4_2l_$name$suffix"
  read -r -a args <<<"${run#*|}"
  if [[ -s exp/$exp/decode_beam_lm_test/scoring/wer && -s exp/$exp/train_summary.json ]]; then
    # Finished before (the decode stage writes wer last): report it, do not retrain.
    report "$name" "done before; see exp/$exp.log"
    continue
  fi
  rm -rf "exp/$exp"
  began=$(date +%s)
  # Stage 3 (tokenizer, lexicon, LM: about a second) is built for each run, so its units
  # are always the configuration's.
  ./run.sh --stage 3 --stop-stage 5 name="$exp" seed="$seed" "${args[@]}" strategy.learners=2 \
    train.progress=false "$@" > "exp/$exp.log" 2>&1
  took=$(( $(date +%s) - began ))
  report "$name" "${took} s"
done
