#!/usr/bin/env bash
# AN4 recipe: raw audio -> Kaldi data dirs -> features -> tokenizer -> BLSTM-CTC training -> decoding + scoring.
# Usage: recipes/an4/run.sh [--stage N] [--stop-stage M] [hydra overrides ...]
#   e.g. recipes/an4/run.sh --stage 2 --stop-stage 2 features=mfcc features.nj=4
# Outputs (data/, fbank/, exp/) go to this directory, as in a Kaldi egs dir.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
python=${ASRKIT_PYTHON:-$root/.venv/bin/python}
[ -x "$python" ] || python=python3
cd "$here"
exec "$python" -m asrkit run --config-dir "$root/conf" "$@"
