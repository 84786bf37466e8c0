#!/usr/bin/env bash
# Bring your own corpus: train and decode from Kaldi data dirs prepared elsewhere.
# Usage: recipes/kaldi_dirs/run.sh data.import_dirs.train=DIR data.import_dirs.dev=DIR \
#          data.import_dirs.test=DIR [--stage N] [--stop-stage M] [hydra overrides ...]
# The imported dirs are only read; copies, features (fbank/) and experiments (exp/) go to
# this directory. Walk-through: docs/bring-your-own-corpus.md.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "$here/../lib/run_stages.sh" "$here" "$@" data=kaldi
