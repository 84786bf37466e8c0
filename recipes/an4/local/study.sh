#!/usr/bin/env bash
# The study of IBM's distributed-training claims trained to the end (docs/study.md): AN4's
# hybrid experiment is prepared through its HCLG (stages 0-5: data with 3-way speed
# perturbation, features, lexicon and LM, the GMM systems and their alignments, the graph),
# then every run of the plan not finished yet is simulated into study/ (12 epochs of the
# study's 2 x 128 BLSTM, decoded through the HCLG), and docs/study_results.md is written
# with its figures. Stop it at any time; started again it goes on where it stopped. git
# keeps each finished run's records and the step costs (study/.gitignore), so a fresh
# clone goes on where the last commit left the study and regenerates the report without
# running.
# Usage (from anywhere):
#   recipes/an4/local/study.sh [--plan ibm_sgd|sgd_sweep] [--max-runs N] [--jobs N]
#   recipes/an4/local/study.sh --plan sgd_sweep --out study_sweep   # the one-learner lr sweep
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python=${ASRKIT_PYTHON:-../../.venv/bin/python}
out=study
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
./run.sh +experiment=an4_hybrid --stop-stage 5 train.progress=false
"$python" -m asrkit study run --plan ibm_sgd --out "$out" "${args[@]}"
"$python" -m asrkit study report --out "$out" --docs ../../docs
