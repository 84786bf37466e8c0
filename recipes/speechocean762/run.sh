#!/usr/bin/env bash
# speechocean762 recipe: the release's Kaldi dirs (quirks fixed) -> speaker-disjoint dev ->
# features -> tokenizer + LM -> BLSTM-CTC -> decoding, scored per speaker and age group.
# Usage: recipes/speechocean762/run.sh [--stage N] [--stop-stage M] [hydra overrides ...]
#   e.g. recipes/speechocean762/run.sh data.corpus_dir=/data/speechocean762 'data.test_sets=[test]'
# Outputs (data/, fbank/, exp/) go to this directory, as in a Kaldi egs dir. RESULTS.md
# holds the figures and the commands that made them.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "$here/../lib/run_stages.sh" "$here" "$@" +experiment=speechocean762
