#!/usr/bin/env bash
# The study of IBM's distributed-training claims (docs/study.md) on simulated learners, on
# this corpus's speed-perturbed training set: prepares the two experiments the study's
# models come from (the hybrid system through its GMM alignments, stages 0-4; the CTC
# experiment on the same speed-perturbed data through its tokenizer, stages 0-3), then runs
# every study run not finished yet into study/ and writes docs/study_results.md with its
# figures. Stop it at any time; started again it goes on where it stopped. git keeps each
# finished run's records and the step costs (study/.gitignore), so a fresh clone goes on
# where the last commit left the study, and regenerates the report without running.
# Usage (from anywhere):
#   recipes/speechocean762/local/study.sh [--plan ibm|ibm_full|pilot] [--max-runs N] [--network 10gbe]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python=${ASRKIT_PYTHON:-../../.venv/bin/python}
./run.sh +experiment=so762_hybrid --stop-stage 4 train.progress=false
./run.sh data_root=data_sp feats_root=fbank_sp 'data.speed_perturb=[0.9,1.0,1.1]' \
  name=so762_study_ctc --stop-stage 3
"$python" -m asrkit study run --out study "$@"
"$python" -m asrkit study report --out study --docs ../../docs
