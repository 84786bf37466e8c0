#!/usr/bin/env bash
# AN4 recipe: raw audio -> Kaldi data dirs -> features -> tokenizer -> BLSTM-CTC training -> decoding + scoring.
# Usage: recipes/an4/run.sh [--stage N] [--stop-stage M] [hydra overrides ...]
#   e.g. recipes/an4/run.sh --stage 2 --stop-stage 2 features=mfcc features.nj=4
# Outputs (data/, fbank/, exp/) go to this directory, as in a Kaldi egs dir.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "$here/../lib/run_stages.sh" "$here" "$@"
