#!/usr/bin/env bash
# SYNC vs ADPSGD with 2 learners on the recipe's configuration for a few epochs: per epoch,
# the dev loss and greedy WER against training wall time (train_summary.json), then each
# learner's throughput, communication and data wait (learners.json).
# Usage (from recipes/speechocean762, after run.sh has run stages 0-3):
#   local/compare_strategies.sh [EPOCHS (default 3)] [overrides...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
epochs=${1:-3}
shift || true
python=${ASRKIT_PYTHON:-../../.venv/bin/python}
base=$(./run.sh --cfg "$@" | sed -n 's/^name: //p')
for strategy in sync adpsgd; do
  name=so762_2l_$strategy
  rm -rf "exp/$name"
  mkdir -p "exp/$name"
  # The tokenizer, lexicon and LM of the recipe's run are shared: copied, not rebuilt.
  cp -r "exp/$base/tokenizer" "exp/$base/lang" "exp/$name/"
  ./run.sh --stage 4 --stop-stage 4 name="$name" strategy="$strategy" strategy.learners=2 \
    train.epochs="$epochs" train.average_last=0 train.progress=false "$@" > "exp/$name.log" 2>&1
done
"$python" - <<'PY'
import json
from pathlib import Path

print(f"{'strategy':<8} {'epoch':>5} {'wall s':>7} {'dev loss':>9} {'dev WER%':>9}")
for strategy in ("sync", "adpsgd"):
    summary = json.loads(Path(f"exp/so762_2l_{strategy}/train_summary.json").read_text())
    wall = 0.0
    for h in summary["history"]:
        wall += h["seconds"]
        print(f"{strategy:<8} {h['epoch']:>5} {wall:>7.0f} {h['loss']:>9.3f} {h['wer']:>9.2f}")
for strategy in ("sync", "adpsgd"):
    learners = json.loads(Path(f"exp/so762_2l_{strategy}/learners.json").read_text())
    for d in learners["learners_detail"]:
        print(f"{strategy} learner {d['rank']}: {d['samples_per_s']:.2f} utt/s, comm wait "
              f"{d.get('comm_wait_s') or 0:.1f} s, data wait {d['data_wait_s']:.2f} s")
PY
