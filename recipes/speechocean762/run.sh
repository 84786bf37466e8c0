#!/usr/bin/env bash
# speechocean762 recipe: the release's Kaldi dirs (quirks fixed) -> speaker-disjoint dev ->
# features -> tokenizer + LM -> BLSTM-CTC -> decoding, scored per speaker and age group.
# Usage: recipes/speechocean762/run.sh [--stage N] [--stop-stage M] [hydra overrides ...]
#   e.g. recipes/speechocean762/run.sh data.corpus_dir=/data/speechocean762 'data.test_sets=[test]'
# Outputs (data/, fbank/, exp/) go to this directory, as in a Kaldi egs dir. RESULTS.md
# holds the figures and the commands that made them.
#   recipes/speechocean762/run.sh +experiment=so762_hybrid   (the hybrid system instead)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The corpus's experiment unless the command line names another (which builds on it).
experiment=+experiment=speechocean762
for arg in "$@"; do
  case $arg in +experiment=*) experiment= ;; esac
done
exec "$here/../lib/run_stages.sh" "$here" "$@" ${experiment:+"$experiment"}
