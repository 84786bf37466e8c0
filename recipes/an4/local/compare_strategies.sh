#!/usr/bin/env bash
# Train and decode AN4 once per distributed strategy with the same epochs and 2 learners,
# then print one line per strategy: name, test WER greedy and beam + LM, training wall time.
# A strategy whose decode already finished is reported, not retrained.
# Usage (from recipes/an4, after the demo has run stages 0-2): local/compare_strategies.sh [overrides...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
runs=(
  "sync|strategy=sync"
  "adpsgd-fixed|strategy=adpsgd strategy.pattern=fixed"
  "adpsgd-random|strategy=adpsgd strategy.pattern=random"
  "delay-by-one|strategy=delay_by_one strategy.staleness=1"
  "hybrid|strategy=hybrid strategy.group_size=1"
)
# One line: test WER greedy and with beam + LM, then $2 (time or note).
report() {
  echo "$1: greedy $(grep -h '^%WER' "exp/an4_2l_$1/decode_test/scoring/wer"); beam + LM $(grep -h '^%WER' "exp/an4_2l_$1/decode_beam_lm_test/scoring/wer") ($2)"
}
for run in "${runs[@]}"; do
  name=${run%%|*}
  read -r -a args <<<"${run#*|}"
  if [[ -s exp/an4_2l_$name/decode_beam_lm_test/scoring/wer && -s exp/an4_2l_$name/train_summary.json ]]; then
    # Finished before (the decode stage writes wer last): report it, do not retrain.
    report "$name" "done before; see exp/an4_2l_$name.log"
    continue
  fi
  rm -rf "exp/an4_2l_$name"
  began=$(date +%s)
  # Stage 3 (tokenizer, lexicon, LM: about a second) is built for each run, so its units
  # are always the configuration's.
  ./run.sh --stage 3 --stop-stage 5 name="an4_2l_$name" "${args[@]}" strategy.learners=2 \
    train.progress=false "$@" > "exp/an4_2l_$name.log" 2>&1
  took=$(( $(date +%s) - began ))
  report "$name" "${took} s"
done
