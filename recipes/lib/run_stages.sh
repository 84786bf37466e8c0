#!/usr/bin/env bash
# Shared by the recipes' run.sh: runs asrkit's stage runner in the recipe's directory (so
# data/, fbank/ and exp/ land there, as in a Kaldi egs dir) with asrkit's configs (conf/).
# Usage (from a recipe's run.sh): exec "$root/recipes/lib/run_stages.sh" RECIPE_DIR ARGS...
set -euo pipefail
recipe=$1
shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python=${ASRKIT_PYTHON:-$root/.venv/bin/python}
[ -x "$python" ] || python=python3
cd "$recipe"
exec "$python" -m asrkit run "$@"
